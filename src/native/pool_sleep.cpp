// pool_sleep.cpp — pool_sleeper (pool_sleep.hpp): the copies to and from the pinned backup, the
// unmapping and mapping of the pages of a sleeping pool's expandable segments, their statistics and
// trace, and the rollbacks that keep a sleep all or nothing.
#include "native/pool_sleep.hpp"

#include <algorithm>
#include <set>
#include <string>

#include "core/format.hpp"
#include "native/leftover_pages.hpp"
#include "native/stream_arena.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

// Note [Sleep all or nothing]
// A pool is asleep or awake, never half, and an offloaded pool loses no byte on any failure:
//   * sleep copies first and unmaps after: a failed copy (or a host buffer that cannot be pinned)
//     changes nothing on the device. A refused unmap stops the loop; the pages already unmapped are
//     mapped again (new pages for the released ones) and the backup copied back over all of them,
//     so the pool is awake as before (with discard, the pages of that rollback hold undefined
//     bytes, as the caller asked for the bytes to go). Should that rollback fail too, the pool
//     stays asleep with exactly the pages that went back in its record, and wake() retries them.
//   * wake maps everything before copying anything back: a page the device cannot give now
//     unmaps what this wake mapped, and the pool stays asleep with its backup (out_of_memory: free
//     memory, then call wake() again). A failed copy back unmaps the pages again: still asleep.
//   * A page whose unmap succeeded but whose handle the driver refused to release is "held": its
//     memory stays ours (and in reserved_bytes), it is mapped again at wake with that handle.
//
// Note [Sleep after queued work]
// cuMemUnmap does not wait for the GPU, so memory must not be unmapped while work queued on any
// stream may still touch it. sleep first waits for the events of blocks freed with record_stream
// uses, then synchronises every stream that may use the pool: each arena's stream and every
// stream recorded on an allocated block (a stream that was destroyed since falls back to a device
// synchronisation, as empty_cache does). The copies to the host are issued after that wait, on
// the sleeper's own streams, and waited for before the first unmap; wake waits for its copies back
// before it returns, so every stream's next work finds the memory mapped and filled. The simulated
// device's hazard checker reports an unmap under queued work, and a use ordered before a copy.
//
// Note [Sleep pipeline]
// Offload is bounded by the copy to the host, and unmapping costs a driver call per page: done one
// after the other, the unmapping added about a tenth to the copy on the H200. So the pages are cut
// into windows (plan_sleep_windows: consecutive mapped pages of one segment, 256 MiB by default,
// sleep_options::pipeline_bytes) and sleep copies window w while it unmaps window w-1: after
// issuing window w's copies it waits for window w-1's, by one event per copy stream recorded
// after them (two slots of events, alternating), and only then unmaps window w-1's pages, so no
// page goes while a copy still reads it (the sim's hazard checker would report it). Wake maps
// window w, issues its copies back, and maps window w+1 while they run; it waits for every copy
// stream before it returns. All or nothing still holds (Note [Sleep all or nothing]): a copy
// that fails once pages have gone stops the loop, waits for the copies in flight, and wakes what
// went with the windows already backed up (a window's pages go only after its copies are done,
// so what went is always in the backup); the pieces of later windows are never copied back.
//
// Note [Sleeping memory in the statistics]
// Released pages leave reserved_bytes (and count as device frees, traced as segment_unmap), since
// the device has them back: memory_reserved() then says what the allocator holds on the device,
// and cudaMemGetInfo agrees. Allocated and active bytes do not change: the allocations live on at
// their addresses, unreadable until wake() (which counts device allocs, traced as segment_map).
// So while a pool sleeps, allocated_bytes can exceed reserved_bytes. A snapshot lists a sleeping
// segment with is_asleep set.

namespace {

void* va_of(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }

std::size_t window_of(const sleep_options& options) noexcept {
  return options.pipeline_bytes != 0 ? options.pipeline_bytes : pool_sleeper::window_bytes;
}

}  // namespace

pool_sleep_state sleep_record::state() const noexcept {
  pool_sleep_state s;
  s.asleep = asleep;
  s.mode = options.mode;
  s.segments = asleep ? segments.size() : 0;
  s.released_bytes = asleep ? released_bytes : 0;
  s.held_bytes = asleep ? held_bytes : 0;
  s.offloaded_bytes = asleep ? offloaded_bytes : 0;
  s.backup_bytes = backup_capacity;
  return s;
}

pool_sleeper::pool_sleeper(device_context& device, segment_counters& counters) noexcept
    : device_(&device), drv_(device.drv), index_(device.index), counters_(&counters) {}

