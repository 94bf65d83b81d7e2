// c_api.cpp — the extern "C" entry points of c_api.h over one process-wide allocator, whose
// lifetime is safe against a concurrent shutdown (Note [C API allocator lifetime]). Every
// function catches everything: errors become a status and a per-thread message.
#include "streampool/c_api.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "c_api/c_api_capture.hpp"
#include "c_api/c_api_delegate.hpp"
#include "c_api/c_api_internal.hpp"
#include "core/address_table.hpp"
#include "core/hybrid_mutex.hpp"
#include "streampool/allocator.hpp"

namespace streampool::c_api_impl {

// Note [C API allocator lifetime]
// Every C entry point works on one process-wide allocator, which streampool_shutdown destroys.
// A call on another thread may be using it at that moment (PyTorch frees from any thread), so
// the accessor hands out a lease, not a bare reference: `readers` counts the calls that hold
// one. A call increments it and then reads `current`; shutdown sets `current` to null and then
// waits for `readers` to drop to zero before it deletes the allocator. With sequentially
// consistent operations either the call's increment comes first (shutdown waits for it) or its
// read of `current` comes after the null store (the call sees no allocator and, taking the
// creation mutex that shutdown holds, waits for shutdown to finish, then creates a new one).
// Shutdown checks for live allocations after the wait, when no call can add one; if one is live
// it puts the allocator back and reports the state error. A call costs two atomic increments of
// one counter, where the earlier accessor locked a mutex per call (docs/benchmarks-history.md, "C API
// pair before and after the lease"). The lifetime test (tests/contract/c_api_lifetime_test.cpp) runs calls on several
// threads against repeated shutdowns, under ThreadSanitizer in the TSan build.
//
// Note [Nothing re-creates the allocator after a shutdown]
// The allocator is created from the environment at the first call only. After a successful
// streampool_shutdown, a call that finds no allocator used to create one from the environment,
// on the real driver: a stray free of an unknown pointer silently installed a new allocator (and
// a program that shut down to re-initialise with another config raced its own threads, which
// re-created the old one first: 2 of 5 re-inits under load were refused). Now shutdown leaves
// the C API in the `shut_down` state, where every call fails with
// STREAMPOOL_ERROR_NOT_INITIALIZED and changes nothing, until streampool_init or
// streampool_init_sim installs the next one; that init cannot be refused by the other threads.
// (c_api_uninstall, the tests' reset, returns to the initial state.)
//
// Note [Init fails when it cannot work]
// Constructing the real driver makes no CUDA call (Note [No driver at construction]), so an
// allocator on a machine without a usable GPU was created, init returned OK, and the driver's
// failure surfaced at the first allocation as a bad device (INVALID_ARGUMENT). Every allocator the
// C API installs is first asked for its device count: no driver, an old driver or no device fails
// the init (or the first call) with STREAMPOOL_ERROR_CUDA, the runtime's status in the message.

/// What PyTorch passes back on free (docs/pytorch-compatibility.md §5): requested size, device
/// and stream of each live pointer.
struct c_api_record {
  std::size_t size = 0;
  int device = 0;
  void* stream = nullptr;
};

/// The records, in shards by address so that threads freeing different pointers rarely meet on
/// one lock; each shard is an address_table (Note [Address table]). The lock is core's
/// hybrid_mutex: a std::mutex cost two pthread calls per C call (Note [Hybrid mutex in core]).
struct record_shard {
  core::hybrid_mutex mutex;
  core::address_table<c_api_record> table;
};
inline constexpr std::size_t record_shards = 16;

struct c_api_instance {
  explicit c_api_instance(std::unique_ptr<allocator> a)
      : alloc(std::move(a)), async_frees(alloc->backend_name() == "cudaMallocAsync") {}
  std::unique_ptr<allocator> alloc;
  /// The backend's frees are driver calls (cudaMallocAsync): checked for a capture on their stream
  /// and run in relaxed capture mode (Note [Captures the C API was not told about], Note [Relaxed
  /// frees on the cudaMallocAsync backend], c_api_capture.cpp).
  const bool async_frees;
  std::array<record_shard, record_shards> records;
  std::atomic<bool> mismatch_reported{false};  ///< Note [Mismatched free]: reported once
  capture_guard captures;  ///< Note [Captures the C API was not told about] (c_api_capture.cpp)

