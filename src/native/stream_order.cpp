// stream_order.cpp — the event side of the cross_stream_reuse policy (Note [Cross-stream reuse]
// in stream_order.hpp): fences recorded on the streams that last used a block, their queries, the
// waits that order a new user stream after them, and the host waits an unmap needs.
#include "native/stream_order.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "core/format.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

stream_order::~stream_order() {
  for (std::size_t i = 0; i < count_; ++i) {
    for (std::size_t f = 0; f < streams_[i].fence_count; ++f) device_->events.release(streams_[i].fences[f].event);
  }
}

bool stream_order::add(stream_t stream) {
  if (bit(stream) != 0) return true;
  if (count_ == max_streams) return false;
  streams_[count_] = stream_slot{};
  streams_[count_].stream = stream;
  ++count_;
  return true;
}

void stream_order::fail(const char* what, stream_t stream, const drv_result& result) const {
  throw cuda_error(std::string("streampool: cross_stream_reuse: ") + what + " on stream " +
                       core::format_pointer(stream) + " failed: " + device_->drv->describe(result) +
                       "; nothing was handed out (the allocation may be retried)",
                   result.native);
}

drv_result stream_order::record_fence(stream_slot& a) {
  // A new fence covers every free made so far on this stream: those came after their uses.
  const event_t fresh = device_->events.acquire();
  const drv_result recorded = device_->drv->event_record(fresh, a.stream);
  if (!recorded.ok()) {
    device_->events.release(fresh);
    return recorded;
  }
  // A wait already made on a dropped fence keeps its meaning (cudaStreamWaitEvent takes the
  // event's state at the call), so its event can go back to the pool now.
  if (a.fence_count == max_fences) {
    device_->events.release(a.fences[0].event);
    std::move(a.fences.begin() + 1, a.fences.end(), a.fences.begin());
    --a.fence_count;
  }
  a.fences[a.fence_count++] = {fresh, ticket_};
  ++fences_;
  return recorded;
}

const stream_order::fence* stream_order::covering(const stream_slot& a, std::uint64_t ticket) noexcept {
  for (std::size_t i = 0; i < a.fence_count; ++i) {
    if (a.fences[i].ticket >= ticket) return &a.fences[i];
  }
  return nullptr;
}

stream_order::fence stream_order::fence_for(stream_slot& a, std::uint64_t ticket) {
  if (const fence* f = covering(a, ticket)) return *f;
  const drv_result recorded = record_fence(a);
  if (!recorded.ok()) fail("cudaEventRecord of a fence", a.stream, recorded);
  return a.fences[a.fence_count - 1];
}

void stream_order::mark_done(stream_slot& a, std::uint64_t ticket) noexcept {
  a.done_ticket = std::max(a.done_ticket, ticket);
  std::size_t done = 0;
  while (done < a.fence_count && a.fences[done].ticket <= a.done_ticket) device_->events.release(a.fences[done++].event);
  if (done == 0) return;
  std::move(a.fences.begin() + static_cast<std::ptrdiff_t>(done), a.fences.begin() + static_cast<std::ptrdiff_t>(a.fence_count),
            a.fences.begin());
  a.fence_count -= done;
}

bool stream_order::fence_done(stream_slot& a, fence f) {
  const drv_result r = device_->drv->event_query(f.event);
  if (r.ok()) {
    mark_done(a, f.ticket);
    return true;
  }
  if (r.code != status::not_ready) fail("cudaEventQuery of a fence", a.stream, r);
  return false;
}

void stream_order::checkpoint() noexcept {
  for (std::size_t i = 0; i < count_; ++i) {
    stream_slot& a = streams_[i];
    const std::uint64_t newest = a.fence_count != 0 ? a.fences[a.fence_count - 1].ticket : a.done_ticket;
    if (a.freed_ticket <= newest) continue;
    try {
      (void)record_fence(a);  // refused: skipped (Note [Fence checkpoints])
    } catch (const std::exception&) {
      // no event could be created (the pool is out of them): skipped as well
    }
  }
}

bool stream_order::order_after(std::uint64_t users, std::uint64_t ticket, stream_t stream) {
  const std::uint64_t own = bit(stream);
  std::uint64_t others = users & ~own;
  if (others == 0) return true;
  if (device_->capture_underway()) {
    // Only what needs no event may be handed out during a capture (Note [Cross-stream reuse]).
    for (std::uint64_t rest = others; rest != 0; rest &= rest - 1) {
      const stream_slot& a = streams_[static_cast<std::size_t>(__builtin_ctzll(rest))];
      if (a.done_ticket < ticket) return false;
    }
    return true;
  }
  stream_slot* b = nullptr;
  for (std::size_t i = 0; i < count_; ++i) {
    if (streams_[i].stream == stream) b = &streams_[i];
  }
  for (; others != 0; others &= others - 1) {
    const auto index = static_cast<std::size_t>(__builtin_ctzll(others));
    stream_slot& a = streams_[index];
    if (a.done_ticket >= ticket) continue;
    if (b != nullptr && b->waited[index] >= ticket) continue;
    const fence f = fence_for(a, ticket);
    if (fence_done(a, f)) continue;
    const drv_result waited = device_->drv->stream_wait_event(stream, f.event);
    if (!waited.ok()) fail("cudaStreamWaitEvent for a fence", stream, waited);
    if (b != nullptr) b->waited[index] = f.ticket;
    ++waits_;
  }
  ++reuses_;
  return true;
}

void stream_order::complete(std::uint64_t users, std::uint64_t ticket) {
  for (; users != 0; users &= users - 1) {
    stream_slot& a = streams_[static_cast<std::size_t>(__builtin_ctzll(users))];
    if (a.done_ticket >= ticket) continue;
    const fence f = fence_for(a, ticket);
    if (fence_done(a, f)) continue;
    const drv_result r = device_->drv->event_synchronize(f.event);
    if (!r.ok()) fail("cudaEventSynchronize of a fence", a.stream, r);
    mark_done(a, f.ticket);
    ++host_waits_;
  }
}

void stream_order::complete_all() {
  std::uint64_t all = count_ == max_streams ? ~std::uint64_t{0} : (std::uint64_t{1} << count_) - 1;
  complete(all, ticket_);
}

bool stream_order::completed(std::uint64_t users, std::uint64_t ticket) {
  for (; users != 0; users &= users - 1) {
    stream_slot& a = streams_[static_cast<std::size_t>(__builtin_ctzll(users))];
    if (a.done_ticket >= ticket) continue;
    const fence* f = covering(a, ticket);
    if (f == nullptr || !fence_done(a, *f)) return false;
  }
  return true;
}

}  // namespace streampool::native
