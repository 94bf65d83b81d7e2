// c_api_host.cpp — the extern "C" entry points of the pinned host allocator (c_api.h, "Pinned
// host memory") over one process-wide host_allocator, created on first use from the environment
// (the pinned_* keys of STREAMPOOL_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF) on the real driver, or by
// streampool_host_init(). Like c_api.cpp, every function catches everything and reports through
// streampool_last_status() / streampool_last_error().
#include <mutex>
#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"

namespace streampool::c_api_impl {
namespace {

struct host_api_state {
  std::mutex mutex;
  std::unique_ptr<host_allocator> alloc;
};

host_api_state& host_state() {
  static auto* s = new host_api_state;  // never destroyed: frees may come during static teardown
  return *s;
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

}  // namespace streampool::c_api_impl

using namespace streampool;
using streampool::c_api_impl::c_api_guarded;
using streampool::c_api_impl::host_instance;

extern "C" {

int streampool_host_init(const char* config) {
  return c_api_guarded([&] {
    auto& s = c_api_impl::host_state();
    const std::lock_guard lock(s.mutex);
    if (s.alloc) {
      throw c_api_impl::state_error("streampool_host_init: the host allocator already exists (initialise before "
                                "the first streampool_host_alloc)");
    }
    s.alloc = config != nullptr ? make_host_allocator(parse_config(config), make_cuda_driver()) : make_host_allocator();
  });
}

void* streampool_host_alloc(size_t size) {
  void* out = nullptr;
  (void)c_api_guarded([&] { out = host_instance().allocate(size); });
  return out;
}

int streampool_host_free(void* ptr) {
  return c_api_guarded([&] { host_instance().deallocate(ptr); });
}

int streampool_host_record_stream(void* ptr, void* stream) {
  return c_api_guarded([&] { host_instance().record_stream(ptr, stream); });
}

int streampool_host_empty_cache(void) {
  return c_api_guarded([&] { host_instance().empty_cache(); });
}

const char* streampool_host_stats_json(void) {
  thread_local std::string text;
  const int status = c_api_guarded([&] { text = host_instance().stats().to_json(); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

const char* streampool_host_snapshot_json(void) {
  thread_local std::string text;
  const int status = c_api_guarded([&] { text = host_instance().snapshot().to_json(); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

}  // extern "C"
