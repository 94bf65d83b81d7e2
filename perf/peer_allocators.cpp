// peer_allocators.cpp — the `cuda` and `async-raw` peers as allocator subclasses over the driver
// interface (peer_allocators.hpp). Statistics: allocated = requested bytes of live blocks (the raw
// calls expose no rounding); reserved = live malloc'd bytes (`cuda`) or the pool's reserved_mem
// attributes (`async-raw`); device mallocs = device mallocs (`cuda`) or malloc_async calls
// (`async-raw`: PyTorch's definition for its cudaMallocAsync backend, which ours follows too).
#include "peer_allocators.hpp"

#include <string>

#include "peer_table.hpp"
#include "streampool/errors.hpp"

namespace streampool::bench {
namespace {

/// What both peers share: the table, the counters and the hooks a peer does not support.
class peer_base : public allocator {
 protected:
  peer_base(std::string name, std::shared_ptr<driver> drv)
      : allocator(allocator_config{}, std::move(drv)), name_(std::move(name)) {}

  [[noreturn]] void unsupported(const char* what) const {
    throw error(name_ + " peer: " + what + " is not supported by this peer");
  }
  peer_block take(void* ptr) {
    std::optional<peer_block> block = table_.take(ptr);
    if (!block) throw error(name_ + " peer: deallocate of a pointer it did not hand out (or already freed)");
    bytes_.sub(static_cast<std::int64_t>(block->bytes));
    return std::move(*block);
  }
  void add(void* ptr, std::size_t bytes, stream_t stream, int device) {
    table_.insert(ptr, peer_block{bytes, stream, device, {}});
    bytes_.add(static_cast<std::int64_t>(bytes));
  }
  [[noreturn]] void fail(const char* call, drv_result result, std::size_t bytes, int device) const {
    const std::string what = name_ + " peer: " + call + " of " + std::to_string(bytes) + " bytes failed: " +
                             device_driver().describe(result);
    if (result.code == status::out_of_memory) throw out_of_memory(what, bytes, device);
    throw cuda_error(what, result.native);
  }
  /// Statistics of pool `all` (the peers do not split small/large). allocation.peak is not
  /// tracked (only byte peaks are); cumulative figures count since construction.
  memory_stats base_stats() const {
    const peer_counts counts = table_.counts();
    memory_stats s;
    stat bytes;
    bytes.current = bytes_.current.load(std::memory_order_relaxed);
    bytes.peak = bytes_.peak.load(std::memory_order_relaxed);
    bytes.allocated = counts.bytes_allocated;
    bytes.freed = counts.bytes_freed;
    stat blocks;
    blocks.current = counts.live;
    blocks.allocated = counts.allocations;
    blocks.freed = counts.frees;
    s.allocated_bytes[0] = s.requested_bytes[0] = s.active_bytes[0] = bytes;
    s.allocation[0] = s.active[0] = blocks;
    s.num_device_alloc = counts.allocations;
    s.num_device_free = counts.frees;
    return s;
  }

  void do_record_stream(void* ptr, stream_t stream) override {
    if (!table_.record(ptr, stream)) throw error(name_ + " peer: record_stream of a pointer it did not hand out");
  }
  void do_reset_peak_stats(int) override { bytes_.reset_peak(); }
  void do_reset_accumulated_stats(int) override { unsupported("reset_accumulated_stats"); }
  memory_snapshot do_snapshot() const override { return {}; }
  void do_record_history(bool enabled, std::size_t) override {
    if (enabled) unsupported("record_history");
  }
  std::vector<trace_entry> do_trace(int) const override { return {}; }
  void do_set_memory_fraction(int, double) override { unsupported("set_memory_fraction"); }
  double do_memory_fraction(int) const override { return 1.0; }
  void do_begin_allocate_to_pool(int, mempool_id, stream_filter) override { unsupported("private pools"); }
  void do_end_allocate_to_pool(int, mempool_id) override { unsupported("private pools"); }
  void do_release_pool(int, mempool_id) override { unsupported("private pools"); }

  std::string name_;
  mutable peer_table table_;
  byte_gauge bytes_;
};

/// `cuda`: every request is a device malloc, every free a device free (which synchronises the
/// device, so record_stream needs nothing more).
class raw_device_peer final : public peer_base {
 public:
  explicit raw_device_peer(std::shared_ptr<driver> drv) : peer_base("cuda", std::move(drv)) {}
  ~raw_device_peer() override {
    for (auto& [ptr, block] : table_.take_all()) (void)device_driver().free(block.device, ptr);
  }

