// page_moves.cpp — the growth side of cross_stream_reuse with expandable segments: before a
// shared arena maps new pages, the free pages it already holds are taken out of their blocks so
// that what it reserves does not pass its peak (Note [Moving free pages], Note [Moving pages still
// in use]).
#include <algorithm>
#include <vector>

#include "native/expandable.hpp"
#include "native/stream_arena.hpp"
#include "native/stream_order.hpp"

namespace streampool::native {

// Note [Growth next to another stream's free block]
// An expandable growth maps pages after (or into) a hole and merges them with the free blocks
// around it, and the allocation starts at the merged block: memory another stream freed may be
// part of it, so the hazard check of a cache hit must run here too (the sim's hazard checker found
// this gap: a growth handed another stream's free bytes over unordered). Outside a capture the
// order is made as for a hit; during one (no events then) the merged block goes back to the free
// list and the allocation takes a fresh reservation, next to nothing.
bool stream_arena::order_growth(block* b, stream_t stream) {
  try {
    if (order_->order_after(b->hazard_streams, b->hazard_ticket, stream)) return true;
  } catch (...) {
    blocks_.insert_free(b);
    throw;
  }
  blocks_.insert_free(b);
  return false;
}

// Note [Filling partial pages]
// What moving pages cannot give back is the free space inside pages that also hold live data: the
// free ends of large blocks that do not end on a page boundary. In a shared arena a small request
// (<= 1 MiB) that the small pool cannot serve is therefore served from such a piece when one fits
// (a free large-kind block shorter than a page of an expandable segment, the best fit by size)
// instead of growing the small pool: the partial pages fill up. (Preferring such a piece even when
// the small pool has a fit, or sending every small request to the large kind, packed worse on the
// recorded traces: about +0.8% peak reserved each on the two-stream one.)
block* stream_arena::partial_page_fit(std::size_t rounded) const noexcept {
  block* piece = blocks_.large_list().lower_bound(rounded);
  if (piece == nullptr || !piece->seg->expandable || piece->size >= piece->seg->page) return nullptr;
  return piece;
}

// Note [Moving free pages]
// PyTorch's expandable segments give pages back only in empty_cache and on the way to an OOM: a
// free hole in the middle of a segment stays mapped while the segment grows at its end, so peak
// reserved runs above peak requested by the holes (up to 5% on the real traces we replay, 10% with
// two streams). With cross_stream_reuse the shared arena moves such pages instead: when a growth
// would raise reserved memory above its peak so far, it first takes free whole pages out of their
// blocks (both pool kinds, oldest frees first, the highest pages of a block first) until the growth
// fits under the peak or nothing free is left, and then grows as usual (the holes it made may be
// where the growth lands). Reserved memory therefore rises only when live memory (plus the partial pages at
// block edges) does, and the pages are 2 MiB in both kinds to keep those edges small.
// A moved page keeps its physical handle (a spare page, still counted in reserved_bytes) and the
// growth maps it again: no cuMemRelease / cuMemCreate; and its old mapping stays until its last
// uses are done (Note [Moving pages still in use]), so a move never waits on the host.
// This runs whenever a growth would set a new peak, which with varying shapes keeps happening at
// the peak's edge in the steady state too (about 50 pages per step in a small two-stream CNN:
// docs/benchmarks-history.md, session 4). Outside a capture, every decision depends only on the sequence of calls,
// never on timing (which fences happen to be complete changes waits and driver calls, not
// placement), so the sim predicts the device's figures exactly. Pages are not moved while a
// capture is underway.

// Note [Moving pages still in use]
// Unmapping needs the work on a page done, not merely ordered (cuMemUnmap does not wait), and in a
// training loop, whose host runs ahead of the device, the pages a growth wants were often freed
// moments ago: waiting for them on the host stalled every step that moved pages (docs/
// benchmarks-history.md, session 5). So a move unmaps nothing. The page's handle becomes a spare at once,
// carrying the last uses of the block it left (streams and ticket; none when they are already
// seen complete), while its old mapping stays as a *ghost*: a hole for the blocks, still mapped
// for the kernels that may be using it. A growth that takes the spare maps the handle at its new
// place (one physical page, two mappings) and its merged block carries those last uses, so the
// allocating stream is ordered after them by an event wait like any cross-stream reuse (and never
// during a capture: no spare with last uses is taken then). The ghost is unmapped without a wait
// once its uses are seen complete (polled at every growth), or taken back as it is, with no driver
// call at all, when a growth lands on it while its handle is still an unused spare (a page that
// would have moved to where it already was); the spare's last uses are the handle's newest (it may
// have been mapped elsewhere since an older ghost of it was left), so a page taken back carries
// both. Only a growth that must map over a ghost whose handle went elsewhere waits for it on the
// host (oldest covering fence, Note [Fence checkpoints]); empty_cache and the OOM ladder's release
// wait for every stream and unmap all ghosts; teardown synchronises the device first; a growth of
// the shared arena during a capture, which could unmap nothing, takes a fresh reservation.
// Placement does not change (the same pages move, the same holes are grown into): only when the
// driver calls happen does. The sim's hazard checker also tracks uses by physical page, so a use
// through one mapping of a page is checked against unfinished uses through the other (Note [Sim
// aliased mappings]); it found the "newest last uses" rule above.
void expandable_segments::reclaim_pages(stream_arena& a, std::size_t rounded, bool small) {
  if (device_->capture_underway() || !enabled()) return;
  a.order()->checkpoint();  // Note [Fence checkpoints]
  if (pages_.has_ghosts()) pages_.settle_ghosts(a.order(), 0, ~std::size_t{0}, /*wait=*/false);
  const std::size_t page = geometry_.page(small);
  const std::size_t growth = (rounded + page - 1) / page * page;
  const auto& reserved = counters_->reserved_bytes[0];
  const auto current = static_cast<std::size_t>(reserved.current);  // spare pages included
  const auto peak = static_cast<std::size_t>(reserved.peak);
  const std::size_t spare = pages_.leftovers().spare_bytes(page);
  const std::size_t fresh = growth > spare ? growth - spare : 0;  // what the growth would create
  if (current + fresh <= peak) return;
  std::size_t excess = current + fresh - peak;

  struct candidate {
    block* b;
    segment* seg;
  };
  std::vector<candidate> frees;
  for (segment* seg = a.segments(); seg != nullptr; seg = seg->next) {
    if (!seg->expandable) continue;
    for (block* b = seg->head; b != nullptr; b = b->next) {
      if (has_free_pages(b)) frees.push_back({b, seg});
    }
  }
  // Oldest free first; address breaks ties, so the order is total (and std::sort allocates no
  // temporary buffer, as std::stable_sort would, on this path).
  std::sort(frees.begin(), frees.end(), [](const candidate& x, const candidate& y) {
    return x.b->hazard_ticket != y.b->hazard_ticket ? x.b->hazard_ticket < y.b->hazard_ticket : x.b->ptr < y.b->ptr;
  });
  for (const candidate& c : frees) {
    if (excess == 0) break;
    const std::size_t wanted = (excess + c.seg->page - 1) / c.seg->page;
    // Note [Moving pages still in use]: pages whose last uses are not seen done keep their old
    // mapping for now; their next user is ordered after those uses instead.
    const bool in_use = !a.order()->completed(c.b->hazard_streams, c.b->hazard_ticket);
    const std::size_t moved = move_out(a, *c.seg, c.b, wanted, in_use);
    a.order()->note_moved_pages(moved);
    const std::size_t freed = moved * c.seg->page;
    excess = freed >= excess ? 0 : excess - freed;
  }
}

std::size_t expandable_segments::move_out(stream_arena& a, segment& seg, block* b, std::size_t max_pages,
                                          bool in_use) {
  // The handle becomes a spare page (still counted in reserved_bytes) for the growth that follows,
  // which maps it where it is needed: no cuMemRelease / cuMemCreate. The old mapping stays as a
  // ghost until its last uses are seen done; `in_use`: the spare carries them (Note [Moving pages
  // still in use]).
  const std::size_t page = seg.page;
  const page_span whole = whole_pages(b);
  const std::size_t last = whole.last;
  const std::size_t first = std::max(whole.first, last > max_pages ? last - max_pages : 0);
  if (first >= last) return 0;
  a.reserve_blocks();
  pages_.leftovers().reserve(last - first);
  pages_.reserve_ghosts(last - first);
  const page_hazard hazard = in_use ? page_hazard{b->hazard_streams, b->hazard_ticket} : page_hazard{};
  std::size_t done = 0;
  for (std::size_t i = first; i < last; ++i, ++done) {
    if (seg.handles[i] == released_handle) break;  // an earlier failed release: leave it to segment_pages::unmap
    pages_.keep_ghost({seg.base + i * page, page, seg.handles[i], hazard});
    pages_.leftovers().keep_spare(seg.handles[i], page, seg.small, hazard);
    seg.handles[i] = 0;
  }
  pages_.forget(a, seg, b, first, done, /*reserved_changes=*/false);  // the pages stay ours: spares
  return done;
}

}  // namespace streampool::native