  record_shard& shard_of(const void* ptr) noexcept {
    const auto granule = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr)) >> 9;
    return records[(granule * 0x9E3779B97F4A7C15ull) >> 60];  // the top 4 bits: 16 shards
  }
};
static_assert(record_shards == 16, "shard_of takes the top 4 bits of the hash");

namespace {

struct c_api_state {
  std::mutex mutex;  ///< creation, install, shutdown
  std::atomic<c_api_instance*> current{nullptr};
  std::atomic<std::int64_t> readers{0};
  std::function<std::unique_ptr<allocator>()> factory;  ///< under mutex; empty = make_allocator()
  bool shut_down = false;  ///< under mutex: Note [Nothing re-creates the allocator after a shutdown]
};

c_api_state& state() {
  static c_api_state* s = new c_api_state;  // never destroyed: frees may come during static teardown
  return *s;
}

/// Takes the current instance out (under s.mutex) and waits until no call uses it.
c_api_instance* detach_locked(c_api_state& s) noexcept {
  c_api_instance* instance = s.current.exchange(nullptr);
  if (instance != nullptr) {
    while (s.readers.load() != 0) std::this_thread::yield();
  }
  return instance;
}

/// Note [Init fails when it cannot work]: `alloc`, once its driver reports a usable device.
std::unique_ptr<allocator> usable(std::unique_ptr<allocator> alloc, const char* who) {
  driver& drv = alloc->device_driver();
  int count = 0;
  const drv_result result = drv.device_count(&count);
  if (!result.ok() || count == 0) {
    throw cuda_error(std::string(who) + ": no usable CUDA device (" + drv.describe(result) +
                         "); the allocator cannot work here. Without a GPU, use streampool_init_sim() (the simulated "
                         "device) to try a config",
                     result.native);
  }
  return alloc;
}

struct not_initialized_error : error {
  using error::error;
};

/// The calling thread's last status and message, one thread_local: in libstreampool.so each
/// thread_local costs a __tls_get_addr call per access, and every C call sets both.
struct last_result {
  int status = STREAMPOOL_OK;
  std::string message;
};
thread_local last_result last;

int succeed() {
  last_result& l = last;
  l.status = STREAMPOOL_OK;
  if (!l.message.empty()) l.message.clear();
  return STREAMPOOL_OK;
}

/// Runs `body` and turns any exception into a status (Note [One exception ladder]).
template <typename F>
int guarded(F&& body) {
  try {
    body();
    return succeed();
  } catch (...) {
    return c_api_fail_current();
  }
}

std::string pointer_text(const void* ptr) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%p", ptr);
  return buffer;
}

}  // namespace

allocator_lease::~allocator_lease() {
  if (instance_ != nullptr) state().readers.fetch_sub(1);
}

allocator* allocator_lease::operator->() const noexcept { return instance_->alloc.get(); }

allocator_lease instance() {
  c_api_state& s = state();
  for (;;) {
    s.readers.fetch_add(1);
    if (c_api_instance* current = s.current.load()) return allocator_lease(current);
    s.readers.fetch_sub(1);
    const std::lock_guard lock(s.mutex);
    if (s.current.load() != nullptr) continue;
    if (delegated()) refuse_delegated("streampool");  // Note [C API delegate]: no own allocator beside it
    if (s.shut_down) {  // Note [Nothing re-creates the allocator after a shutdown]
      throw not_initialized_error(
          "streampool: the C API's allocator was shut down (streampool_shutdown); call streampool_init or "
          "streampool_init_sim to create the next one. Nothing was done");
    }
    s.current.store(new c_api_instance(usable(s.factory ? s.factory() : make_allocator(), "streampool")));
  }
}

void c_api_set_factory(std::function<std::unique_ptr<allocator>()> factory) {
  c_api_state& s = state();
  const std::lock_guard lock(s.mutex);
  s.factory = std::move(factory);
}

