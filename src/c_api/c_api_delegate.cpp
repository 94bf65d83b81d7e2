// c_api_delegate.cpp — the C API's delegate: who serves the C API's allocation calls when another
// copy of streampool in the process owns the allocator (the PyTorch extension), its live
// allocations, and the wait of a clear for the calls in flight. See Note [C API delegate].
#include "c_api/c_api_delegate.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

#include "c_api/c_api_internal.hpp"
#include "core/address_table.hpp"
#include "core/format.hpp"
#include "core/hybrid_mutex.hpp"
#include "streampool/allocator.hpp"

namespace streampool::c_api_impl {

// Note [C API delegate]
// The Python package has two routes into PyTorch (python/streampool/_torch.py): the extension
// streampool._C10 links the static library, so once it is PyTorch's allocator the process holds a
// second copy of streampool beside libstreampool.so, whose C API (C programs, C++ through
// streampool/process_allocator.hpp, ctypes) would otherwise create an allocator of its own: two
// caches, two budgets. So the extension hands the C API a table of C functions over its allocator
// (a C ABI, versioned: no C++ object crosses between the two copies), and the C API's allocation
// calls go there. Calls hold the delegate the way they hold the C API's own allocator (a readers
// count, taken only when a delegate is set: no cost otherwise); clearing it takes it out, waits for
// the readers and is refused while allocations made through it live. Those allocations are
// recorded here, so a free of a pointer that did not come from streampool_alloc is refused as on
// the own allocator (the delegate would free any pointer of its allocator, e.g. a tensor's). The
// own allocator and a delegate never coexist: setting is refused while the own allocator exists,
// and nothing creates one while a delegate is set.

namespace {

struct delegate_state {
  std::atomic<const streampool_delegate*>& current = current_delegate;
  std::atomic<std::int64_t> readers{0};
  core::hybrid_mutex live_mutex;
  core::address_table<char> live;  ///< pointers streampool_alloc got from the delegate
};

delegate_state& dstate() {
  static delegate_state* s = new delegate_state;  // never destroyed: frees may come during teardown
  return *s;
}

}  // namespace

void delegate_call::enter() noexcept {
  delegate_state& s = dstate();
  s.readers.fetch_add(1);
  d_ = s.current.load();
  if (d_ == nullptr) s.readers.fetch_sub(1);
}

void delegate_call::leave() noexcept { dstate().readers.fetch_sub(1); }

void delegate_call::check(int status) const {
  if (status == STREAMPOOL_OK) return;
  const char* text = d_->last_error();
  throw delegated_error(status, std::string(text != nullptr && *text != '\0' ? text : "(no message)") + " [served by " +
                                    d_->name + "]");
}

const char* delegate_call::check_text(const char* text) const {
  if (text == nullptr) check(STREAMPOOL_ERROR_INTERNAL);
  return text;
}

void* delegate_call::allocate(std::size_t size, int device, void* stream) const {
  delegate_state& s = dstate();
  void* ptr = nullptr;
  check(d_->alloc(size, device, stream, &ptr));
  try {
    const std::lock_guard lock(s.live_mutex);
    s.live.reserve_one();  // may throw: then the allocation goes back
    s.live.insert(reinterpret_cast<std::uintptr_t>(ptr), 0);
  } catch (...) {
    (void)d_->free(ptr);
    throw;
  }
  return ptr;
}

void delegate_call::free(void* ptr) const {
  delegate_state& s = dstate();
  const auto key = reinterpret_cast<std::uintptr_t>(ptr);
  {
    const std::lock_guard lock(s.live_mutex);
    if (!s.live.take(key)) {
      throw error("streampool_free: " + core::format_pointer(ptr) + " was not allocated by streampool_alloc (or was already "
                  "freed); nothing freed [served by " + std::string(d_->name) + "]");
    }
  }
  try {
    check(d_->free(ptr));
  } catch (...) {
    const std::lock_guard lock(s.live_mutex);
    s.live.reserve_one();  // cannot grow: the take above left its slot free
    s.live.insert(key, 0);  // still live: keep it freeable
    throw;
  }
}

const char* delegate_name() noexcept {
  const streampool_delegate* d = dstate().current.load();
  return d != nullptr ? d->name : nullptr;
}

void refuse_delegated(const char* what) {
  const char* name = delegate_name();
  throw state_error(std::string(what) + ": the C API's allocator is " + (name != nullptr ? name : "a delegate") +
                    " (streampool_set_delegate), which does not serve this call through the C API; use its own API "
                    "(in Python: the streampool package's functions), or clear the delegate first");
}

void set_delegate_locked(const streampool_delegate* delegate) {
  delegate_state& s = dstate();
  if (delegate == nullptr) {
    const streampool_delegate* old = s.current.exchange(nullptr);
    if (old == nullptr) return;
    while (s.readers.load() != 0) std::this_thread::yield();  // calls in flight end first
    std::size_t live = 0;
    {
      const std::lock_guard lock(s.live_mutex);
      live = s.live.size();
    }
    if (live != 0) {
      s.current.store(old);
      throw state_error("streampool_set_delegate(NULL): " + std::to_string(live) + " allocation(s) made through " +
                        old->name + " are still live; free them first (the delegate stays)");
    }
    return;
  }
  if (delegate->abi != STREAMPOOL_DELEGATE_ABI) {
    throw error("streampool_set_delegate: the delegate has ABI " + std::to_string(delegate->abi) +
                ", this libstreampool expects " + std::to_string(STREAMPOOL_DELEGATE_ABI) +
                "; build the delegate against this version's c_api.h");
  }
  if (delegate->name == nullptr || delegate->alloc == nullptr || delegate->free == nullptr ||
      delegate->record_stream == nullptr || delegate->empty_cache == nullptr ||
      delegate->set_memory_fraction == nullptr || delegate->stats_json == nullptr ||
      delegate->snapshot_json == nullptr || delegate->backend_name == nullptr || delegate->last_error == nullptr) {
    throw error("streampool_set_delegate: every member of the delegate must be set (one is NULL)");
  }
  const streampool_delegate* old = s.current.load();
  if (old == delegate) return;
  if (old != nullptr) {
    throw state_error(std::string("streampool_set_delegate: ") + old->name +
                      " is the delegate already; clear it (streampool_set_delegate(NULL)) first");
  }
  s.current.store(delegate);
}

}  // namespace streampool::c_api_impl