 private:
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override {
    void* ptr = nullptr;
    const drv_result result = device_driver().malloc(device, bytes, &ptr, false);
    if (!result.ok()) fail("device malloc", result, bytes, device);
    add(ptr, bytes, stream, device);
    return ptr;
  }
  void do_deallocate(void* ptr) override {
    const peer_block block = take(ptr);
    check(device_driver(), device_driver().free(block.device, ptr), "cuda peer: device free");
  }
  void do_empty_cache() override {}
  // Every block is its own device malloc: reserved = allocated, segments = allocations.
  memory_stats do_stats(int) const override {
    memory_stats s = base_stats();
    s.reserved_bytes[0] = s.allocated_bytes[0];
    s.segment[0] = s.allocation[0];
    return s;
  }
};

/// `async-raw`: malloc_async / free_async on the device's default pool, as a program calling
/// cudaMallocAsync/cudaFreeAsync directly would. The pool's settings are left as the driver has
/// them (release threshold included). record_stream: at free time an event is recorded on each
/// recorded stream and the allocation stream waits for it before the free_async.
class raw_async_peer final : public peer_base {
 public:
  explicit raw_async_peer(std::shared_ptr<driver> drv) : peer_base("async-raw", std::move(drv)) {
    int count = 0;
    check(device_driver(), device_driver().device_count(&count), "async-raw peer: device_count");
    pools_.resize(static_cast<std::size_t>(count));
    for (int d = 0; d < count; ++d) {
      check(device_driver(), device_driver().pool_get_default(d, &pools_[static_cast<std::size_t>(d)]),
            "async-raw peer: pool_get_default");
      // Start from an empty pool, so the figures are this run's (a previous run may have left
      // memory in the shared default pool).
      (void)device_driver().device_synchronize(d);
      (void)device_driver().pool_trim_to(pools_[static_cast<std::size_t>(d)], 0);
      (void)device_driver().pool_set_attr(pools_[static_cast<std::size_t>(d)], pool_attr::reserved_mem_high, 0);
    }
  }
  ~raw_async_peer() override {
    for (auto& [ptr, block] : table_.take_all()) (void)device_driver().free_async(ptr, block.stream);
    for (const auto& [device, event] : events_) (void)device_driver().event_destroy(device, event);
    for (std::size_t d = 0; d < pools_.size(); ++d) {
      (void)device_driver().device_synchronize(static_cast<int>(d));
      (void)device_driver().pool_trim_to(pools_[d], 0);
    }
  }

 private:
  std::uint64_t pool_reserved(std::size_t device, pool_attr attr) const {
    std::uint64_t value = 0;
    (void)device_driver().pool_get_attr(pools_[device], attr, &value);
    return value;
  }
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override {
    void* ptr = nullptr;
    const auto d = static_cast<std::size_t>(device);
    const drv_result result = device_driver().malloc_async(pools_[d], bytes, stream, &ptr);
    if (!result.ok()) fail("malloc_async", result, bytes, device);
    add(ptr, bytes, stream, device);
    return ptr;
  }
  void do_deallocate(void* ptr) override {
    const peer_block block = take(ptr);
    for (const stream_t used : block.recorded) {
      const event_t event = take_event(block.device);
      check(device_driver(), device_driver().event_record(event, used), "async-raw peer: event_record");
      check(device_driver(), device_driver().stream_wait_event(block.stream, event), "async-raw peer: stream_wait_event");
      give_back_event(event);
    }
    check(device_driver(), device_driver().free_async(ptr, block.stream), "async-raw peer: free_async");
  }
  void do_empty_cache() override {
    for (std::size_t d = 0; d < pools_.size(); ++d) {
      check(device_driver(), device_driver().device_synchronize(static_cast<int>(d)), "async-raw peer: synchronize");
      check(device_driver(), device_driver().pool_trim_to(pools_[d], 0), "async-raw peer: pool_trim_to");
    }
  }
  memory_stats do_stats(int device) const override {
    memory_stats s = base_stats();
    const auto d = static_cast<std::size_t>(device);
    s.reserved_bytes[0].current = static_cast<std::int64_t>(pool_reserved(d, pool_attr::reserved_mem_current));
    s.reserved_bytes[0].peak = static_cast<std::int64_t>(pool_reserved(d, pool_attr::reserved_mem_high));
    return s;
  }
  void do_reset_peak_stats(int device) override {
    peer_base::do_reset_peak_stats(device);
    (void)device_driver().pool_set_attr(pools_[static_cast<std::size_t>(device)], pool_attr::reserved_mem_high, 0);
  }
  // Events are reused: a stream wait captures the event's state when it is enqueued.
  event_t take_event(int device) {
    {
      const std::lock_guard lock(events_mutex_);
      if (!idle_events_.empty()) {
        const event_t event = idle_events_.back();
        idle_events_.pop_back();
        return event;
      }
    }
    event_t event = nullptr;
    check(device_driver(), device_driver().event_create(device, &event), "async-raw peer: event_create");
    const std::lock_guard lock(events_mutex_);
    events_.emplace_back(device, event);
    return event;
  }
  void give_back_event(event_t event) {
    const std::lock_guard lock(events_mutex_);
    idle_events_.push_back(event);
  }

  std::vector<mempool_t> pools_;
  std::mutex events_mutex_;
  std::vector<std::pair<int, event_t>> events_;  // every event created, with its device
  std::vector<event_t> idle_events_;  // single-device runs: events are not matched to devices
};

}  // namespace

std::unique_ptr<allocator> make_raw_device_peer(const backend_spec&, std::shared_ptr<driver> drv) {
  return std::make_unique<raw_device_peer>(std::move(drv));
}

std::unique_ptr<allocator> make_raw_async_peer(const backend_spec&, std::shared_ptr<driver> drv) {
  return std::make_unique<raw_async_peer>(std::move(drv));
}

}  // namespace streampool::bench
