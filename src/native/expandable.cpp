// expandable.cpp — the driver side of expandable segments (Note [Expandable segments] in
// expandable.hpp): the page geometry, probing VMM support (with the fallback to normal segments),
// reserving, mapping pages for the OOM ladder's new-segment step, unmapping the free pages of an
// arena for release_cached, the leftover pages (Note [Leftover pages]) and the teardown. Everything
// runs under the device mutex and the arena's lock.
#include "native/expandable.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>

#include "core/format.hpp"
#include "native/stream_arena.hpp"
#include "streampool/allocator.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {
namespace {

constexpr std::size_t round_up(std::size_t bytes, std::size_t unit) noexcept {
  return (bytes + unit - 1) / unit * unit;
}

void* va_of(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }

}  // namespace

std::size_t vmm_geometry::reservation(bool small, std::size_t request) const noexcept {
  const std::size_t p = page(small);
  std::size_t bytes = 0;
  if (reserve_bytes != 0) {
    bytes = round_up(reserve_bytes, p);
  } else {
    const double pages = std::ceil(static_cast<double>(total_memory) * reserve_fraction / static_cast<double>(p));
    bytes = static_cast<std::size_t>(pages) * p;
  }
  return std::max({bytes, round_up(request, p), p});
}

vmm_geometry make_vmm_geometry(const device_info& info, const allocator_config& config) noexcept {
  const std::size_t unit = std::lcm(std::max<std::size_t>(info.vmm_granularity, 1), small_buffer);
  vmm_geometry g;
  g.small_page = round_up(small_buffer, unit);
  // cross_stream_reuse moves free pages where they are needed: 2 MiB pages in both pool kinds
  // waste less at the edges of the blocks (Note [Moving free pages]).
  g.large_page = config.cross_stream_reuse ? g.small_page : round_up(config.large_segment_size, unit);
  g.alignment = std::bit_floor(unit);  // >= 2 MiB: page boundaries are granule boundaries
  g.total_memory = info.total_memory;
  g.reserve_fraction = config.expandable_segments_reserve;
  g.reserve_bytes = config.expandable_segments_reserve_bytes;
  return g;
}

// --- mode -------------------------------------------------------------------------------------------

expandable_segments::expandable_segments(device_context& device, segment_map& segments, segment_counters& counters,
                                         std::atomic<bool>& vmm_warned)
    : device_(&device),
      drv_(device.drv),
      index_(device.index),
      segments_(&segments),
      counters_(&counters),
      vmm_warned_(&vmm_warned),
      mode_(device.config->expandable_segments ? vmm_mode::unknown : vmm_mode::off),
      leftovers_(device, counters) {}

bool expandable_segments::enabled() {
  if (mode_ == vmm_mode::unknown) {
    device_info info;
    const drv_result result = drv_->get_device_info(index_, &info);
    if (!result.ok()) {
      throw cuda_error("streampool: cudaGetDeviceProperties of device " + std::to_string(index_) +
                           " failed: " + drv_->describe(result),
                       result.native);
    }
    if (!info.vmm_supported) {
      fall_back_to_normal_segments("the device reports no virtual memory management support");
    } else {
      geometry_ = make_vmm_geometry(info, *device_->config);
      mode_ = vmm_mode::on;
    }
  }
  return mode_ == vmm_mode::on;
}

void expandable_segments::fall_back_to_normal_segments(const std::string& reason) {
  mode_ = vmm_mode::off;
  if (vmm_warned_->exchange(true)) return;
  warn("expandable_segments:True: device " + std::to_string(index_) + " (" +
       std::string(drv_->name()) + " driver): " + reason +
       "; the native backend uses normal segments there (fragmentation as without the option)");
}

// --- growth -----------------------------------------------------------------------------------------

