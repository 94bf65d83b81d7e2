// segment_pages.cpp — the page mechanics of expandable segments (segment_pages.hpp): mapping pages
// for a growth (handles from the leftover pages first, then new ones; map; access), releasing and
// unmapping the free pages of a block, the statistics, trace and segment-map writes of each change,
// the leftover pages where the driver refuses (Note [Leftover pages]) and the teardown.
#include "native/segment_pages.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/format.hpp"
#include "native/stream_arena.hpp"
#include "native/stream_order.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {
namespace {

void* va_of(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }

}  // namespace

segment_pages::segment_pages(device_context& device, segment_map& segments, segment_counters& counters) noexcept
    : device_(&device),
      drv_(device.drv),
      index_(device.index),
      segments_(&segments),
      counters_(&counters),
      leftovers_(device, counters) {}

// --- mapping ------------------------------------------------------------------------------------------

block* segment_pages::map(stream_arena& a, block* b, std::size_t bytes) {
  const std::size_t page = b->seg->page;
  const std::size_t wanted = (bytes + page - 1) / page;
  if (ghosts_.empty()) return map_fresh(a, b, wanted * page);
  // Runs of pages to take back as they are, and of pages to map anew, in address order. A handle
  // may have two ghosts (mapped at one place, moved on, mapped elsewhere, moved again): only one of
  // them can be taken back, so a run of those ends where a handle comes round again.
  std::size_t run = 0;
  const bool back = revivable(b->ptr) != nullptr;
  while (run < wanted) {
    const ghost_mapping* g = revivable(b->ptr + run * page);
    if ((g != nullptr) != back) break;
    if (back && run > 0 && std::any_of(ghosts_.begin(), ghosts_.end(), [&](const ghost_mapping& x) {
          return x.handle == g->handle && x.va >= b->ptr && x.va < b->ptr + run * page;
        })) {
      break;
    }
    ++run;
  }
  block* merged = back ? revive(a, b, run) : map_fresh(a, b, run * page);
  if (merged == nullptr || run == wanted) return merged;
  return map(a, merged->next, (wanted - run) * page);  // merged->next: the unmapped rest of b
}

const ghost_mapping* segment_pages::revivable(std::uintptr_t va) const noexcept {
  for (const ghost_mapping& g : ghosts_) {
    if (g.va == va) return leftovers_.has_spare(g.handle) ? &g : nullptr;
  }
  return nullptr;
}

block* segment_pages::revive(stream_arena& a, block* b, std::size_t count) {
  segment& seg = *b->seg;
  const std::size_t page = seg.page;
  const std::size_t first = (b->ptr - seg.base) / page;
  const std::uintptr_t lo = b->ptr;
  a.reserve_blocks();
  if (seg.handles.size() < first + count) seg.handles.resize(first + count, 0);
  segments_->insert(lo, count * page, &a);  // the last call that may throw
  page_hazard hazard;
  for (std::size_t i = 0; i < count; ++i) {
    const auto g = std::find_if(ghosts_.begin(), ghosts_.end(),
                                [va = lo + i * page](const ghost_mapping& x) { return x.va == va; });
    seg.handles[first + i] = g->handle;
    // The spare's last uses are the handle's newest (it may have been mapped elsewhere since this
    // ghost was left: an older ghost of the same handle); the ghost's own are older or the same.
    const page_hazard spare = leftovers_.take_spare(g->handle);  // count_mapping counts it again
    hazard.streams |= g->hazard.streams | spare.streams;
    hazard.ticket = std::max({hazard.ticket, g->hazard.ticket, spare.ticket});
    *g = ghosts_.back();
    ghosts_.pop_back();
  }
  seg.mapped_pages += count;
  count_mapping(a, seg, lo, count * page, true);
  block* merged = a.blocks().mark_mapped(b, count * page);
  merged->hazard_streams |= hazard.streams;  // their last uses, when not seen done (page_moves.cpp)
  merged->hazard_ticket = std::max(merged->hazard_ticket, hazard.ticket);
  return merged;
}

