// oom_reporter.cpp — the out-of-memory error of the cudaMallocAsync backend (oom_reporter.hpp):
// the shared diagnostic of Note [OOM message] filled with this backend's figures, plus one sentence
// on what the backend already tried.
//
// Note [OOM figures of the cudaMallocAsync backend]
// "Reserved" is the pool's ReservedMemCurrent (read now), "allocated" our live allocations. The pool
// does not expose its largest free range, so the message gives no largest-free-block figure (the
// field holds reserved minus held bytes, an upper bound). The figures are marked as a
// stream-ordered pool's, so the shared message never recommends native-only keys for block
// splitting; it compares the request with the pool's cache (ReservedMemCurrent - UsedMemCurrent,
// read now) and, knowing whether the pool was trimmed, skipped for a capture, or the cap refused
// the request, says how to release it (Note [OOM advice for a stream-ordered pool] in
// src/core/oom_message.cpp). The per-stream figure lists the bytes of frees deferred until a
// capture ends, the only memory this backend holds that is free from the user's point of view.
#include "async/oom_reporter.hpp"

#include <cstdint>
#include <map>
#include <string>

#include "core/format.hpp"
#include "core/oom_message.hpp"

namespace streampool::async {

out_of_memory oom_reporter::report(const oom_request& request) {
  const std::size_t bytes = request.bytes;
  const oom_cause cause = request.cause;
  const bool over_cap = cause == oom_cause::cap;
  pool_->sample_reserved(*accounting_, private_pools_->bytes());
  std::size_t device_free = 0;
  std::size_t device_total = cap_->total_memory();
  if (!driver_->mem_get_info(device_, &device_free, &device_total).ok()) {
    device_free = 0;
    device_total = cap_->total_memory();
  }

  core::oom_figures figures;
  figures.device = device_;
  figures.requested = bytes;
  figures.alloc_size = bytes;  // cudaMallocAsync is asked for the exact request
  figures.device_total = device_total;
  figures.device_free = device_free;
  figures.allowed = cap_->allowed();
  figures.cap_set = cap_->capping();  // Note [A cap of 0 bytes] in src/core/oom_message.cpp
  figures.allocated = accounting_->allocated_bytes();
  figures.reserved = accounting_->reserved_bytes();
  const std::size_t held = request.held;  // Note [Memory fraction]
  figures.largest_free_block = figures.reserved > held ? figures.reserved - held : 0;
  std::map<stream_t, std::size_t> deferred_per_stream;
  captures_->for_each_deferred([&](const deferred_free& item) {
    deferred_per_stream[item.record.stream] += async_footprint(item.record.size);
  });
  figures.cached_per_stream.assign(deferred_per_stream.begin(), deferred_per_stream.end());
  figures.backend = "cudaMallocAsync";
  figures.stream_ordered_pool = true;
  std::uint64_t used = 0;
  // The pool's own reserve: reserved less the private pools' blocks (Note [Private pools of the
  // cudaMallocAsync backend]), whose idle bytes are listed separately.
  const std::size_t private_bytes = private_pools_->bytes();
  const std::size_t pool_reserved = figures.reserved > private_bytes ? figures.reserved - private_bytes : 0;
  if (pool_->used_bytes(&used) && used <= pool_reserved) {
    figures.pool_unused = pool_reserved - static_cast<std::size_t>(used);
  } else {
    figures.pool_unused = figures.largest_free_block;  // unreadable: our own upper bound
  }
  figures.cap_refused = over_cap;
  if (cause == oom_cause::driver) {
    if (captures_->underway()) figures.pool_trim_state = core::pool_trim::skipped_for_capture;
    else if (request.retried) figures.pool_trim_state = core::pool_trim::trimmed;
  }

  std::string message = core::build_oom_message(figures);
  // Note [PyTorch's words for an async OOM]: PyTorch's cudaMallocAsync backend says "Allocation on
  // device N would exceed allowed memory" for every OOM, and PyTorch's own tests (test_cuda.py's
  // test_out_of_memory and test_graph_capture_oom with backend:cudaMallocAsync) match that text, so
  // every cause below says it too, with its own reason after it.
  const std::string would_exceed = " Allocation on device " + std::to_string(device_) + " would exceed allowed memory";
  if (cause == oom_cause::device_size) {
    message += would_exceed + ": the request is larger than device " + std::to_string(device_) +
               "'s total memory (" + format_size(cap_->total_memory()) +
               "), so it cannot succeed; the driver was not asked.";
  } else if (over_cap) {
    message += would_exceed + ": this allocator holds " + format_size(held) +
               " and the per_process_memory_fraction cap is " + format_size(cap_->limit()) +
               "; the driver was not asked.";
  } else if (captures_->underway()) {
    message += would_exceed + " (the driver is out of memory). A capture is underway on this device, so the "
               "pool could not be synchronised and trimmed before giving up.";
  } else if (request.retried) {
    message += would_exceed + " (the driver is out of memory). The device was synchronised and the pool "
               "trimmed, and the request retried once.";
  } else {
    message += would_exceed + " (the driver is out of memory).";
  }

  accounting_->on_oom();
  trace_.record(trace_action::oom, device_free, bytes, request.stream, request.pool);
  return out_of_memory(std::move(message), bytes, device_);
}

}  // namespace streampool::async
