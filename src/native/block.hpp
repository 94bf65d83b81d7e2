// block.hpp — the data model of the native backend (docs/pytorch-compatibility.md §2.2): a `segment` is one device malloc
// or one expandable reservation (docs/pytorch-compatibility.md §2.13); its `block`s tile it and form a doubly linked list by
// address. A block is allocated, waiting for events / deferred (active, not allocated), free (in its
// arena's free list), or — in an expandable segment only — unmapped (Note [Expandable segments] in
// expandable.hpp). Block objects are recycled by their arena's block store (Note [Block recycling]
// in block_store.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "streampool/driver.hpp"
#include "streampool/graph.hpp"

namespace streampool::native {

class stream_arena;
struct segment;

/// One stream recorded on a block by record_stream (docs/pytorch-compatibility.md §2.9).
struct stream_use {
  stream_t stream = nullptr;
  bool during_capture = false;  ///< recorded while a capture was underway (dropped at deferral, §3.4)
};

// Note [Uses recorded again after a capture]
// A stream recorded on a block during a capture is a capture-time use: if the block is freed
// during a capture, the deferred free drops it (the captured work is ordered by the graph). PyTorch
// keeps that mark even when the same stream is recorded again after the capture ended, so the
// later, real use is dropped too and the block can be handed out while that stream still uses it
// (our model-based stress test found such a sequence). Here a record outside a capture clears the
// mark: the block then waits for that stream as for any use. A deliberate difference from PyTorch
// (docs/pytorch-compatibility.md), in the safe direction; it changes nothing without captures.

/// The streams a block is used on besides its own. Small and inline: almost every block has none,
/// a few have one or two; more spill into a vector.
class stream_use_set {
 public:
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] const stream_use& operator[](std::size_t i) const noexcept {
    return i < inline_.size() ? inline_[i] : overflow_[i - inline_.size()];
  }
  /// Adds `stream` unless present. A use recorded before a capture stays a pre-capture use, and
  /// one recorded again outside a capture becomes one (Note [Uses recorded again after a capture]).
  void add(stream_t stream, bool during_capture) {
    for (std::size_t i = 0; i < count_; ++i) {
      if ((*this)[i].stream != stream) continue;
      if (!during_capture) at(i).during_capture = false;
      return;
    }
    if (count_ < inline_.size()) {
      inline_[count_] = {stream, during_capture};
    } else {
      overflow_.push_back({stream, during_capture});
    }
    ++count_;
  }
  /// Removes the uses recorded during a capture (docs/pytorch-compatibility.md §3.4, default mode).
  void drop_capture_uses() {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < count_; ++i) {
      const stream_use use = (*this)[i];
      if (!use.during_capture) at(kept++) = use;
    }
    count_ = kept;
    if (count_ <= inline_.size()) overflow_.clear();
    else overflow_.resize(count_ - inline_.size());
  }
  void clear() noexcept {
    count_ = 0;
    overflow_.clear();
  }

 private:
  stream_use& at(std::size_t i) noexcept { return i < inline_.size() ? inline_[i] : overflow_[i - inline_.size()]; }

  std::array<stream_use, 3> inline_{};
  std::size_t count_ = 0;
  std::vector<stream_use> overflow_;
};

struct block {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;  ///< the caller's size while active, 0 when free
  block* prev = nullptr;           ///< lower-address neighbour in the segment
  block* next = nullptr;           ///< higher-address neighbour in the segment
  block* left = nullptr;           ///< free-list tree hooks; `left` also links recycled objects
  block* right = nullptr;
  segment* seg = nullptr;
  stream_arena* arena = nullptr;   ///< owner (device, pool, stream)
  stream_t stream = nullptr;       ///< the stream it was last allocated on (its arena's, unless shared)
  /// Free blocks of a shared arena (Note [Cross-stream reuse] in stream_order.hpp): the streams
  /// whose uses the next user must be ordered after (one bit each), and the newest free's ticket.
  std::uint64_t hazard_streams = 0;
  std::uint64_t hazard_ticket = 0;
  std::uint64_t gc_count_base = 0; ///< GC clock when the block entered the free list (docs/pytorch-compatibility.md §2.11)
  std::uint32_t event_count = 0;   ///< events recorded at free time and not yet completed
  bool allocated = false;
  bool in_free_list = false;
  bool deferred = false;           ///< freed during a capture, waiting for it to end (§3.4)
  bool mapped = true;              ///< false: an unmapped range of an expandable segment
  stream_use_set uses;

  [[nodiscard]] bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
  /// Free for expandable growth (docs/pytorch-compatibility.md §2.13): unmapped, or mapped and in the free list.
  [[nodiscard]] bool growable() const noexcept { return !mapped || in_free_list; }
  /// The whole of a malloc'd segment (never part of an expandable one): what release can free.
  [[nodiscard]] bool whole_segment() const noexcept;
};

struct segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;      ///< malloc size, or the whole reservation of an expandable segment
  stream_arena* arena = nullptr;
  bool small = false;
  bool expandable = false;   ///< a VMM reservation mapped page by page (docs/pytorch-compatibility.md §2.13)
  bool asleep = false;       ///< its pages went back to the driver with its pool (pool_sleep.hpp)
  block* head = nullptr;     ///< block at `base`; survives merges (the lower block is kept)
  segment* prev = nullptr;   ///< the arena's list of segments
  segment* next = nullptr;
  /// Where the memory came from when not cudaMalloc (Note [Pool options] in src/core/allocator.cpp).
  std::shared_ptr<const segment_provider> provider;
  // --- expandable segments only ---
  std::size_t page = 0;                ///< bytes per physical handle
  std::vector<vmm_handle_t> handles;   ///< per page from base, 0 = unmapped; trailing zeros trimmed
  std::size_t mapped_pages = 0;
};

inline bool block::whole_segment() const noexcept { return !is_split() && !seg->expandable; }

/// Pages [first, last) of an expandable segment, counted from its base.
struct page_span {
  std::size_t first = 0;
  std::size_t last = 0;
  [[nodiscard]] bool empty() const noexcept { return first >= last; }
};

/// The pages lying entirely inside block `b` of an expandable segment (the ones an unmap can give
/// back; the partial pages at its ends also hold other blocks).
[[nodiscard]] inline page_span whole_pages(const block* b) noexcept {
  const segment& seg = *b->seg;
  return {(b->ptr - seg.base + seg.page - 1) / seg.page, (b->ptr + b->size - seg.base) / seg.page};
}

/// A free, mapped block of an expandable segment with at least one whole page to give back.
[[nodiscard]] inline bool has_free_pages(const block* b) noexcept {
  return b->mapped && b->in_free_list && !whole_pages(b).empty();
}

}  // namespace streampool::native
