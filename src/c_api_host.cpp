// c_api_host.cpp — the extern "C" entry points of the pinned host allocator (c_api.h, "Pinned
// host memory") over one process-wide host_allocator, created on first use from the environment
// (the pinned_* keys of STREAMPOOL_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF) on the real driver, or by
// streampool_host_init(). Like c_api.cpp, every function catches everything and reports through
// streampool_last_status() / streampool_last_error().
#include <mutex>
#include <string>

#include "c_api_internal.hpp"
#include "streampool/c_api.h"

namespace streampool::detail {
namespace {

struct host_api_state {
  std::mutex mutex;
  std::unique_ptr<host_allocator> alloc;
};

host_api_state& host_state() {
  static auto* s = new host_api_state;  // never destroyed: frees may come during static teardown
  return *s;
}

struct host_state_error : error {
  using error::error;
};

template <typename F>
int host_guarded(F&& body) noexcept {
  try {
    body();
    return c_api_set_last(STREAMPOOL_OK, {});
  } catch (const out_of_memory& e) {
    return c_api_set_last(STREAMPOOL_ERROR_OUT_OF_MEMORY, e.what());
  } catch (const config_error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_CONFIG, e.what());
  } catch (const cuda_error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_CUDA, e.what());
  } catch (const host_state_error& e) {
    return c_api_set_last(STREAMPOOL_ERROR_STATE, e.what());
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

host_allocator& host_instance() {
  host_api_state& s = host_state();
  const std::lock_guard lock(s.mutex);
  if (!s.alloc) s.alloc = make_host_allocator();
  return *s.alloc;
}

}  // namespace

void c_api_host_install(std::unique_ptr<host_allocator> alloc) {
  host_api_state& s = host_state();
  const std::lock_guard lock(s.mutex);
  if (s.alloc) throw error("streampool C API: a host allocator is already installed");
  s.alloc = std::move(alloc);
}

std::unique_ptr<host_allocator> c_api_host_uninstall() noexcept {
  host_api_state& s = host_state();
  const std::lock_guard lock(s.mutex);
  return std::move(s.alloc);
}

}  // namespace streampool::detail

using namespace streampool;
using streampool::detail::host_guarded;
using streampool::detail::host_instance;

extern "C" {

int streampool_host_init(const char* config) {
  return host_guarded([&] {
    auto& s = detail::host_state();
    const std::lock_guard lock(s.mutex);
    if (s.alloc) {
      throw detail::host_state_error("streampool_host_init: the host allocator already exists (initialise before "
                                     "the first streampool_host_alloc)");
    }
    s.alloc = config != nullptr ? make_host_allocator(parse_config(config), make_cuda_driver()) : make_host_allocator();
  });
}

void* streampool_host_alloc(size_t size) {
  void* out = nullptr;
  (void)host_guarded([&] { out = host_instance().allocate(size); });
  return out;
}

int streampool_host_free(void* ptr) {
  return host_guarded([&] { host_instance().deallocate(ptr); });
}

int streampool_host_record_stream(void* ptr, void* stream) {
  return host_guarded([&] { host_instance().record_stream(ptr, stream); });
}

int streampool_host_empty_cache(void) {
  return host_guarded([&] { host_instance().empty_cache(); });
}

const char* streampool_host_stats_json(void) {
  thread_local std::string text;
  const int status = host_guarded([&] { text = host_instance().stats().to_json(); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

const char* streampool_host_snapshot_json(void) {
  thread_local std::string text;
  const int status = host_guarded([&] { text = host_instance().snapshot().to_json(); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

}  // extern "C"