pool_sleeper::~pool_sleeper() {
  for (event_t e : events_) (void)drv_->event_destroy(index_, e);
  for (stream_t s : streams_) (void)drv_->stream_destroy(index_, s);
}

bool pool_sleeper::asleep(const stream_arena& a) noexcept {
  for (const segment* seg = a.segments(); seg != nullptr; seg = seg->next) {
    if (seg->asleep) return true;
  }
  return false;
}

void pool_sleeper::ensure_streams() {
  while (streams_.size() < copy_streams) {
    stream_t s = nullptr;
    const drv_result r = drv_->stream_create(index_, &s);
    if (!r.ok()) {
      throw cuda_error("streampool: sleep/wake: cudaStreamCreate of a copy stream on device " +
                           std::to_string(index_) + " failed: " + drv_->describe(r),
                       r.native);
    }
    streams_.push_back(s);
  }
  while (events_.size() < 2 * copy_streams) {
    event_t e = nullptr;
    const drv_result r = drv_->event_create(index_, &e);
    if (!r.ok()) {
      throw cuda_error("streampool: sleep/wake: cudaEventCreate for the copy streams on device " +
                           std::to_string(index_) + " failed: " + drv_->describe(r),
                       r.native);
    }
    events_.push_back(e);
  }
}

// --- waiting and copying ------------------------------------------------------------------------------

void pool_sleeper::wait_for_uses(const std::vector<stream_arena*>& arenas) {
  std::set<stream_t> streams;
  for (stream_arena* a : arenas) {
    a->synchronize_events();  // blocks freed with record_stream uses: their events first
    streams.insert(a->stream());
    for (const segment* seg = a->segments(); seg != nullptr; seg = seg->next) {
      for (const block* b = seg->head; b != nullptr; b = b->next) {
        if (!b->allocated) continue;
        streams.insert(b->stream);
        for (std::size_t i = 0; i < b->uses.size(); ++i) streams.insert(b->uses[i].stream);
      }
    }
  }
  for (stream_t s : streams) {
    const drv_result stream_result = drv_->stream_synchronize(index_, s);
    if (stream_result.ok()) continue;
    const drv_result result = drv_->device_synchronize(index_);  // a stream destroyed since
    if (!result.ok()) {
      throw cuda_error("streampool: sleep: cudaStreamSynchronize of stream " + core::format_pointer(s) +
                           " on device " + std::to_string(index_) + " failed: " + drv_->describe(stream_result) +
                           "; then cudaDeviceSynchronize failed: " + drv_->describe(result) +
                           "; the pool is awake, nothing changed",
                       result.native);
    }
    return;  // the device synchronisation covered every stream
  }
}

drv_result pool_sleeper::issue_copies(const std::vector<backup_run>& pieces, const sleep_window& w, void* backup,
                                      bool to_host) noexcept {
  auto* host = static_cast<unsigned char*>(backup);
  std::size_t next_stream = 0;
  for (std::size_t r = w.first_run; r < w.end_run; ++r) {
    const backup_run& run = pieces[r];
    for (std::size_t at = 0; at < run.bytes; at += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, run.bytes - at);
      void* dev = va_of(run.device + at);
      void* h = host + run.offset + at;
      const stream_t s = streams_[next_stream++ % streams_.size()];
      const drv_result result = to_host ? drv_->memcpy_async(h, dev, n, s) : drv_->memcpy_async(dev, h, n, s);
      if (!result.ok()) return result;
    }
  }
  return drv_result{};
}

drv_result pool_sleeper::record_slot(std::size_t slot) noexcept {
  for (std::size_t k = 0; k < streams_.size(); ++k) {
    const drv_result r = drv_->event_record(events_[slot * copy_streams + k], streams_[k]);
    if (!r.ok()) return r;
  }
  return drv_result{};
}

drv_result pool_sleeper::wait_slot(std::size_t slot) noexcept {
  for (std::size_t k = 0; k < streams_.size(); ++k) {
    const drv_result r = drv_->event_synchronize(events_[slot * copy_streams + k]);
    if (!r.ok()) return r;
  }
  return drv_result{};
}

drv_result pool_sleeper::drain() noexcept {
  drv_result first{};
  for (stream_t s : streams_) {
    const drv_result r = drv_->stream_synchronize(index_, s);
    if (!r.ok() && first.ok()) first = r;
  }
  return first;
}

std::string pool_sleeper::copy_failure(const drv_result& r, const char* call, bool to_host) const {
  return std::string(call) + (to_host ? " to" : " from") + " the pinned backup failed: " + drv_->describe(r);
}

// --- pages --------------------------------------------------------------------------------------------

