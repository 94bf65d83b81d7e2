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
// Note [Sleeping memory in the statistics]
// Released pages leave reserved_bytes (and count as device frees, traced as segment_unmap), since
// the device has them back: memory_reserved() then says what the allocator holds on the device,
// and cudaMemGetInfo agrees. Allocated and active bytes do not change: the allocations live on at
// their addresses, unreadable until wake() (which counts device allocs, traced as segment_map).
// So while a pool sleeps, allocated_bytes can exceed reserved_bytes. A snapshot lists a sleeping
// segment with is_asleep set.

namespace {

void* va_of(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }

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

void pool_sleeper::copy(const sleep_record& rec, bool to_host) {
  if (rec.runs.empty()) return;
  ensure_streams();
  auto* host = static_cast<unsigned char*>(rec.backup);
  std::size_t next_stream = 0;
  std::vector<bool> used(streams_.size(), false);
  drv_result failed{};
  for (const backup_run& run : rec.runs) {
    for (std::size_t at = 0; at < run.bytes && failed.ok(); at += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, run.bytes - at);
      void* dev = va_of(run.device + at);
      void* h = host + run.offset + at;
      const std::size_t k = next_stream++ % streams_.size();
      used[k] = true;
      failed = to_host ? drv_->memcpy_async(h, dev, n, streams_[k]) : drv_->memcpy_async(dev, h, n, streams_[k]);
    }
  }
  drv_result waited{};
  for (std::size_t k = 0; k < streams_.size(); ++k) {
    if (!used[k]) continue;
    const drv_result r = drv_->stream_synchronize(index_, streams_[k]);
    if (!r.ok() && waited.ok()) waited = r;
  }
  const drv_result& bad = failed.ok() ? waited : failed;
  if (!bad.ok()) {
    throw cuda_error(std::string("streampool: ") + (to_host ? "sleep" : "wake") + ": cudaMemcpyAsync " +
                         (to_host ? "to" : "from") + " the pinned backup on device " + std::to_string(index_) +
                         " failed: " + drv_->describe(bad),
                     bad.native);
  }
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

bool pool_sleeper::unmap_pages(sleeping_segment& s, std::size_t from, std::string* failure) noexcept {
  segment& seg = *s.seg;
  for (std::size_t k = from; k < s.pages.size(); ++k) {
    const std::size_t p = s.pages[k];
    const drv_result unmapped = drv_->vmm_unmap(va_of(seg.base + p * seg.page), seg.page);
    if (!unmapped.ok()) {
      *failure = "cuMemUnmap of the page at " + core::format_pointer(seg.base + p * seg.page) + " failed: " +
                 drv_->describe(unmapped);
      s.pages.resize(k);  // the rest stays mapped
      s.held.resize(k);
      return false;
    }
    const vmm_handle_t h = seg.handles[p];
    s.held[k] = 0;
    if (h != released_handle && !drv_->vmm_release(h).ok()) s.held[k] = h;  // Note [Sleep all or nothing]
    seg.handles[p] = 0;
  }
  return true;
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

void pool_sleeper::map_pages(sleeping_segment& s, std::size_t count) {
  segment& seg = *s.seg;
  std::vector<vmm_handle_t> created(count, 0);
  std::size_t mapped = 0;
  drv_result result{};
  const char* what = "cuMemCreate";
  for (; mapped < count; ++mapped) {
    vmm_handle_t h = s.held[mapped];
    if (h == 0) {
      result = drv_->vmm_create(index_, seg.page, &h);
      if (!result.ok()) break;
      created[mapped] = h;
    }
    result = drv_->vmm_map(va_of(seg.base + s.pages[mapped] * seg.page), seg.page, h);
    if (!result.ok()) {
      what = "cuMemMap";
      if (created[mapped] != 0) (void)drv_->vmm_release(created[mapped]);
      created[mapped] = 0;
      break;
    }
    seg.handles[s.pages[mapped]] = h;
  }
  if (result.ok()) {
    for (std::size_t i = 0; i < count && result.ok();) {
      std::size_t j = i + 1;
      while (j < count && s.pages[j] == s.pages[j - 1] + 1) ++j;
      result = drv_->vmm_set_access(va_of(seg.base + s.pages[i] * seg.page), (j - i) * seg.page, index_);
      what = "cuMemSetAccess";
      i = j;
    }
    if (result.ok()) return;
  }
  // Back to asleep: unmap what this call mapped; new handles go, held ones stay held.
  for (std::size_t k = 0; k < mapped; ++k) {
    (void)drv_->vmm_unmap(va_of(seg.base + s.pages[k] * seg.page), seg.page);
    if (created[k] != 0) (void)drv_->vmm_release(created[k]);
    seg.handles[s.pages[k]] = 0;
  }
  const std::string text = std::string("streampool: wake: ") + what + " for a page of " + format_size(seg.page) +
                           " at " + core::format_pointer(seg.base + s.pages[std::min(mapped, count - 1)] * seg.page) +
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
  try {
    copy(rec, /*to_host=*/true);
  } catch (...) {
    if (!options.keep_backup) drop_backup(rec);
    rec.runs.clear();
    throw;
  }

  // 3. The pages go back (Note [Sleep all or nothing]).
  std::string failure;
  std::size_t done = 0;
  for (; done < segments.size(); ++done) {
    if (!unmap_pages(segments[done], 0, &failure)) break;
  }
  for (std::size_t k = done + 1; k < segments.size(); ++k) {  // never unmapped: not asleep
    segments[k].pages.clear();
    segments[k].held.clear();
  }
  for (std::size_t k = 0; k <= done && k < segments.size(); ++k) {
    count_pages(segments[k], segments[k].pages.size(), /*mapped=*/false, pool);
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
  try {
    wake(rec, pool);  // roll back: awake as before
  } catch (const std::exception& e) {
    throw cuda_error("streampool: sleep of device " + std::to_string(index_) + ": " + failure +
                         "; putting the pool back awake failed too (" + e.what() +
                         "): it stays asleep with its backup; call wake() once the driver recovers",
                     0);
  }
  throw cuda_error("streampool: sleep of device " + std::to_string(index_) + ": " + failure +
                       "; the pool is awake as before",
                   0);
}

void pool_sleeper::wake(sleep_record& rec, mempool_id pool) {
  std::size_t done = 0;
  try {
    for (; done < rec.segments.size(); ++done) map_pages(rec.segments[done], rec.segments[done].pages.size());
  } catch (...) {
    for (std::size_t k = 0; k < done; ++k) unmap_again(rec.segments[k]);
    throw;
  }
  if (rec.options.mode == sleep_mode::offload) {
    try {
      copy(rec, /*to_host=*/false);
    } catch (...) {
      for (sleeping_segment& s : rec.segments) unmap_again(s);
      throw;
    }
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