void c_api_install(std::unique_ptr<allocator> alloc) {
  c_api_state& s = state();
  const std::lock_guard lock(s.mutex);
  if (s.current.load() != nullptr) throw state_error("streampool C API: an allocator is already installed");
  if (delegated()) refuse_delegated("streampool C API install");
  s.current.store(new c_api_instance(usable(std::move(alloc), "streampool C API")));
  s.shut_down = false;
}

int c_api_set_last(int status, std::string message) noexcept {
  last_result& l = last;
  l.status = status;
  l.message = std::move(message);
  return status;
}

// Note [One exception ladder]
// Every C entry point (this file, c_api_trace.cpp, c_api_host.cpp) maps exceptions to statuses the
// same way, here: called inside a catch block, it rethrows the exception in flight and records
// its status and message as the calling thread's last ones.
int c_api_fail_current() noexcept {
  try {
    throw;
  } catch (const delegated_error& e) {  // Note [C API delegate]: its status as it gave it
    return c_api_set_last(e.status, e.what());
  } catch (const out_of_memory& e) {
    return c_api_set_last(STREAMPOOL_ERROR_OUT_OF_MEMORY, e.what());
  } catch (const config_error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_CONFIG, e.what());
  } catch (const cuda_error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_CUDA, e.what());
  } catch (const state_error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_STATE, e.what());
  } catch (const not_initialized_error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_NOT_INITIALIZED, e.what());
  } catch (const error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return c_api_set_last(STREAMPOOL_ERROR_OUT_OF_MEMORY, "streampool: host memory exhausted");
  } catch (const std::exception& e) {
    return c_api_set_last(STREAMPOOL_ERROR_INTERNAL, std::string("streampool: internal error: ") + e.what());
  } catch (...) {
    return c_api_set_last(STREAMPOOL_ERROR_INTERNAL, "streampool: internal error (unknown exception)");
  }
}

std::unique_ptr<allocator> c_api_uninstall() noexcept {
  c_api_state& s = state();
  const std::lock_guard lock(s.mutex);
  s.shut_down = false;  // the tests' reset: back to the initial state
  std::unique_ptr<c_api_instance> instance(detach_locked(s));
  return instance ? std::move(instance->alloc) : nullptr;
}

std::size_t c_api_unannounced_captures() noexcept {
  c_api_state& s = state();
  s.readers.fetch_add(1);  // Note [C API allocator lifetime]
  c_api_instance* current = s.current.load();
  std::size_t count = 0;
  if (current != nullptr) {
    try {
      count = current->captures.tracked();
    } catch (...) {
      count = 0;  // a mutex that cannot lock: report nothing
    }
  }
  s.readers.fetch_sub(1);
  return count;
}

// Note [Mismatched free]
// PyTorch's pluggable allocator passes back on free the size, device and stream it recorded at
// allocation. When they differ from ours the caller's bookkeeping is off, but the pointer is
// ours and live: refusing the free would leak it, silently for PyTorch (the function returns
// void and PyTorch does not read the status). So it is freed, and the mismatch is reported once
// per allocator through the warning handler (not per call: a systematic mismatch would flood).
// streampool_free_unsized passes no records (`expected` empty): nothing to compare.
void free_recorded(void* ptr, const std::optional<c_api_record>& expected, const char* what) {
  if (const delegate_call d; d) {  // Note [C API delegate]
    d.free(ptr);
    return;
  }
  const allocator_lease alloc = instance();
  record_shard& shard = alloc.owner().shard_of(ptr);
  const auto key = reinterpret_cast<std::uintptr_t>(ptr);
  std::optional<c_api_record> rec;
  {
    // Note [Free erases its record first]: the record is taken out under the lock BEFORE the
    // memory goes back, so an allocation on another thread that gets the same address at once
    // inserts its own record afterwards instead of having it erased by this free.
    const std::lock_guard lock(shard.mutex);
    rec = shard.table.take(key);
  }
  if (!rec) {
    throw error(std::string(what) + ": " + pointer_text(ptr) +
                " was not allocated by streampool_alloc (or was already freed)");
  }
  if (expected && (rec->size != expected->size || rec->device != expected->device || rec->stream != expected->stream) &&
      !alloc.owner().mismatch_reported.exchange(true)) {
    warn(std::string(what) + "(" + pointer_text(ptr) + ", size " + std::to_string(expected->size) + ", device " +
         std::to_string(expected->device) + ", stream " + pointer_text(expected->stream) +
         "): the allocation was made with size " + std::to_string(rec->size) + ", device " +
         std::to_string(rec->device) + ", stream " + pointer_text(rec->stream) +
         "; freed anyway. The caller's records differ from streampool's; this is reported once.");
  }
  try {
    // Note [Captures the C API was not told about]; Note [Relaxed frees on the cudaMallocAsync backend].
    if (alloc.owner().async_frees) {
      alloc.owner().captures.before_call(*alloc, rec->device, rec->stream);
    } else {
      alloc.owner().captures.sweep_if_needed(*alloc);
    }
    const relaxed_thread_scope relaxed(alloc->device_driver(), alloc.owner().async_frees);
    alloc->deallocate(ptr);
  } catch (...) {
    const std::lock_guard lock(shard.mutex);
    shard.table.reserve_one();  // cannot grow: the record taken out above left its slot free
    shard.table.insert(key, *rec);  // the allocation is still live: keep it freeable
    throw;
  }
}

