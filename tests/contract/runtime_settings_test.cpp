// runtime_settings_test.cpp — settings changed while the allocator runs (allocator::set_settings,
// Note [Settings changed at run time] in src/config/runtime_settings.cpp), on every backend and
// driver, in the steps of PyTorch's test_cuda.py test_allocator_settings: the size rules of the
// native backend follow each change at the next allocation, PyTorch's three reset keys go back to
// their defaults, bad strings and keys that cannot change are refused with nothing changed, and
// settings() shows the change and where it came from.
#include <string>

#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

class runtime_settings_test : public backend_test {
 protected:
  /// The bytes the allocator accounts for one allocation of `bytes` (allocated_bytes grows by it).
  std::size_t accounted(std::size_t bytes) {
    const std::int64_t before = alloc_->stats().allocated_bytes[0].current;
    void* p = alloc_->allocate(bytes);
    const std::int64_t after = alloc_->stats().allocated_bytes[0].current;
    alloc_->deallocate(p);
    alloc_->empty_cache();
    return static_cast<std::size_t>(after - before);
  }
};

constexpr std::size_t nbytes = 84 * mib;  // PyTorch's test: 21 Mi floats

TEST_P(runtime_settings_test, RoundupDivisionsFollowEachChangeAndResetAsPyTorchDoes) {
  alloc_->set_settings("");
  EXPECT_EQ(accounted(nbytes), nbytes);
  alloc_->set_settings("roundup_power2_divisions:4");
  // Native: 84 MiB rounds to 96 MiB with 4 divisions; cudaMallocAsync has no size rules (PyTorch's
  // test skips these checks for it) and counts the request.
  EXPECT_EQ(accounted(nbytes), is_native() ? 96 * mib : nbytes);
  alloc_->set_settings("garbage_collection_threshold:0.5,max_split_size_mb:40");
  EXPECT_EQ(accounted(nbytes), nbytes) << "roundup_power2_divisions went back to its default";
  alloc_->set_settings("garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
  EXPECT_EQ(accounted(nbytes), is_native() ? 88 * mib : nbytes);
  EXPECT_EQ(accounted(400 * mib), is_native() ? 512 * mib : 400 * mib);
  alloc_->set_settings("release_lock_on_cudamalloc:True");
  EXPECT_EQ(accounted(nbytes), nbytes);
}

TEST_P(runtime_settings_test, SettingsShowTheChangeAndWhereItCameFrom) {
  alloc_->set_settings("max_split_size_mb:40,garbage_collection_threshold:0.5");
  const allocator_config now = alloc_->settings();
  EXPECT_EQ(now.max_split_size, 40 * mib);
  EXPECT_EQ(now.garbage_collection_threshold, 0.5);
  EXPECT_EQ(now.source_of(config_key::max_split_size_mb), config_source::runtime);
  EXPECT_EQ(alloc_->config().max_split_size, allocator_config::unlimited) << "config() is as made";
  EXPECT_NE(to_string(now).find("set at run time"), std::string::npos) << to_string(now);
  // The text is a config string that parses back to the same values (tune reads it from snapshots).
  const allocator_config reparsed = parse_config(now.text);
  EXPECT_EQ(reparsed.max_split_size, 40 * mib) << now.text;
  EXPECT_EQ(reparsed.garbage_collection_threshold, 0.5) << now.text;
}

TEST_P(runtime_settings_test, BadChangesAreRefusedAndChangeNothing) {
  alloc_->set_settings("roundup_power2_divisions:4");
  for (const char* bad : {"foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
                          "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
                          "pinned_num_register_threads:none", "pinned_num_register_threads:1024"}) {
    EXPECT_THROW(alloc_->set_settings(bad), config_error) << bad;
  }
  // Valid, but fixed when the allocator is made.
  for (const char* fixed : {"large_segment_size_mb:40", "cross_stream_reuse:True", "pinned_use_cuda_host_register:True"}) {
    try {
      alloc_->set_settings(fixed);
      ADD_FAILURE() << fixed << " was accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot be changed at run time"), std::string::npos) << e.what();
    }
  }
  const char* other_backend = is_native() ? "backend:cudaMallocAsync" : "backend:native";
  EXPECT_THROW(alloc_->set_settings(other_backend), config_error);
  EXPECT_NO_THROW(alloc_->set_settings(is_native() ? "backend:native" : "backend:cudaMallocAsync"));
  alloc_->set_settings("roundup_power2_divisions:4");
  EXPECT_EQ(accounted(nbytes), is_native() ? 96 * mib : nbytes) << "the refusals changed nothing";
}

TEST_P(runtime_settings_test, FractionChangesOnlyWhenNamed) {
  alloc_->set_memory_fraction(0.5);
  alloc_->set_settings("max_split_size_mb:40");
  EXPECT_EQ(alloc_->memory_fraction(), 0.5) << "a change that does not name the fraction keeps the cap";
  alloc_->set_settings("per_process_memory_fraction:0.25");
  EXPECT_EQ(alloc_->memory_fraction(), 0.25);
  alloc_->set_settings("per_process_memory_fraction:1.0");
}

TEST_P(runtime_settings_test, GraphCaptureRecordStreamReuseCanBeTurnedOnAndOff) {
  // PyTorch's test_graph_capture_reclaim_* turn it on with _set_allocator_settings before capturing.
  alloc_->set_settings("graph_capture_record_stream_reuse:True");
  EXPECT_TRUE(alloc_->settings().graph_capture_record_stream_reuse);
  const stream_t s = new_stream();
  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, [s](stream_t x) { return x == s; });
  void* p = alloc_->allocate(4096, s);
  alloc_->deallocate(p);
  alloc_->end_allocate_to_pool(pool);
  alloc_->set_settings("graph_capture_record_stream_reuse:False");
  EXPECT_FALSE(alloc_->settings().graph_capture_record_stream_reuse);
  alloc_->release_pool(pool);
  synchronize();
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0);
}

TEST_P(runtime_settings_test, ExpandableSegmentsApplyToNewSegments) {
  if (!is_native()) GTEST_SKIP() << "expandable_segments is a key of the native backend";
  if (GetParam().real_device) {
    device_info info;
    check(*driver_, driver_->get_device_info(0, &info), "get_device_info");
    if (!info.vmm_supported) GTEST_SKIP() << "the device has no virtual memory management";
  }
  void* before = alloc_->allocate(30 * mib);
  alloc_->set_settings("expandable_segments:True");
  void* after = alloc_->allocate(30 * mib);
  alloc_->set_settings("expandable_segments:False");
  void* off_again = alloc_->allocate(30 * mib);
  bool seen_before = false, seen_after = false, seen_off = false;
  for (const segment_info& s : alloc_->snapshot().segments) {
    const auto within = [&](void* p) {
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      return a >= s.address && a < s.address + s.total_size;
    };
    if (within(before)) { seen_before = true; EXPECT_FALSE(s.is_expandable); }
    if (within(after)) { seen_after = true; EXPECT_TRUE(s.is_expandable); }
    if (within(off_again)) { seen_off = true; EXPECT_FALSE(s.is_expandable); }
  }
  EXPECT_TRUE(seen_before && seen_after && seen_off);
  for (void* p : {before, after, off_again}) alloc_->deallocate(p);
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0);
}

INSTANTIATE_TEST_SUITE_P(every_backend, runtime_settings_test, ::testing::ValuesIn(all_backend_cases()),
                         backend_case_name);

}  // namespace
}  // namespace streampool::testing
