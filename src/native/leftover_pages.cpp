// leftover_pages.cpp — keeping, reusing and giving back the pages of Note [Leftover pages] (and
// the spare pages of Note [Moving free pages]).
#include "native/leftover_pages.hpp"

#include <algorithm>

namespace streampool::native {
namespace {

void* va_of(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }

}  // namespace

bool leftover_pages::retire(leftover_page& page) noexcept {
  // Unmap and release are illegal while a capture is underway (they could invalidate it).
  if (device_->capture_underway()) return false;
  if (!page.released) {
    if (!device_->drv->vmm_release(page.handle).ok()) return false;
    page.released = true;  // a mapped page's memory goes with its mapping
  }
  if (page.va != 0) {
    if (!device_->drv->vmm_unmap(va_of(page.va), page.bytes).ok()) return false;
    page.va = 0;
  }
  return true;
}

std::size_t leftover_pages::take(vmm_handle_t* handles, std::size_t wanted, std::size_t page, bool with_hazards,
                                 page_hazard& hazard) noexcept {
  std::size_t taken = 0;
  std::erase_if(pages_, [&](const leftover_page& p) {
    if (taken == wanted || p.va != 0 || p.released || p.bytes != page) return false;
    if (p.hazard_streams != 0 && !with_hazards) return false;
    hazard.streams |= p.hazard_streams;
    hazard.ticket = std::max(hazard.ticket, p.hazard_ticket);
    handles[taken++] = p.handle;
    counters_->change_reserved(p.small, -static_cast<std::int64_t>(p.bytes));  // counted again when mapped
    return true;
  });
  return taken;
}

bool leftover_pages::has_spare(vmm_handle_t handle) const noexcept {
  return std::any_of(pages_.begin(), pages_.end(),
                     [handle](const leftover_page& p) { return p.spare && !p.released && p.handle == handle; });
}

page_hazard leftover_pages::take_spare(vmm_handle_t handle) noexcept {
  page_hazard hazard;
  std::erase_if(pages_, [&](const leftover_page& p) {
    if (!p.spare || p.released || p.handle != handle) return false;
    counters_->change_reserved(p.small, -static_cast<std::int64_t>(p.bytes));  // counted again when mapped
    hazard = {p.hazard_streams, p.hazard_ticket};
    return true;
  });
  return hazard;
}

void leftover_pages::keep(const leftover_page& page) noexcept {
  pages_.push_back(page);  // the caller reserved the room
  counters_->change_reserved(page.small, static_cast<std::int64_t>(page.bytes));
}

void leftover_pages::release(bool spares_too) noexcept {
  std::erase_if(pages_, [this, spares_too](leftover_page& page) {
    if ((page.spare && !spares_too) || !retire(page)) return false;
    counters_->change_reserved(page.small, -static_cast<std::int64_t>(page.bytes));
    return true;
  });
}

bool leftover_pages::mapped_in(std::uintptr_t lo, std::size_t bytes) const noexcept {
  return std::any_of(pages_.begin(), pages_.end(), [&](const leftover_page& page) {
    return page.va != 0 && page.va < lo + bytes && lo < page.va + page.bytes;
  });
}

void leftover_pages::append(int device, std::vector<leftover_page_info>& out) const {
  // Pages counted in reserved_bytes that no segment lists (Note [Leftover pages]).
  for (const leftover_page& page : pages_) {
    out.push_back({device, page.va, page.bytes, !page.small});
  }
}

std::size_t leftover_pages::spare_bytes(std::size_t page) const noexcept {
  std::size_t bytes = 0;
  for (const leftover_page& p : pages_) {
    if (p.spare && p.va == 0 && !p.released && p.bytes == page) bytes += p.bytes;
  }
  return bytes;
}

}  // namespace streampool::native
