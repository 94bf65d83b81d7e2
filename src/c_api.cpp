// c_api.cpp — the extern "C" entry points of c_api.h over one process-wide allocator. Every
// function catches everything: errors become a status and a per-thread message.
#include "streampool/c_api.h"

#include <mutex>
#include <string>
#include <unordered_map>

#include "c_api_internal.hpp"
#include "streampool/allocator.hpp"

namespace streampool::detail {
namespace {

struct c_api_state {
  std::mutex mutex;
  std::unique_ptr<allocator> alloc;
  // What PyTorch passes back on free (spec §5): requested size, device and stream per pointer.
  std::mutex records_mutex;
  struct record {
    std::size_t size;
    int device;
    void* stream;
  };
  std::unordered_map<void*, record> records;
};

c_api_state& state() {
  static c_api_state* s = new c_api_state;  // never destroyed: frees may come during static teardown
  return *s;
}

/// Misuse of the C API's lifecycle (init twice, shutdown with live allocations).
struct state_error : error {
  using error::error;
};

thread_local int last_status = STREAMPOOL_OK;
thread_local std::string last_message;

int fail(int status, std::string message) {
  last_status = status;
  last_message = std::move(message);
  return status;
}

int succeed() {
  last_status = STREAMPOOL_OK;
  last_message.clear();
  return STREAMPOOL_OK;
}

/// Runs `body` and turns any exception into a status.
template <typename F>
int guarded(F&& body) {
  try {
    body();
    return succeed();
  } catch (const out_of_memory& e) {
    return fail(STREAMPOOL_ERROR_OUT_OF_MEMORY, e.what());
  } catch (const config_error& e) {
    return fail(STREAMPOOL_ERROR_CONFIG, e.what());
  } catch (const cuda_error& e) {
    return fail(STREAMPOOL_ERROR_CUDA, e.what());
  } catch (const state_error& e) {
    return fail(STREAMPOOL_ERROR_STATE, e.what());
  } catch (const error& e) {
    return fail(STREAMPOOL_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(STREAMPOOL_ERROR_OUT_OF_MEMORY, "streampool: host memory exhausted");
  } catch (const std::exception& e) {
    return fail(STREAMPOOL_ERROR_INTERNAL, std::string("streampool: internal error: ") + e.what());
  } catch (...) {
    return fail(STREAMPOOL_ERROR_INTERNAL, "streampool: internal error (unknown exception)");
  }
}

allocator& instance() {
  c_api_state& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.alloc) s.alloc = make_allocator();
  return *s.alloc;
}

}  // namespace

void c_api_install(std::unique_ptr<allocator> alloc) {
  c_api_state& s = state();
  std::lock_guard lock(s.mutex);
  if (s.alloc) throw state_error("streampool C API: an allocator is already installed");
  s.alloc = std::move(alloc);
}

int c_api_set_last(int status, std::string message) noexcept {
  last_status = status;
  last_message = std::move(message);
  return status;
}

std::unique_ptr<allocator> c_api_uninstall() noexcept {
  c_api_state& s = state();
  std::lock_guard lock(s.mutex);
  std::lock_guard records_lock(s.records_mutex);
  s.records.clear();
  return std::move(s.alloc);
}

int c_api_guarded(const std::function<void()>& body) noexcept { return guarded(body); }

int c_api_with_allocator(const std::function<void(allocator&)>& body) noexcept {
  return guarded([&] { body(instance()); });
}

}  // namespace streampool::detail

using namespace streampool;
using streampool::detail::guarded;
using streampool::detail::state;

extern "C" {

int streampool_init(const char* config) {
  return guarded([&] {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    if (s.alloc) {
      throw detail::state_error("streampool_init: the allocator already exists (initialise before the first "
                                "allocation, or call streampool_shutdown first)");
    }
    s.alloc = config != nullptr ? make_allocator(parse_config(config), make_cuda_driver()) : make_allocator();
  });
}

int streampool_shutdown(void) {
  return guarded([&] {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    if (!s.alloc) return;
    s.alloc->empty_cache();
    int count = 0;
    std::int64_t live = 0;
    if (s.alloc->device_driver().device_count(&count).ok()) {
      for (int device = 0; device < count; ++device) live += s.alloc->stats(device).allocation[0].current;
    }
    if (live != 0) {
      throw detail::state_error("streampool_shutdown: " + std::to_string(live) +
                                " allocation(s) are still live; free them first");
    }
    s.alloc.reset();
  });
}

void* streampool_alloc(size_t size, int device, void* stream) {
  void* ptr = nullptr;
  if (size == 0) {
    detail::succeed();
    return nullptr;
  }
  guarded([&] {
    ptr = detail::instance().allocate(size, stream, device);
    auto& s = state();
    std::lock_guard lock(s.records_mutex);
    s.records[ptr] = {size, device, stream};
  });
  return ptr;
}

void streampool_free(void* ptr, size_t size, int device, void* stream) {
  if (ptr == nullptr) {
    detail::succeed();
    return;
  }
  guarded([&] {
    auto& s = state();
    detail::c_api_state::record rec{};
    {
      // Note [Free erases its record first]: the record is taken out under the lock BEFORE the
      // memory goes back, so an allocation on another thread that gets the same address at once
      // inserts its own record afterwards instead of having it erased by this free.
      std::lock_guard lock(s.records_mutex);
      const auto it = s.records.find(ptr);
      if (it == s.records.end()) {
        throw error("streampool_free: " + std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) +
                    " was not allocated by streampool_alloc (or was already freed)");
      }
      rec = it->second;
      if (rec.size != size || rec.device != device || rec.stream != stream) {
        throw error("streampool_free: arguments do not match the allocation (size " + std::to_string(size) +
                    " vs " + std::to_string(rec.size) + ", device " + std::to_string(device) + " vs " +
                    std::to_string(rec.device) + "); nothing was freed");
      }
      s.records.erase(it);
    }
    try {
      detail::instance().deallocate(ptr);
    } catch (...) {
      std::lock_guard lock(s.records_mutex);
      s.records.emplace(ptr, rec);  // the allocation is still live: keep it freeable
      throw;
    }
  });
}

int streampool_record_stream(void* ptr, void* stream) {
  return guarded([&] { detail::instance().record_stream(ptr, stream); });
}

int streampool_empty_cache(void) {
  return guarded([&] { detail::instance().empty_cache(); });
}

int streampool_set_memory_fraction(double fraction, int device) {
  return guarded([&] { detail::instance().set_memory_fraction(fraction, device); });
}

const char* streampool_stats_json(int device) {
  thread_local std::string text;
  const int status = guarded([&] { text = detail::instance().stats(device).to_json(); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

const char* streampool_snapshot_json(void) {
  thread_local std::string text;
  const int status = guarded([&] { text = detail::instance().snapshot().to_json(); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

const char* streampool_backend_name(void) {
  const char* name = nullptr;
  guarded([&] { name = detail::instance().backend_name().data(); });
  return name;
}

int streampool_last_status(void) { return detail::last_status; }
const char* streampool_last_error(void) { return detail::last_message.c_str(); }

}  // extern "C"