block* expandable_segments::grow(stream_arena& a, std::size_t rounded, bool small, bool fresh) {
  if (a.order() != nullptr && !fresh) reclaim_pages(a, rounded, small);  // Note [Moving free pages]
  block* c = fresh ? nullptr : a.blocks().find_growable(small, rounded);
  if (c == nullptr) c = reserve_segment(a, small, rounded);
  if (c == nullptr) return nullptr;
  if (!c->mapped) c = map_pages(a, c, std::min(c->size, rounded));
  // c (if any) is a free mapped block; the growable run continues with unmapped blocks, each
  // followed by at most one free block that the mapping merges in.
  while (c != nullptr && c->size < rounded) {
    block* n = c->next;
    if (n == nullptr || n->mapped) return nullptr;  // cannot happen (find_growable checked the run)
    c = map_pages(a, n, std::min(rounded - c->size, n->size));
  }
  if (c == nullptr) return nullptr;
  a.blocks().remove_free(c);
  return c;
}

block* expandable_segments::reserve_segment(stream_arena& a, bool small, std::size_t rounded) {
  const std::size_t bytes = geometry_.reservation(small, rounded);
  a.reserve_blocks();
  auto seg = std::make_unique<segment>();
  void* va = nullptr;
  const drv_result result = drv_->vmm_reserve(index_, bytes, geometry_.alignment, &va);
  if (result.code == status::not_supported) {
    fall_back_to_normal_segments("cuMemAddressReserve: " + drv_->describe(result));
    return nullptr;
  }
  if (result.code == status::out_of_memory) return nullptr;  // address space exhausted
  if (!result.ok()) {
    throw cuda_error("streampool: cuMemAddressReserve of " + format_size(bytes) + " on device " +
                         std::to_string(index_) + " failed: " + drv_->describe(result),
                     result.native);
  }
  seg->base = reinterpret_cast<std::uintptr_t>(va);
  seg->size = bytes;
  seg->small = small;
  seg->expandable = true;
  seg->page = geometry_.page(small);
  a.attach_expandable(seg.get());
  return seg.release()->head;
}