block* segment_pages::map_fresh(stream_arena& a, block* b, std::size_t bytes) {
  segment& seg = *b->seg;
  const std::size_t page = seg.page;
  const std::size_t first = (b->ptr - seg.base) / page;
  const std::size_t wanted = (bytes + page - 1) / page;
  const std::uintptr_t lo = b->ptr;
  if (!leftovers_.empty()) {
    leftovers_.release(/*spares_too=*/false);  // spare pages are for this growth
    if (leftovers_.mapped_in(lo, wanted * page)) return nullptr;  // still mapped there: not now (Note [Leftover pages])
  }
  if (!ghosts_.empty()) settle_ghosts(a.order(), lo, wanted * page, /*wait=*/true);  // Note [Moving pages still in use]
  // What may throw std::bad_alloc, before the first driver call.
  a.reserve_blocks();
  if (seg.handles.size() < first + wanted) seg.handles.resize(first + wanted, 0);
  leftovers_.reserve(wanted);

  // 1. One physical handle per page: leftover pages first, then new ones. On out-of-memory the
  // pages of this call go back and the ladder goes on (docs/pytorch-compatibility.md §2.13) — except during a capture,
  // where giving back is illegal: what was obtained is mapped and kept as free memory.
  const bool capture = device_->capture_underway();
  page_hazard hazard;
  // Spares with last uses only where they can be ordered: a shared arena, outside a capture.
  const bool with_hazards = !capture && a.order() != nullptr;
  std::size_t count = leftovers_.take(&seg.handles[first], wanted, page, with_hazards, hazard);
  drv_result result{};
  while (count < wanted && (result = drv_->vmm_create(index_, page, &seg.handles[first + count])).ok()) ++count;
  if (count < wanted && !(result.code == status::out_of_memory && capture && count > 0)) {
    give_back(seg, first, 0, count);
    if (result.code == status::out_of_memory) return nullptr;
    throw cuda_error("streampool: cuMemCreate of " + format_size(page) + " on device " + std::to_string(index_) +
                         " failed: " + drv_->describe(result),
                     result.native);
  }
  const bool short_of_pages = count < wanted;
  result = {};

  // 2. Map page by page, then grant access to what got mapped.
  std::size_t mapped = 0;
  while (mapped < count && (result = drv_->vmm_map(va_of(lo + mapped * page), page, seg.handles[first + mapped])).ok()) {
    ++mapped;
  }
  const char* what = "cuMemMap";
  std::size_t usable = mapped;
  if (mapped > 0) {
    const drv_result access = drv_->vmm_set_access(va_of(lo), mapped * page, index_);
    if (!access.ok()) {
      usable = 0;
      if (result.ok()) {
        result = access;
        what = "cuMemSetAccess";
      }
    }
  }

  // 3. Keep what is usable (everything, or during a capture what got mapped with access); the
  // rest goes back, or stays a leftover when it may not go back now.
  const std::size_t keep = result.ok() ? count : (capture ? usable : 0);
  block* merged = nullptr;
  if (keep > 0) {
    try {
      segments_->insert(lo, keep * page, &a);
    } catch (...) {
      give_back(seg, first, mapped, count);
      throw;
    }
    seg.mapped_pages += keep;
    count_mapping(a, seg, lo, keep * page, true);
    merged = a.blocks().mark_mapped(b, keep * page);
    if (hazard.streams != 0) {  // spare pages whose old mapping may still be in use: order the next user
      merged->hazard_streams |= hazard.streams;
      merged->hazard_ticket = std::max(merged->hazard_ticket, hazard.ticket);
    }
  }
  if (keep < count) give_back(seg, first + keep, mapped > keep ? mapped - keep : 0, count - keep);
  if (!result.ok()) {
    if (result.code == status::out_of_memory) return nullptr;
    throw cuda_error("streampool: " + std::string(what) + " of " + format_size(count * page) + " at " +
                         core::format_pointer(lo) + " on device " + std::to_string(index_) +
                         " failed: " + drv_->describe(result),
                     result.native);
  }
  return short_of_pages ? nullptr : merged;
}

void segment_pages::count_mapping(const stream_arena& a, const segment& seg, std::uintptr_t lo, std::size_t bytes,
                                   bool mapped, bool reserved_changes) {
  // docs/pytorch-compatibility.md §2.13: a map is a device alloc and an unmap a device free; `segment` does not change.
  const auto amount = static_cast<std::int64_t>(bytes);
  if (reserved_changes) counters_->change_reserved(seg.small, mapped ? amount : -amount);
  ++(mapped ? counters_->num_device_alloc : counters_->num_device_free);
  device_->trace.record(mapped ? trace_action::segment_map : trace_action::segment_unmap, index_, lo, bytes,
                        a.stream(), a.pool_id());
}

// --- unmapping -----------------------------------------------------------------------------------------