void pool_sleeper::count_pages(const sleeping_segment& s, std::size_t count, bool mapped, mempool_id pool) noexcept {
  const segment& seg = *s.seg;
  for (std::size_t i = 0; i < count;) {
    std::size_t j = i + 1;
    while (j < count && s.pages[j] == s.pages[j - 1] + 1) ++j;
    std::int64_t released = 0;
    for (std::size_t k = i; k < j; ++k) {
      if (s.held[k] == 0) released += static_cast<std::int64_t>(seg.page);
    }
    if (released != 0) counters_->change_reserved(seg.small, mapped ? released : -released);
    ++(mapped ? counters_->num_device_alloc : counters_->num_device_free);
    device_->trace.record(mapped ? trace_action::segment_map : trace_action::segment_unmap, index_,
                          seg.base + s.pages[i] * seg.page, (j - i) * seg.page, s.arena->stream(), pool);
    i = j;
  }
}

std::size_t pool_sleeper::unmap_pages(sleeping_segment& s, std::size_t from, std::size_t to,
                                      std::string* failure) noexcept {
  segment& seg = *s.seg;
  for (std::size_t k = from; k < to; ++k) {
    const std::size_t p = s.pages[k];
    const drv_result unmapped = drv_->vmm_unmap(va_of(seg.base + p * seg.page), seg.page);
    if (!unmapped.ok()) {
      *failure = "cuMemUnmap of the page at " + core::format_pointer(seg.base + p * seg.page) + " failed: " +
                 drv_->describe(unmapped);
      return k;  // the rest stays mapped
    }
    const vmm_handle_t h = seg.handles[p];
    s.held[k] = 0;
    if (h != released_handle && !drv_->vmm_release(h).ok()) s.held[k] = h;  // Note [Sleep all or nothing]
    seg.handles[p] = 0;
  }
  return to;
}

void pool_sleeper::unmap_again(sleeping_segment& s) noexcept {
  segment& seg = *s.seg;
  for (std::size_t k = 0; k < s.pages.size(); ++k) {
    const std::size_t p = s.pages[k];
    if (seg.handles[p] == 0) continue;
    (void)drv_->vmm_unmap(va_of(seg.base + p * seg.page), seg.page);
    if (s.held[k] == 0) (void)drv_->vmm_release(seg.handles[p]);
    seg.handles[p] = 0;
  }
}

void pool_sleeper::map_pages(sleeping_segment& s, std::size_t from, std::size_t to) {
  segment& seg = *s.seg;
  std::vector<vmm_handle_t> created(to - from, 0);  // by k - from
  std::size_t mapped = from;
  drv_result result{};
  const char* what = "cuMemCreate";
  for (; mapped < to; ++mapped) {
    vmm_handle_t h = s.held[mapped];
    if (h == 0) {
      result = drv_->vmm_create(index_, seg.page, &h);
      if (!result.ok()) break;
      created[mapped - from] = h;
    }
    result = drv_->vmm_map(va_of(seg.base + s.pages[mapped] * seg.page), seg.page, h);
    if (!result.ok()) {
      what = "cuMemMap";
      if (created[mapped - from] != 0) (void)drv_->vmm_release(created[mapped - from]);
      created[mapped - from] = 0;
      break;
    }
    seg.handles[s.pages[mapped]] = h;
  }
  if (result.ok()) {
    for (std::size_t i = from; i < to && result.ok();) {
      std::size_t j = i + 1;
      while (j < to && s.pages[j] == s.pages[j - 1] + 1) ++j;
      result = drv_->vmm_set_access(va_of(seg.base + s.pages[i] * seg.page), (j - i) * seg.page, index_);
      what = "cuMemSetAccess";
      i = j;
    }
    if (result.ok()) return;
  }
  // Back to asleep: unmap what this call mapped; new handles go, held ones stay held.
  for (std::size_t k = from; k < mapped; ++k) {
    (void)drv_->vmm_unmap(va_of(seg.base + s.pages[k] * seg.page), seg.page);
    if (created[k - from] != 0) (void)drv_->vmm_release(created[k - from]);
    seg.handles[s.pages[k]] = 0;
  }
  const std::string text = std::string("streampool: wake: ") + what + " for a page of " + format_size(seg.page) +
                           " at " + core::format_pointer(seg.base + s.pages[std::min(mapped, to - 1)] * seg.page) +
                           " on device " + std::to_string(index_) + " failed: " + drv_->describe(result) +
                           "; the pool stays asleep with its backup: free device memory, then call wake() again";
  if (result.code == status::out_of_memory) throw out_of_memory(text, seg.page, index_);
  throw cuda_error(text, result.native);
}