block* expandable_segments::map_pages(stream_arena& a, block* b, std::size_t bytes) {
  segment& seg = *b->seg;
  const std::size_t page = seg.page;
  const std::size_t first = (b->ptr - seg.base) / page;
  const std::size_t wanted = (bytes + page - 1) / page;
  const std::uintptr_t lo = b->ptr;
  if (!leftovers_.empty()) {
    leftovers_.release(/*spares_too=*/false);  // spare pages are for this growth
    if (leftovers_.mapped_in(lo, wanted * page)) return nullptr;  // still mapped there: not now (Note [Leftover pages])
  }
  // What may throw std::bad_alloc, before the first driver call.
  a.reserve_blocks();
  if (seg.handles.size() < first + wanted) seg.handles.resize(first + wanted, 0);
  leftovers_.reserve(wanted);

  // 1. One physical handle per page: leftover pages first, then new ones. On out-of-memory the
  // pages of this call go back and the ladder goes on (docs/pytorch-compatibility.md §2.13) — except during a capture,
  // where giving back is illegal: what was obtained is mapped and kept as free memory.
  const bool capture = device_->capture_underway();
  std::size_t count = leftovers_.take(&seg.handles[first], wanted, page);
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

void expandable_segments::count_mapping(const stream_arena& a, const segment& seg, std::uintptr_t lo,
                                        std::size_t bytes, bool mapped, bool reserved_changes) {
  // docs/pytorch-compatibility.md §2.13: a map is a device alloc and an unmap a device free; `segment` does not change.
  const auto amount = static_cast<std::int64_t>(bytes);
  if (reserved_changes) counters_->change_reserved(seg.small, mapped ? amount : -amount);
  ++(mapped ? counters_->num_device_alloc : counters_->num_device_free);
  device_->trace.record(mapped ? trace_action::segment_map : trace_action::segment_unmap, index_, lo, bytes,
                        a.stream(), a.pool_id());
}

// --- shrinking ----------------------------------------------------------------------------------------

void expandable_segments::unmap_free_pages(stream_arena& a) {
  bool synchronized = false;
  std::vector<block*> frees;
  for (segment* seg = a.segments(); seg != nullptr;) {
    segment* next = seg->next;
    if (seg->expandable) {
      frees.clear();
      for (block* b = seg->head; b != nullptr; b = b->next) {
        if (has_free_pages(b)) frees.push_back(b);
      }
      if (!frees.empty() && !synchronized && a.order() != nullptr) {
        a.order()->complete_all();  // a shared arena: every stream's uses (Note [Cross-stream reuse])
        synchronized = true;
      }
      if (!frees.empty() && !synchronized) {
        // Unmap and release do not synchronise: the stream's work on these pages must be done.
        // A stream destroyed since (an invalid handle, or on the real driver "invalid device
        // context": Note [Sim destroyed streams]) is covered by synchronising the whole device;
        // only when that fails too is it an error. Destroying a stream whose blocks are cached is
        // the caller's bug (Note [Replay stream lifetime]); this keeps the cache releasable.
        const drv_result stream_result = drv_->stream_synchronize(index_, a.stream());
        drv_result result = stream_result;
        if (!result.ok() && result.code != status::illegal_in_capture) result = drv_->device_synchronize(index_);
        if (!result.ok()) {
          std::string what = "streampool: cudaStreamSynchronize before unmapping free pages on device " +
                             std::to_string(index_) + " failed: " + drv_->describe(stream_result);
          if (result.native != stream_result.native) {
            what += "; then cudaDeviceSynchronize failed: " + drv_->describe(result);
          }
          throw cuda_error(what, result.native);
        }
        synchronized = true;
      }
      for (block* b : frees) unmap_block(a, *seg, b);
      if (seg->mapped_pages == 0 && !leftovers_.mapped_in(seg->base, seg->size)) destroy(a, seg);
    }
    seg = next;
  }
}

void expandable_segments::unmap_block(stream_arena& a, segment& seg, block* b) {
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
  forget_pages(a, seg, b, first, done, /*reserved_changes=*/true);
  if (!result.ok()) {
    throw cuda_error(std::string("streampool: ") + what + " of a free page on device " + std::to_string(index_) +
                         " failed: " + drv_->describe(result) + "; the page stays mapped until an empty_cache succeeds",
                     result.native);
  }
}

void expandable_segments::forget_pages(stream_arena& a, segment& seg, block* b, std::size_t first, std::size_t count,
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

void expandable_segments::destroy(stream_arena& a, segment* seg) {
  const drv_result result = drv_->vmm_free(va_of(seg->base), seg->size);
  if (!result.ok()) {
    throw cuda_error("streampool: cuMemAddressFree of " + format_size(seg->size) + " at " +
                         core::format_pointer(seg->base) + " on device " + std::to_string(index_) +
                         " failed: " + drv_->describe(result),
                     result.native);
  }
  a.detach_expandable(seg);
  delete seg;
}

// --- leftover pages (Note [Leftover pages]) ----------------------------------------------------------

void expandable_segments::give_back(segment& seg, std::size_t first, std::size_t mapped, std::size_t count) noexcept {
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

void expandable_segments::release_at_exit(const segment& seg) noexcept {
  // Status form: the allocator is going away. Unmap does not synchronise; wait for the device
  // (the arena's stream may be gone by now, the device is always valid).
  driver& drv = *drv_;
  if (seg.mapped_pages != 0) (void)drv.device_synchronize(index_);
  for (std::size_t i = 0; i < seg.handles.size(); ++i) {
    if (seg.handles[i] == 0) continue;
    (void)drv.vmm_unmap(va_of(seg.base + i * seg.page), seg.page);
    if (seg.handles[i] != released_handle) (void)drv.vmm_release(seg.handles[i]);
  }
  (void)drv.vmm_free(va_of(seg.base), seg.size);
}

}  // namespace streampool::native
