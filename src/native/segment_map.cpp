// segment_map.cpp — the writer side of the granule radix tree (see Note [Pointer lookup]).
#include "native/segment_map.hpp"

namespace streampool::native {

segment_map::segment_map() : root_(std::make_unique<node>()) {}

segment_map::~segment_map() = default;

segment_map::granule& segment_map::slot(std::uint64_t g) {
  void* n = root_.get();
  for (int level = 0; level < inner_levels; ++level) {
    std::atomic<void*>& child = static_cast<node*>(n)->children[(g >> shift_of(level)) & (fanout - 1)];
    void* next = child.load(std::memory_order_relaxed);
    if (next == nullptr) {
      if (level + 1 < inner_levels) {
        nodes_.reserve(nodes_.size() + 1);
        nodes_.push_back(std::make_unique<node>());
        next = nodes_.back().get();
      } else {
        leaves_.reserve(leaves_.size() + 1);
        leaves_.push_back(std::make_unique<leaf>());
        next = leaves_.back().get();
      }
      child.store(next, std::memory_order_release);  // the new node is fully built
    }
    n = next;
  }
  return static_cast<leaf*>(n)->entries[g & (leaf_size - 1)];
}

segment_map::granule* segment_map::existing(std::uint64_t g) const noexcept {
  const void* n = root_.get();
  for (int level = 0; level < inner_levels; ++level) {
    n = static_cast<const node*>(n)->children[(g >> shift_of(level)) & (fanout - 1)].load(std::memory_order_relaxed);
    if (n == nullptr) return nullptr;
  }
  return const_cast<granule*>(&static_cast<const leaf*>(n)->entries[g & (leaf_size - 1)]);
}

void segment_map::insert(std::uintptr_t base, std::size_t size, stream_arena* arena) {
  std::lock_guard lock(writer_);
  const std::uint64_t first = base >> granule_shift;
  const std::uint64_t last = (base + size - 1) >> granule_shift;
  for (std::uint64_t g = first; g <= last; ++g) (void)slot(g);  // may throw: nothing set yet
  const bool starts_inside = (base & ((std::uintptr_t{1} << granule_shift) - 1)) != 0;
  for (std::uint64_t g = first; g <= last; ++g) {
    granule& e = *existing(g);
    if (g == first && starts_inside) {
      e.boundary.store(base, std::memory_order_relaxed);
      e.high.store(arena, std::memory_order_release);  // publishes the boundary
    } else {
      e.low.store(arena, std::memory_order_release);
    }
  }
}

void segment_map::erase(std::uintptr_t base, std::size_t size) noexcept {
  std::lock_guard lock(writer_);
  const std::uint64_t first = base >> granule_shift;
  const std::uint64_t last = (base + size - 1) >> granule_shift;
  const bool starts_inside = (base & ((std::uintptr_t{1} << granule_shift) - 1)) != 0;
  for (std::uint64_t g = first; g <= last; ++g) {
    granule* e = existing(g);
    if (e == nullptr) continue;
    if (g == first && starts_inside) {
      e->high.store(nullptr, std::memory_order_release);
    } else {
      e->low.store(nullptr, std::memory_order_release);
    }
  }
}

}  // namespace streampool::native
