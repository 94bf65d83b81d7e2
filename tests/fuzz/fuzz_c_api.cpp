// fuzz_c_api.cpp — libFuzzer target for the C API: the input picks a backend configuration and
// then a sequence of streampool_alloc / free (right and wrong arguments, foreign, interior and
// stale pointers) / record_stream / empty_cache / set_memory_fraction / stats / snapshot calls on
// an allocator over the simulated driver (two devices, non-eager streams), installed with
// c_api_impl::c_api_install. Nothing may crash, and every status must agree with a model of the live
// allocations: NULL exactly when the status is not OK, a freed pointer with the arguments of its
// allocation succeeds, anything else is STREAMPOOL_ERROR_INVALID_ARGUMENT and frees nothing, the
// statistics count the model's live allocations; at the end nothing leaks.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "c_api/c_api_internal.hpp"
#include "fuzz/fuzz_test_support.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"

namespace {

using namespace streampool;

constexpr const char* configs[] = {
    "backend:native",
    "backend:native,max_split_size_mb:40,roundup_power2_divisions:4",
    "backend:native,garbage_collection_threshold:0.6,per_process_memory_fraction:0.7",
    "backend:cudaMallocAsync",
};

struct live_rec {
  std::size_t size;
  int device;  ///< as passed (-1 = current device), which the free must repeat
  void* stream;
  int real_device;
};

class session {
 public:
  explicit session(fuzz::byte_reader& in) : in_(in) {
    const std::size_t config = in_.pick(std::size(configs));
    async_ = config == 3;
    sim_options options;
    options.device_count = 2;
    options.capacity = 256 * mib;
    options.eager_completion = false;
    sim_ = std::make_shared<sim_driver>(options);
    for (int d = 0; d < 2; ++d) {
      for (int i = 0; i < 2; ++i) fuzz::check(sim_->stream_create(d, &streams_[d][i]).ok(), "stream_create");
    }
    (void)c_api_impl::c_api_uninstall();
    c_api_impl::c_api_install(make_allocator(parse_config(configs[config]), sim_));
  }

  ~session() { (void)c_api_impl::c_api_uninstall(); }

  void run() {
    for (int step = 0; step < 256 && !in_.empty(); ++step) {
      switch (in_.pick(10)) {
        case 0: case 1: alloc(); break;
        case 2: free_live(); break;
        case 3: free_wrong_arguments(); break;
        case 4: free_bad_pointer(); break;
        case 5: record_stream(); break;
        case 6: expect_status(streampool_empty_cache(), STREAMPOOL_OK, "empty_cache"); break;
        case 7: fraction(); break;
        case 8: stats(); break;
        default: sim_->complete_all(); break;
      }
    }
    finish();
  }

 private:
  void expect_status(int status, int expected, const std::string& what) {
    fuzz::check(status == expected, what + ": status " + std::to_string(status) + ", expected " +
                                        std::to_string(expected) + " (" + streampool_last_error() + ")");
    fuzz::check(streampool_last_status() == status, what + ": streampool_last_status() disagrees");
    fuzz::check((status == STREAMPOOL_OK) == (std::string(streampool_last_error()).empty()),
                what + ": a message must be set exactly when the call failed");
  }

  /// Choice 0 is the legacy stream (of device 0, the current device), else a created stream.
  void* stream_of(std::size_t choice, int device) {
    if (device < 0 || device > 1) return nullptr;
    if (choice == 0 && device == 0) return nullptr;
    return streams_[device][choice % 2];
  }

  std::size_t size_of() {
    switch (in_.pick(6)) {
      case 0: return in_.u8();                                  // 0..255 (0: NULL and OK)
      case 1: return 1 + in_.u16();                             // small pool
      case 2: return 1 + (std::size_t{in_.u32()} % (24 * mib));  // large pool
      case 3: return 1 + (std::size_t{in_.u32()} % (300 * mib));  // may exceed the device
      case 4: return std::numeric_limits<std::size_t>::max() - in_.u8();  // wrapped negative sizes
      default: return std::size_t{1} << in_.pick(64);
    }
  }

  void alloc() {
    const std::size_t size = size_of();
    const int device_choice = static_cast<int>(in_.pick(8));
    const int device = device_choice < 6 ? device_choice % 2 : (device_choice == 6 ? -1 : 2 + in_.u8());
    void* stream = stream_of(in_.pick(3), device == -1 ? 0 : device);
    void* p = streampool_alloc(size, device, stream);
    const int status = streampool_last_status();
    if (size == 0) {
      fuzz::check(p == nullptr && status == STREAMPOOL_OK, "alloc(0) must be NULL with status OK");
      return;
    }
    fuzz::check((p == nullptr) == (status != STREAMPOOL_OK), "alloc: NULL exactly when the status is not OK");
    if (device > 1) {
      fuzz::check(status == STREAMPOOL_ERROR_INVALID_ARGUMENT, "alloc on a device out of range: invalid argument");
      return;
    }
    if (size >= (std::size_t{1} << 60)) {
      fuzz::check(status == STREAMPOOL_ERROR_OUT_OF_MEMORY, "alloc of 1 EiB or more: out of memory");
      return;
    }
    if (p == nullptr) {
      fuzz::check(status == STREAMPOOL_ERROR_OUT_OF_MEMORY, std::string("alloc failed with an unexpected status: ") +
                                                                 streampool_last_error());
      return;
    }
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    fuzz::check(a % (async_ ? 256 : 512) == 0, "alloc: misaligned pointer");
    const int real_device = device == -1 ? 0 : device;
    // No overlap with a live allocation of the same device.
    auto next = live_.lower_bound(p);
    if (next != live_.end() && next->second.real_device == real_device) {
      fuzz::check(reinterpret_cast<std::uintptr_t>(next->first) >= a + size, "alloc overlaps a live allocation");
    }
    if (next != live_.begin()) {
      const auto prev = std::prev(next);
      if (prev->second.real_device == real_device) {
        fuzz::check(reinterpret_cast<std::uintptr_t>(prev->first) + prev->second.size <= a,
                    "alloc overlaps a live allocation");
      }
    }
    live_[p] = {size, device, stream, real_device};
    if (history_.size() < 64) history_.push_back(p);
  }

