// expandable.cpp — the driver side of expandable segments (Note [Expandable segments] in
// expandable.hpp): the page geometry, probing VMM support (with the fallback to normal segments),
// growth for the OOM ladder's new-segment step (where to grow, new reservations), and choosing and
// unmapping the free pages of an arena for release_cached. The page mechanics (map, unmap, leftover
// pages, teardown) are segment_pages'. Everything runs under the device mutex and the arena's lock.
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

std::size_t vmm_geometry::page(bool small, const pool_options* options) const noexcept {
  if (small || options == nullptr) return page(small);
  if (options->page_bytes != 0) return round_up(options->page_bytes, small_page);
  if (options->sleepable) return std::max(large_page, round_up(sleepable_page_bytes, small_page));
  return large_page;
}

std::size_t vmm_geometry::reservation(std::size_t p, std::size_t request) const noexcept {
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
      counters_(&counters),
      vmm_warned_(&vmm_warned),
      mode_(device.config->expandable_segments ? vmm_mode::unknown : vmm_mode::off),
      pages_(device, segments, counters) {}

device_info expandable_segments::probe() const {
  device_info info;
  const drv_result result = drv_->get_device_info(index_, &info);
  if (!result.ok()) {
    throw cuda_error("streampool: cudaGetDeviceProperties of device " + std::to_string(index_) +
                         " failed: " + drv_->describe(result),
                     result.native);
  }
  return info;
}

bool expandable_segments::enabled() {
  if (mode_ == vmm_mode::unknown) {
    const device_info info = probe();
    if (!info.vmm_supported) {
      fall_back_to_normal_segments("the device reports no virtual memory management support");
    } else {
      geometry_ = make_vmm_geometry(info, *device_->config);
      mode_ = vmm_mode::on;
    }
  }
  return mode_ == vmm_mode::on;
}

bool expandable_segments::available() {
  if (mode_ != vmm_mode::off) return enabled();
  if (unsupported_) return false;
  if (geometry_.total_memory == 0) {
    const device_info info = probe();
    if (!info.vmm_supported) {
      unsupported_ = true;
      return false;
    }
    geometry_ = make_vmm_geometry(info, *device_->config);
  }
  return true;
}

void expandable_segments::set_wanted(bool wanted) noexcept {
  if (!wanted) {
    mode_ = vmm_mode::off;
  } else if (mode_ == vmm_mode::off && !unsupported_) {
    mode_ = geometry_.total_memory != 0 ? vmm_mode::on : vmm_mode::unknown;  // probed before: no new probe
  }
}

void expandable_segments::fall_back_to_normal_segments(const std::string& reason) {
  mode_ = vmm_mode::off;
  unsupported_ = true;
  if (vmm_warned_->exchange(true)) return;
  warn("expandable_segments:True: device " + std::to_string(index_) + " (" +
       std::string(drv_->name()) + " driver): " + reason +
       "; the native backend uses normal segments there (fragmentation as without the option)");
}

// --- growth -----------------------------------------------------------------------------------------

block* expandable_segments::grow(stream_arena& a, std::size_t rounded, bool small, bool fresh) {
  // A ghost mapping cannot be unmapped during a capture: such a growth takes a fresh reservation
  // (Note [Moving pages still in use]).
  if (!fresh && a.order() != nullptr && pages_.has_ghosts() && device_->capture_underway()) fresh = true;
  if (a.order() != nullptr && !fresh) reclaim_pages(a, rounded, small);  // Note [Moving free pages]
  block* c = fresh ? nullptr : a.blocks().find_growable(small, rounded);
  if (c == nullptr) c = reserve_segment(a, small, rounded);
  if (c == nullptr) return nullptr;
  if (!c->mapped) c = pages_.map(a, c, std::min(c->size, rounded));
  // c (if any) is a free mapped block; the growable run continues with unmapped blocks, each
  // followed by at most one free block that the mapping merges in.
  while (c != nullptr && c->size < rounded) {
    block* n = c->next;
    if (n == nullptr || n->mapped) return nullptr;  // cannot happen (find_growable checked the run)
    c = pages_.map(a, n, std::min(rounded - c->size, n->size));
  }
  if (c == nullptr) return nullptr;
  a.blocks().remove_free(c);
  return c;
}

block* expandable_segments::reserve_segment(stream_arena& a, bool small, std::size_t rounded) {
  const std::size_t page = geometry_.page(small, a.pool() != nullptr ? &a.pool()->options : nullptr);
  const std::size_t bytes = geometry_.reservation(page, rounded);
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
  seg->page = page;
  a.attach_expandable(seg.get());
  return seg.release()->head;
}

// --- shrinking ----------------------------------------------------------------------------------------

void expandable_segments::unmap_free_pages(stream_arena& a) {
  bool synchronized = false;
  if (a.order() != nullptr && pages_.has_ghosts()) {
    a.order()->complete_all();  // the old mappings of moved pages go first (Note [Moving pages still in use])
    synchronized = true;
    pages_.settle_ghosts(a.order(), 0, ~std::size_t{0}, /*wait=*/true);
  }
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
      for (block* b : frees) pages_.unmap(a, *seg, b);
      if (seg->mapped_pages == 0 && !pages_.leftovers().mapped_in(seg->base, seg->size) &&
          !pages_.ghost_in(seg->base, seg->size)) {
        destroy(a, seg);
      }
    }
    seg = next;
  }
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

}  // namespace streampool::native