void segment_pages::unmap(stream_arena& a, segment& seg, block* b) {
  // Per page: release the handle (legal while mapped: the memory goes with the mapping), then
  // unmap. A refused call leaves that page and the ones after it mapped, as they were; a page
  // whose handle is already released is marked so the next attempt only unmaps it.
  const std::size_t page = seg.page;
  const auto [first, last] = whole_pages(b);
  a.reserve_blocks();
  std::size_t done = 0;
  drv_result result{};
  const char* what = "cuMemRelease";
  for (std::size_t i = first; i < last; ++i, ++done) {
    if (seg.handles[i] != released_handle) {
      result = drv_->vmm_release(seg.handles[i]);
      if (!result.ok()) break;
      seg.handles[i] = released_handle;
    }
    result = drv_->vmm_unmap(va_of(seg.base + i * page), page);
    if (!result.ok()) {
      what = "cuMemUnmap";
      break;
    }
    seg.handles[i] = 0;
  }
  forget(a, seg, b, first, done, /*reserved_changes=*/true);
  if (!result.ok()) {
    throw cuda_error(std::string("streampool: ") + what + " of a free page on device " + std::to_string(index_) +
                         " failed: " + drv_->describe(result) + "; the page stays mapped until an empty_cache succeeds",
                     result.native);
  }
}

void segment_pages::forget(stream_arena& a, segment& seg, block* b, std::size_t first, std::size_t count,
                           bool reserved_changes) {
  if (count == 0) return;
  const std::uintptr_t lo = seg.base + first * seg.page;
  const std::size_t len = count * seg.page;
  segments_->erase(lo, len);
  seg.mapped_pages -= count;
  while (!seg.handles.empty() && seg.handles.back() == 0) seg.handles.pop_back();
  count_mapping(a, seg, lo, len, false, reserved_changes);
  (void)a.blocks().mark_unmapped(b, lo, len);
}

// --- ghost mappings (Note [Moving pages still in use]) -------------------------------------------------

void segment_pages::settle_ghosts(stream_order* order, std::uintptr_t lo, std::size_t bytes, bool wait) {
  for (std::size_t i = 0; i < ghosts_.size();) {
    const ghost_mapping g = ghosts_[i];
    if (g.va + g.bytes <= lo || g.va >= lo + bytes) {
      ++i;
      continue;
    }
    if (order != nullptr && !order->completed(g.hazard.streams, g.hazard.ticket)) {
      if (!wait) {
        ++i;
        continue;
      }
      order->complete(g.hazard.streams, g.hazard.ticket);
    }
    const drv_result result = drv_->vmm_unmap(va_of(g.va), g.bytes);
    if (!result.ok()) {
      if (!wait) {
        ++i;
        continue;
      }
      throw cuda_error("streampool: cuMemUnmap of a moved page's old mapping at " + core::format_pointer(g.va) +
                           " on device " + std::to_string(index_) + " failed: " + drv_->describe(result) +
                           "; it stays mapped and is retried at the next growth or empty_cache",
                       result.native);
    }
    ghosts_[i] = ghosts_.back();
    ghosts_.pop_back();
  }
}

bool segment_pages::ghost_in(std::uintptr_t lo, std::size_t bytes) const noexcept {
  for (const ghost_mapping& g : ghosts_) {
    if (g.va < lo + bytes && g.va + g.bytes > lo) return true;
  }
  return false;
}

// --- leftover pages (Note [Leftover pages]) ----------------------------------------------------------

void segment_pages::give_back(segment& seg, std::size_t first, std::size_t mapped, std::size_t count) noexcept {
  // leftovers_ has room for `count` more (reserved before the growth's first driver call).
  for (std::size_t i = 0; i < count; ++i) {
    const std::uintptr_t va = i < mapped ? seg.base + (first + i) * seg.page : 0;
    leftover_page page{seg.handles[first + i], seg.page, seg.small, va, false};
    seg.handles[first + i] = 0;
    if (!leftovers_.retire(page)) leftovers_.keep(page);
  }
  while (!seg.handles.empty() && seg.handles.back() == 0) seg.handles.pop_back();
}

// --- teardown ---------------------------------------------------------------------------------------

void segment_pages::release_at_exit(const segment& seg) noexcept {
  // Status form: the allocator is going away. Unmap does not synchronise; wait for the device
  // (the arena's stream may be gone by now, the device is always valid).
  driver& drv = *drv_;
  const bool ghosts = ghost_in(seg.base, seg.size);
  if (seg.mapped_pages != 0 || ghosts) (void)drv.device_synchronize(index_);
  if (ghosts) {
    std::erase_if(ghosts_, [&](const ghost_mapping& g) {
      if (g.va < seg.base || g.va >= seg.base + seg.size) return false;
      (void)drv.vmm_unmap(va_of(g.va), g.bytes);
      return true;
    });
  }
  for (std::size_t i = 0; i < seg.handles.size(); ++i) {
    if (seg.handles[i] == 0) continue;
    (void)drv.vmm_unmap(va_of(seg.base + i * seg.page), seg.page);
    if (seg.handles[i] != released_handle) (void)drv.vmm_release(seg.handles[i]);
  }
  (void)drv.vmm_free(va_of(seg.base), seg.size);
}

}  // namespace streampool::native
