// segment_map.hpp — device address → owning stream arena for every segment of one allocator (all
// devices): a radix tree over 2 MiB granules, read without any lock or atomic read-modify-write,
// written (segment malloc/free) under its own mutex. See Note [Pointer lookup].
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace streampool::native {

class stream_arena;

// Note [Pointer lookup]
// deallocate(ptr) has to find the block of `ptr` and lock its arena. A global pointer → block map
// needs a lock of its own (a shard lock), i.e. two lock round trips per free and two per
// allocation (insert) — on the target machine each round trip is about 12 ns, half of the hot
// path. Instead:
//   * every segment is registered, once, in this radix tree of 2 MiB granules (segments are at
//     least 2 MiB and multiples of it, so a granule meets at most two segments: the one covering
//     its start, `low`, and one starting inside it at `boundary`, `high`);
//   * the live blocks of an arena are in that arena's block_map, under the arena lock the
//     allocation or free takes anyway.
// So a free is: a lock-free walk of four tree levels, then the one arena lock. Readers look up
// live pointers only, whose segment cannot be unregistered meanwhile; the writer changes only the
// slot (low or high) of the segment being added or removed and publishes `boundary` before
// `high`, so a reader always picks the right one of the two (a pointer in `low` is below every
// `high` boundary, a pointer in `high` sees its own stable boundary). Tree nodes are never freed
// before the allocator, so a reader never touches freed memory; arenas are never destroyed
// before the allocator either (dead pools' arenas are recycled), so a stale lookup for a bad
// pointer locks a valid arena and finds nothing.
class segment_map {
 public:
  segment_map();
  ~segment_map();
  segment_map(const segment_map&) = delete;
  segment_map& operator=(const segment_map&) = delete;

  /// The arena whose segment contains `ptr` (nullptr when none). Lock-free.
  [[nodiscard]] stream_arena* find(std::uintptr_t ptr) const noexcept {
    const std::uint64_t g = ptr >> granule_shift;
    static_assert(inner_levels == 3, "find() walks the three inner levels unrolled");
    const void* n = child(root_.get(), g, 0);
    if (n == nullptr) return nullptr;
    n = child(n, g, 1);
    if (n == nullptr) return nullptr;
    n = child(n, g, 2);
    if (n == nullptr) return nullptr;
    const granule& e = static_cast<const leaf*>(n)->entries[g & (leaf_size - 1)];
    stream_arena* high = e.high.load(std::memory_order_acquire);
    if (high != nullptr && ptr >= e.boundary.load(std::memory_order_relaxed)) return high;
    return e.low.load(std::memory_order_acquire);
  }

  /// Registers [base, base + size) (size a multiple of 2 MiB) as owned by `arena`.
  /// @throws std::bad_alloc when a tree node cannot be created (nothing registered then).
  void insert(std::uintptr_t base, std::size_t size, stream_arena* arena);
  /// Unregisters a segment registered by insert().
  void erase(std::uintptr_t base, std::size_t size) noexcept;

 private:
  static constexpr int granule_shift = 21;     // 2 MiB
  static constexpr int bits_per_level = 11;
  static constexpr std::size_t fanout = std::size_t{1} << bits_per_level;
  static constexpr int inner_levels = 3;       // 3 × 11 bits + a 10-bit leaf = the 43 granule bits
  static constexpr std::size_t leaf_size = 1024;
  static constexpr int shift_of(int level) noexcept { return 10 + bits_per_level * (inner_levels - 1 - level); }

  struct granule {
    std::atomic<stream_arena*> low{nullptr};    ///< segment covering the granule's first byte
    std::atomic<stream_arena*> high{nullptr};   ///< segment starting inside the granule
    std::atomic<std::uintptr_t> boundary{0};    ///< that segment's base
  };
  struct node {
    std::array<std::atomic<void*>, fanout> children{};  ///< nodes, or leaves below the last level
  };
  struct leaf {
    std::array<granule, leaf_size> entries{};
  };

  /// The child of inner node `n` (of level `level`) on granule `g`'s path.
  static const void* child(const void* n, std::uint64_t g, int level) noexcept {
    return static_cast<const node*>(n)->children[(g >> shift_of(level)) & (fanout - 1)].load(std::memory_order_acquire);
  }
  granule& slot(std::uint64_t g);  // creates the path; writer mutex held
  granule* existing(std::uint64_t g) const noexcept;

  std::unique_ptr<node> root_;
  std::mutex writer_;
  std::vector<std::unique_ptr<node>> nodes_;    // owners (never freed before the map)
  std::vector<std::unique_ptr<leaf>> leaves_;
};

}  // namespace streampool::native
