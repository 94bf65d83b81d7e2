// expandable_leftovers.cpp — pages of expandable segments that the driver has not taken back yet
// (Note [Leftover pages] in expandable.hpp): giving back the pages of a failed growth, keeping
// what cannot be given back now, and retrying at the next release point. Device mutex held.
#include <algorithm>

#include "native/device_state.hpp"

namespace streampool::native {
namespace {

void* va_of(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }

}  // namespace

void device_state::give_back(segment& seg, std::size_t first, std::size_t mapped, std::size_t count) noexcept {
  // leftovers_ has room for `count` more (reserved before the growth's first driver call).
  for (std::size_t i = 0; i < count; ++i) {
    const std::uintptr_t va = i < mapped ? seg.base + (first + i) * seg.page : 0;
    leftover_page page{seg.handles[first + i], seg.page, seg.small, va, false};
    seg.handles[first + i] = 0;
    if (!retire(page)) keep_leftover(page);
  }
  while (!seg.handles.empty() && seg.handles.back() == 0) seg.handles.pop_back();
}

bool device_state::retire(leftover_page& page) noexcept {
  // Unmap and release are illegal while a capture is underway (they could invalidate it).
  if (capture_underway()) return false;
  if (!page.released) {
    if (!driver_->vmm_release(page.handle).ok()) return false;
    page.released = true;  // a mapped page's memory goes with its mapping
  }
  if (page.va != 0) {
    if (!driver_->vmm_unmap(va_of(page.va), page.bytes).ok()) return false;
    page.va = 0;
  }
  return true;
}

std::size_t device_state::take_leftovers(vmm_handle_t* handles, std::size_t wanted, std::size_t page) noexcept {
  std::size_t taken = 0;
  std::erase_if(leftovers_, [&](const leftover_page& p) {
    if (taken == wanted || p.va != 0 || p.released || p.bytes != page) return false;
    handles[taken++] = p.handle;
    const auto amount = static_cast<std::int64_t>(p.bytes);
    counters_.reserved_bytes[0].decrease(amount);  // counted again when mapped
    counters_.reserved_bytes[p.small ? 1 : 2].decrease(amount);
    return true;
  });
  return taken;
}

void device_state::keep_leftover(const leftover_page& page) noexcept {
  leftovers_.push_back(page);  // the caller reserved the room
  const auto amount = static_cast<std::int64_t>(page.bytes);
  counters_.reserved_bytes[0].increase(amount);
  counters_.reserved_bytes[page.small ? 1 : 2].increase(amount);
}

void device_state::release_leftovers() noexcept {
  std::erase_if(leftovers_, [this](leftover_page& page) {
    if (!retire(page)) return false;
    const auto amount = static_cast<std::int64_t>(page.bytes);
    counters_.reserved_bytes[0].decrease(amount);
    counters_.reserved_bytes[page.small ? 1 : 2].decrease(amount);
    return true;
  });
}

bool device_state::leftover_in(std::uintptr_t lo, std::size_t bytes) const noexcept {
  return std::any_of(leftovers_.begin(), leftovers_.end(), [&](const leftover_page& page) {
    return page.va != 0 && page.va < lo + bytes && lo < page.va + page.bytes;
  });
}

}  // namespace streampool::native