// --- sleep and wake ----------------------------------------------------------------------------------

void pool_sleeper::sleep(sleep_record& rec, const std::vector<stream_arena*>& arenas, mempool_id pool,
                         const sleep_options& options) {
  // 1. What sleeps: every page mapped now of every segment; all must be VMM.
  std::vector<sleeping_segment> segments;
  for (stream_arena* a : arenas) {
    for (segment* seg = a->segments(); seg != nullptr; seg = seg->next) {
      if (!seg->expandable) {
        throw error("streampool: sleep: the pool holds a " + format_size(seg->size) + " segment at " +
                    core::format_pointer(seg->base) + " on device " + std::to_string(index_) +
                    " made with cudaMalloc" + (seg->provider != nullptr ? " (by its segment provider)" : "") +
                    ", whose memory cannot be given back at the same address; a pool that sleeps needs VMM "
                    "segments: expandable_segments:True for the default pool, pool_options::sleepable (Python: "
                    "sleepable=True) for a private pool, set before its first allocation. Nothing changed");
      }
      sleeping_segment s{seg, a, {}, {}};
      for (std::size_t p = 0; p < seg->handles.size(); ++p) {
        if (seg->handles[p] != 0) s.pages.push_back(p);
      }
      s.held.assign(s.pages.size(), 0);
      if (!s.pages.empty()) segments.push_back(std::move(s));
    }
  }
  wait_for_uses(arenas);  // Note [Sleep after queued work]

  // 2. offload: the live bytes go to the pinned backup (a kept one is reused when big enough).
  std::vector<backup_run> runs;
  std::size_t total = 0;
  if (options.mode == sleep_mode::offload) {
    for (const sleeping_segment& s : segments) {
      for (const block* b = s.seg->head; b != nullptr; b = b->next) {
        if (!b->mapped || !b->allocated) continue;
        if (!runs.empty() && runs.back().device + runs.back().bytes == b->ptr) {
          runs.back().bytes += b->size;
        } else {
          runs.push_back({b->ptr, b->size, total});  // a run's host offset: the bytes before it
        }
        total += b->size;
      }
    }
  }
  if (total > rec.backup_capacity) {
    drop_backup(rec);
    void* host = nullptr;
    const drv_result r = drv_->host_alloc(total, &host);
    if (!r.ok()) {
      const std::string text = "streampool: sleep: cudaHostAlloc of the " + format_size(total) +
                               " pinned backup for device " + std::to_string(index_) + " failed: " +
                               drv_->describe(r) + "; the pool is awake, nothing changed (discard mode needs no backup)";
      if (r.code == status::out_of_memory) throw out_of_memory(text, total, index_);
      throw cuda_error(text, r.native);
    }
    rec.backup = host;
    rec.backup_capacity = total;
  }
  rec.runs = std::move(runs);
  rec.options = options;
  std::vector<backup_run> pieces;
  const std::vector<sleep_window> windows = plan_sleep_windows(segments, rec.runs, window_of(options), pieces);
  try {
    if (!pieces.empty()) ensure_streams();
  } catch (...) {
    if (!options.keep_backup) drop_backup(rec);
    rec.runs.clear();
    throw;
  }

  // 3. Each window's pages go once its copies are done, while the next window's run (Note [Sleep
  //    pipeline]); all or nothing (Note [Sleep all or nothing]).
  std::string failure;
  int failure_native = 0;
  std::vector<std::size_t> gone(segments.size(), 0);  // per segment: its first pages went
  std::size_t backed = 0;                             // windows [0, backed) are in the backup
  const auto copy_failed = [&](const drv_result& r, const char* call) {
    failure = copy_failure(r, call, /*to_host=*/true);
    failure_native = r.native;
  };
  for (std::size_t w = 0; w <= windows.size() && failure.empty(); ++w) {
    if (w < windows.size() && windows[w].first_run < windows[w].end_run) {
      if (const drv_result r = issue_copies(pieces, windows[w], rec.backup, /*to_host=*/true); !r.ok()) {
        copy_failed(r, "cudaMemcpyAsync");
        break;
      }
      if (const drv_result r = record_slot(w % 2); !r.ok()) {
        copy_failed(r, "cudaEventRecord after the copies");
        break;
      }
    }
    if (w == 0) continue;
    const sleep_window& prev = windows[w - 1];
    if (prev.first_run < prev.end_run) {
      if (const drv_result r = wait_slot((w - 1) % 2); !r.ok()) {
        copy_failed(r, "cudaEventSynchronize of the copies");
        break;
      }
    }
    backed = w;
    gone[prev.segment] = unmap_pages(segments[prev.segment], prev.first_page, prev.end_page, &failure);
  }
  if (!failure.empty() && !pieces.empty()) (void)drain();  // copies in flight end before the backup is reused

  bool any_gone = false;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    segments[i].pages.resize(gone[i]);
    segments[i].held.resize(gone[i]);
    count_pages(segments[i], gone[i], /*mapped=*/false, pool);
    any_gone = any_gone || gone[i] > 0;
  }
  if (!any_gone && !failure.empty()) {
    if (!options.keep_backup) drop_backup(rec);
    rec.runs.clear();
    throw cuda_error("streampool: sleep of device " + std::to_string(index_) + ": " + failure +
                         "; the pool is awake, nothing changed",
                     failure_native);
  }
  rec.segments = std::move(segments);
  rec.released_bytes = rec.held_bytes = 0;
  for (sleeping_segment& s : rec.segments) {
    s.seg->asleep = !s.pages.empty();
    for (const vmm_handle_t h : s.held) (h == 0 ? rec.released_bytes : rec.held_bytes) += s.seg->page;
  }
  std::erase_if(rec.segments, [](const sleeping_segment& s) { return s.pages.empty(); });
  rec.offloaded_bytes = total;
  rec.asleep = true;
  if (failure.empty()) return;
  // What went is in the backup: the pieces of the windows backed up (a window's pages go only
  // after its copies), and nothing of the windows after them is copied back.
  rec.runs.assign(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(windows[backed - 1].end_run));
  try {
    wake(rec, pool);  // roll back: awake as before
  } catch (const std::exception& e) {
    throw cuda_error("streampool: sleep of device " + std::to_string(index_) + ": " + failure +
                         "; putting the pool back awake failed too (" + e.what() +
                         "): it stays asleep with its backup; call wake() once the driver recovers",
                     failure_native);
  }
  throw cuda_error("streampool: sleep of device " + std::to_string(index_) + ": " + failure +
                       "; the pool is awake as before",
                   failure_native);
}