  std::map<void*, live_rec>::iterator pick_live() {
    auto it = live_.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(in_.pick(live_.size())));
    return it;
  }

  void free_live() {
    if (live_.empty()) return alloc();
    const auto it = pick_live();
    streampool_free(it->first, it->second.size, it->second.device, it->second.stream);
    expect_status(streampool_last_status(), STREAMPOOL_OK, "free of a live allocation");
    live_.erase(it);
  }

  void free_wrong_arguments() {
    if (live_.empty()) return alloc();
    const auto it = pick_live();
    live_rec wrong = it->second;
    switch (in_.pick(3)) {
      case 0: wrong.size += 1 + in_.u8(); break;
      case 1: wrong.device = wrong.device == 0 ? 1 : 0; break;
      default: wrong.stream = wrong.stream == nullptr ? streams_[0][0] : nullptr; break;
    }
    streampool_free(it->first, wrong.size, wrong.device, wrong.stream);
    // Freed anyway, the mismatch reported once (Note [Mismatched free], src/c_api/c_api.cpp).
    expect_status(streampool_last_status(), STREAMPOOL_OK, "free with mismatched arguments");
    live_.erase(it);
  }

  void free_bad_pointer() {
    void* p = nullptr;
    std::size_t size = 1;
    int device = 0;
    void* stream = nullptr;
    switch (in_.pick(4)) {
      case 0: p = &host_object_; break;
      case 1:
        if (live_.empty()) return;
        p = static_cast<char*>(pick_live()->first) + 1 + in_.u8();
        break;
      case 2:
        if (history_.empty()) return;
        p = history_[in_.pick(history_.size())];  // stale, or live again (then with its own arguments)
        if (const auto it = live_.find(p); it != live_.end()) {
          size = it->second.size;
          device = it->second.device;
          stream = it->second.stream;
          streampool_free(p, size, device, stream);
          expect_status(streampool_last_status(), STREAMPOOL_OK, "free of an address allocated again");
          live_.erase(it);
          return;
        }
        break;
      default: p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(in_.u64()) | 1); break;
    }
    if (live_.contains(p)) return;
    streampool_free(p, size, device, stream);
    expect_status(streampool_last_status(), p == nullptr ? STREAMPOOL_OK : STREAMPOOL_ERROR_INVALID_ARGUMENT,
                  "free of a pointer that is not live");
  }

  void record_stream() {
    if (live_.empty() || in_.pick(4) == 0) {
      expect_status(streampool_record_stream(&host_object_, nullptr), STREAMPOOL_ERROR_INVALID_ARGUMENT,
                    "record_stream of a foreign pointer");
      return;
    }
    const auto it = pick_live();
    void* stream = stream_of(1 + in_.pick(2), it->second.real_device);
    expect_status(streampool_record_stream(it->first, stream), STREAMPOOL_OK, "record_stream of a live pointer");
  }

  void fraction() {
    static constexpr double values[] = {0.0, 0.3, 0.5, 1.0, -0.1, 1.5};
    const std::size_t i = in_.pick(std::size(values) + 1);
    const double f = i < std::size(values) ? values[i] : std::nan("");
    const int device = static_cast<int>(in_.pick(3));  // 2 is out of range
    const bool valid = f >= 0.0 && f <= 1.0 && device < 2;
    expect_status(streampool_set_memory_fraction(f, device), valid ? STREAMPOOL_OK : STREAMPOOL_ERROR_INVALID_ARGUMENT,
                  "set_memory_fraction");
  }

  void stats() {
    const int device = static_cast<int>(in_.pick(2));
    const char* json = streampool_stats_json(device);
    fuzz::check(json != nullptr, "stats_json of a valid device returned NULL");
    std::int64_t live = 0;
    for (const auto& [p, rec] : live_) live += rec.real_device == device;
    const std::string expected = "\"allocation.all.current\":" + std::to_string(live) + ",";
    fuzz::check(std::string(json).find(expected) != std::string::npos, "stats_json disagrees with the live count");
    fuzz::check(streampool_snapshot_json() != nullptr, "snapshot_json returned NULL");
  }

  void finish() {
    for (const auto& [p, rec] : live_) {
      streampool_free(p, rec.size, rec.device, rec.stream);
      expect_status(streampool_last_status(), STREAMPOOL_OK, "final free");
    }
    live_.clear();
    sim_->complete_all();
    expect_status(streampool_empty_cache(), STREAMPOOL_OK, "final empty_cache");
    for (int d = 0; d < 2; ++d) {
      fuzz::check(sim_->bytes_in_use(d) == 0, "device memory leaked after freeing everything and empty_cache");
    }
  }

  fuzz::byte_reader& in_;
  bool async_ = false;
  std::shared_ptr<sim_driver> sim_;
  void* streams_[2][2] = {};
  std::map<void*, live_rec> live_;
  std::vector<void*> history_;
  int host_object_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::byte_reader in(data, size);
  session s(in);
  s.run();
  return 0;
}
