// sim_malloc_space.cpp — the simulated device's cudaMalloc address assignment: chunks of
// virtual addresses reserved top-down, allocations placed newest chunk first by best fit, freed
// ranges and empty chunks reused, as the real driver does (Note [Sim address assignment]).
#include "driver/sim/sim_malloc_space.hpp"

#include <iterator>

#include "streampool/config.hpp"

namespace streampool::sim {

// Note [Sim address assignment]
// Best fit breaks ties between equal-sized free blocks by address (PyTorch's block order is
// stream, size, address), so which cached block a replay reuses, and hence what it reserves,
// depends on where the driver put each segment. The sim therefore hands out cudaMalloc
// addresses in the real driver's pattern, measured on an H200 (driver 580.159.04, CUDA 13.0)
// with scripts/probes/address_probe.cpp; tests/data/driver/README.md has the data and the
// command, and sim_address_model_test replays those sequences. What the driver does:
// - Addresses come from chunks of virtual address space reserved in multiples of 32 MiB: an
//   allocation that fits nowhere reserves round_up(size, 32 MiB) and sits at the chunk's
//   start; the rest of the chunk serves later allocations (a 20 MiB block leaves 12 MiB, a
//   130 MiB one 30 MiB).
// - A new chunk goes at the top of the highest unreserved range that is strictly larger than
//   the chunk (a range of exactly its size is passed over), so chunks march downward, and
//   ranges freed higher up are refilled from their top.
// - An allocation looks at the chunks newest first (by reservation time, not by address) and
//   takes, in the first chunk with room, the smallest free range that fits (the lowest among
//   equal ones), at that range's start. So a small block goes into the newest chunk's leftover
//   even when an older chunk has an exact fit.
// - cudaFree returns the range to its chunk, merged with free neighbours; a chunk left empty is
//   released at once, and its addresses merge with the unreserved ranges around it, so a later
//   chunk may span several old ones.
// - The context owns 512 MiB at the top before the first cudaMalloc, with two free ranges:
//   2 MiB at 96 MiB below the top and the top 24 MiB. They are part of the oldest chunk, so they
//   fill only when no newer chunk has room (the first allocations of a process go there).
// These rules reproduce every address of the probe sequences, relative to the first one: 573
// allocations of 2 MiB to 1 GiB, with frees, including the cudaMalloc/cudaFree sequence of a
// PyTorch training. Absolute addresses differ (the sim's ranges are its own); only the order
// and the distances matter to an allocator. Allocations below 2 MiB follow the same rules with
// 512 B alignment (not measured: PyTorch never cudaMallocs below 2 MiB). A PyTorch process has
// other libraries' memory in the same address space, so its layout differs in places (in the
// recorded ResNet-50 run, later segments went into ~380 MiB of what the probe process's context
// holds), which the sim cannot know; it changed no figure of the real trainings in
// tests/data/traces, which the sim replays with exactly the peak reserved PyTorch reached on the
// H200 under every config.
namespace {

constexpr std::size_t chunk_unit = 32 * mib;
constexpr std::size_t context_bytes = 512 * mib;
constexpr std::size_t context_small_hole_from_top = 98 * mib;  ///< [top - 98, top - 96) MiB
constexpr std::size_t context_small_hole = 2 * mib;
constexpr std::size_t context_top_hole = 24 * mib;  ///< [top - 24 MiB, top)

constexpr std::uintptr_t align_up(std::uintptr_t value, std::size_t alignment) noexcept {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

malloc_space::malloc_space(std::uintptr_t begin, std::uintptr_t end, sim_addresses mode)
    : mode_(mode), bump_next_(begin), end_(end) {
  if (mode_ == sim_addresses::bump) {
    return;
  }
  const std::uintptr_t context = end - context_bytes;
  chunk_rec& rec = chunks_[next_birth_];
  rec.base = context;
  rec.end = end;
  rec.permanent = true;
  add_free(rec, end - context_small_hole_from_top, end - context_small_hole_from_top + context_small_hole);
  add_free(rec, end - context_top_hole, end);
  chunk_at_.emplace(context, next_birth_++);
  holes_.emplace(begin, context);
}

void malloc_space::add_free(chunk_rec& chunk, std::uintptr_t start, std::uintptr_t end) {
  auto next = chunk.free_by_start.lower_bound(start);
  if (next != chunk.free_by_start.end() && next->first == end) {
    end = next->second;
    chunk.free_by_length.erase({next->second - next->first, next->first});
    next = chunk.free_by_start.erase(next);
  }
  if (next != chunk.free_by_start.begin()) {
    const auto previous = std::prev(next);
    if (previous->second == start) {
      start = previous->first;
      chunk.free_by_length.erase({previous->second - previous->first, previous->first});
      chunk.free_by_start.erase(previous);
    }
  }
  chunk.free_by_start.emplace(start, end);
  chunk.free_by_length.emplace(end - start, start);
}

void malloc_space::remove_free(chunk_rec& chunk, std::uintptr_t start, std::uintptr_t end) {
  chunk.free_by_start.erase(start);
  chunk.free_by_length.erase({end - start, start});
}

std::uintptr_t malloc_space::best_fit(const chunk_rec& chunk, std::size_t bytes, std::size_t alignment) {
  for (auto it = chunk.free_by_length.lower_bound({bytes, 0}); it != chunk.free_by_length.end(); ++it) {
    const std::uintptr_t start = align_up(it->second, alignment);
    if (start + bytes <= it->second + it->first) {
      return start;
    }
  }
  return 0;
}

void malloc_space::take(chunk_rec& chunk, std::uintptr_t address, std::size_t bytes) {
  auto range = std::prev(chunk.free_by_start.upper_bound(address));
  const std::uintptr_t start = range->first;
  const std::uintptr_t end = range->second;
  remove_free(chunk, start, end);
  if (start < address) {
    chunk.free_by_start.emplace(start, address);
    chunk.free_by_length.emplace(address - start, start);
  }
  if (address + bytes < end) {
    chunk.free_by_start.emplace(address + bytes, end);
    chunk.free_by_length.emplace(end - address - bytes, address + bytes);
  }
}

std::uintptr_t malloc_space::reserve_chunk(std::size_t size) {
  for (auto hole = holes_.rbegin(); hole != holes_.rend(); ++hole) {
    if (hole->second - hole->first > size) {
      hole->second -= size;  // the hole keeps its start: only its end moves down
      return hole->second;
    }
  }
  return 0;
}

void malloc_space::release_chunk(chunk_map::iterator chunk) {
  std::uintptr_t start = chunk->second.base;
  std::uintptr_t end = chunk->second.end;
  chunk_at_.erase(start);
  chunks_.erase(chunk);
  auto next = holes_.lower_bound(start);
  if (next != holes_.end() && next->first == end) {
    end = next->second;
    next = holes_.erase(next);
  }
  if (next != holes_.begin() && std::prev(next)->second == start) {
    std::prev(next)->second = end;
    return;
  }
  holes_.emplace(start, end);
}

std::uintptr_t malloc_space::allocate(std::size_t bytes, std::size_t alignment) {
  if (mode_ == sim_addresses::bump) {
    const std::uintptr_t start = align_up(bump_next_, alignment);
    if (start > end_ || end_ - start < bytes) {
      return 0;
    }
    bump_next_ = start + bytes;
    return start;
  }
  for (auto chunk = chunks_.rbegin(); chunk != chunks_.rend(); ++chunk) {
    if (const std::uintptr_t address = best_fit(chunk->second, bytes, alignment); address != 0) {
      take(chunk->second, address, bytes);
      return address;
    }
  }
  const std::size_t size = align_up(bytes, chunk_unit);
  const std::uintptr_t base = reserve_chunk(size);
  if (base == 0) {
    return 0;
  }
  chunk_rec& rec = chunks_[next_birth_];
  rec.base = base;
  rec.end = base + size;
  if (bytes < size) {
    add_free(rec, base + bytes, base + size);
  }
  chunk_at_.emplace(base, next_birth_++);
  return base;
}

void malloc_space::release(std::uintptr_t address, std::size_t bytes) {
  if (mode_ == sim_addresses::bump) {
    return;
  }
  const auto at = std::prev(chunk_at_.upper_bound(address));
  const auto chunk = chunks_.find(at->second);
  chunk_rec& rec = chunk->second;
  add_free(rec, address, address + bytes);
  const auto& only = *rec.free_by_start.begin();
  if (!rec.permanent && only.first == rec.base && only.second == rec.end) {
    release_chunk(chunk);
  }
}

}  // namespace streampool::sim