void pool_sleeper::wake(sleep_record& rec, mempool_id pool) {
  const bool copying = rec.options.mode == sleep_mode::offload && !rec.runs.empty();
  std::vector<backup_run> pieces;
  const std::vector<sleep_window> windows =
      copying ? plan_sleep_windows(rec.segments, rec.runs, window_of(rec.options), pieces)
              : plan_sleep_windows(rec.segments, {}, window_of(rec.options), pieces);
  if (copying) ensure_streams();  // nothing mapped yet
  // Window w's copies back run while window w+1 is mapped (Note [Sleep pipeline]).
  drv_result failed{};
  try {
    for (const sleep_window& w : windows) {
      map_pages(rec.segments[w.segment], w.first_page, w.end_page);
      if (!copying || w.first_run == w.end_run) continue;
      failed = issue_copies(pieces, w, rec.backup, /*to_host=*/false);
      if (!failed.ok()) break;
    }
  } catch (...) {
    if (copying) (void)drain();  // copies into what this wake mapped end before it goes again
    for (sleeping_segment& s : rec.segments) unmap_again(s);
    throw;
  }
  if (copying) {
    const drv_result waited = drain();
    if (failed.ok()) failed = waited;
  }
  if (!failed.ok()) {
    for (sleeping_segment& s : rec.segments) unmap_again(s);
    throw cuda_error("streampool: wake of device " + std::to_string(index_) + ": " + copy_failure(failed, "cudaMemcpyAsync", /*to_host=*/false) +
                         "; the pool stays asleep with its backup",
                     failed.native);
  }
  for (sleeping_segment& s : rec.segments) {
    count_pages(s, s.pages.size(), /*mapped=*/true, pool);
    s.seg->asleep = false;
  }
  rec.segments.clear();
  rec.runs.clear();
  rec.asleep = false;
  rec.released_bytes = rec.held_bytes = rec.offloaded_bytes = 0;
  if (!rec.options.keep_backup) drop_backup(rec);
}

void pool_sleeper::drop_backup(sleep_record& rec) noexcept {
  if (rec.backup != nullptr) (void)drv_->host_free(rec.backup);
  rec.backup = nullptr;
  rec.backup_capacity = 0;
}

void pool_sleeper::release_at_exit(sleep_record& rec) noexcept {
  for (sleeping_segment& s : rec.segments) {
    for (const vmm_handle_t h : s.held) {
      if (h != 0) (void)drv_->vmm_release(h);
    }
    s.seg->asleep = false;
  }
  rec.segments.clear();
  rec.asleep = false;
  drop_backup(rec);
}

}  // namespace streampool::native