int c_api_guarded(const std::function<void()>& body) noexcept { return guarded(body); }

int c_api_with_allocator(const std::function<void(allocator&)>& body) noexcept {
  return guarded([&] {
    const allocator_lease lease = instance();  // keeps the allocator alive for the whole call
    body(*lease);
  });
}

}  // namespace streampool::c_api_impl

using namespace streampool;
using streampool::c_api_impl::guarded;
using streampool::c_api_impl::state;

extern "C" {

int streampool_init(const char* config) {
  return guarded([&] {
    auto& s = state();
    const std::lock_guard lock(s.mutex);
    if (s.current.load() != nullptr) {
      throw c_api_impl::state_error("streampool_init: the allocator already exists (initialise before the first "
                                "allocation, or call streampool_shutdown first)");
    }
    if (c_api_impl::delegated()) c_api_impl::refuse_delegated("streampool_init");
    auto alloc = config != nullptr ? make_allocator(parse_config(config), make_cuda_driver()) : make_allocator();
    // Note [Init fails when it cannot work]
    s.current.store(new c_api_impl::c_api_instance(c_api_impl::usable(std::move(alloc), "streampool_init")));
    s.shut_down = false;
  });
}

int streampool_shutdown(void) {
  return guarded([&] {
    auto& s = state();
    const std::lock_guard lock(s.mutex);
    if (c_api_impl::delegated()) c_api_impl::refuse_delegated("streampool_shutdown");
    // Note [C API allocator lifetime]: no call uses it once detached, so the count is final.
    std::unique_ptr<c_api_impl::c_api_instance> instance(c_api_impl::detach_locked(s));
    if (!instance) {  // nothing to destroy (never created, or shut down already): closed all the same
      s.shut_down = true;
      return;
    }
    try {
      instance->alloc->empty_cache();
      int count = 0;
      std::int64_t live = 0;
      if (instance->alloc->device_driver().device_count(&count).ok()) {
        for (int device = 0; device < count; ++device) live += instance->alloc->stats(device).allocation[0].current;
      }
      if (live != 0) {
        throw c_api_impl::state_error("streampool_shutdown: " + std::to_string(live) +
                                  " allocation(s) are still live; free them first");
      }
    } catch (...) {
      s.current.store(instance.release());  // kept: the allocator stays in use
      throw;
    }
    s.shut_down = true;  // Note [Nothing re-creates the allocator after a shutdown]
  });
}

void* streampool_alloc(size_t size, int device, void* stream) {
  void* ptr = nullptr;
  if (size == 0) {
    c_api_impl::succeed();
    return nullptr;
  }
  guarded([&] {
    if (const c_api_impl::delegate_call d; d) {  // Note [C API delegate]
      ptr = d.allocate(size, device, stream);
      return;
    }
    const c_api_impl::allocator_lease alloc = c_api_impl::instance();
    alloc.owner().captures.before_call(*alloc, device, stream);  // Note [Captures the C API was not told about]
    void* got = alloc->allocate(size, stream, device);
    c_api_impl::record_shard& shard = alloc.owner().shard_of(got);
    {
      const std::lock_guard lock(shard.mutex);
      try {
        shard.table.reserve_one();
      } catch (...) {
        alloc->deallocate(got);  // no record, no allocation
        throw;
      }
      shard.table.insert(reinterpret_cast<std::uintptr_t>(got), {size, device, stream});
    }
    ptr = got;
  });
  return ptr;
}

void streampool_free(void* ptr, size_t size, int device, void* stream) {
  if (ptr == nullptr) {
    c_api_impl::succeed();
    return;
  }
  guarded([&] { c_api_impl::free_recorded(ptr, c_api_impl::c_api_record{size, device, stream}, "streampool_free"); });
}

int streampool_free_unsized(void* ptr) {
  if (ptr == nullptr) return c_api_impl::succeed();
  return guarded([&] { c_api_impl::free_recorded(ptr, std::nullopt, "streampool_free_unsized"); });
}

int streampool_record_stream(void* ptr, void* stream) {
  return guarded([&] {
    if (const c_api_impl::delegate_call d; d) return d.check(d->record_stream(ptr, stream));
    c_api_impl::instance()->record_stream(ptr, stream);
  });
}

int streampool_empty_cache(void) {
  return guarded([&] {
    if (const c_api_impl::delegate_call d; d) return d.check(d->empty_cache());
    const c_api_impl::allocator_lease alloc = c_api_impl::instance();
    alloc.owner().captures.sweep_if_needed(*alloc);  // pools of destroyed graphs go too
    alloc->empty_cache();
  });
}

int streampool_set_memory_fraction(double fraction, int device) {
  return guarded([&] {
    if (const c_api_impl::delegate_call d; d) return d.check(d->set_memory_fraction(fraction, device));
    c_api_impl::instance()->set_memory_fraction(fraction, device);
  });
}

int streampool_set_settings(const char* config) {
  return guarded([&] {
    if (config == nullptr) throw streampool::error("streampool_set_settings: config is NULL; pass a config string");
    c_api_impl::instance()->set_settings(config);
  });
}

const char* streampool_settings_text(void) {
  thread_local std::string text;
  const int status = guarded([&] { text = streampool::to_string(c_api_impl::instance()->settings()); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

const char* streampool_stats_json(int device) {
  thread_local std::string text;
  const int status = guarded([&] {
    if (const c_api_impl::delegate_call d; d) {
      text = d.check_text(d->stats_json(device));
      return;
    }
    text = c_api_impl::instance()->stats(device).to_json();
  });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

const char* streampool_snapshot_json(void) {
  thread_local std::string text;
  const int status = guarded([&] {
    if (const c_api_impl::delegate_call d; d) {
      text = d.check_text(d->snapshot_json());
      return;
    }
    text = c_api_impl::instance()->snapshot().to_json();
  });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

const char* streampool_backend_name(void) {
  const char* name = nullptr;
  guarded([&] {
    if (const c_api_impl::delegate_call d; d) {
      name = d.check_text(d->backend_name());  // a static string of the delegate's
      return;
    }
    name = c_api_impl::instance()->backend_name().data();
  });
  return name;
}

int streampool_set_delegate(const streampool_delegate* delegate) {
  return guarded([&] {
    auto& s = state();
    const std::lock_guard lock(s.mutex);
    if (delegate != nullptr && s.current.load() != nullptr) {
      throw c_api_impl::state_error(
          "streampool_set_delegate: the C API's own allocator exists (an earlier call created it); free its "
          "allocations and call streampool_shutdown first, so that one allocator serves the process");
    }
    c_api_impl::set_delegate_locked(delegate);
  });
}

const char* streampool_delegate_name(void) { return c_api_impl::delegate_name(); }

int streampool_last_status(void) { return c_api_impl::last.status; }
const char* streampool_last_error(void) { return c_api_impl::last.message.c_str(); }

}  // extern "C"
