// page_toucher.cpp — the page-touching thread pool of the cudaHostRegister path.
//
// Note [Touching pages before registering]
// Registering memory page-locks it, and the kernel must first fault every page in; done by
// cudaHostRegister itself that happens under the driver's global lock, on one thread. Like
// PyTorch, the register path first writes one byte of every 4 KiB page, split into
// pinned_num_register_threads equal parts (the last takes the remainder) run in parallel, so the
// faults are taken outside the driver and on several cores; small requests (fewer pages than
// threads x 1) are touched by the calling thread alone. The workers are started on the first
// large touch and live as long as the allocator; part 0 runs on the calling thread.
#include "host/page_toucher.hpp"

#include <cstdint>
#include <cstring>

namespace streampool::host {
namespace {

/// Touches part `part` of `parts` of [base, base + bytes).
void touch_part(char* base, std::size_t bytes, std::size_t part, std::size_t parts) {
  const std::size_t begin = bytes / parts * part;
  const std::size_t end = part + 1 == parts ? bytes : bytes / parts * (part + 1);
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  // First page boundary at or after base + begin.
  std::size_t offset = (addr + begin + touch_page_size - 1) / touch_page_size * touch_page_size - addr;
  if (begin == 0) offset = 0;  // the first byte of the range is touched too (its page may start before it)
  for (; offset < end; offset += touch_page_size) {
    std::memset(base + offset, 0, 1);
  }
}

}  // namespace

page_toucher::~page_toucher() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  job_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void page_toucher::start_workers() {
  workers_.reserve(threads_ - 1);
  for (std::size_t w = 1; w < threads_; ++w) workers_.emplace_back([this, w] { work(w); });
}

void page_toucher::touch(void* ptr, std::size_t bytes) {
  if (bytes == 0) return;
  char* base = static_cast<char*>(ptr);
  if (threads_ == 1 || bytes < threads_ * touch_page_size) {
    touch_part(base, bytes, 0, 1);
    return;
  }
  const std::lock_guard turn(touch_mutex_);
  {
    std::unique_lock lock(mutex_);
    if (workers_.empty()) start_workers();
    job_ptr_ = base;
    job_bytes_ = bytes;
    remaining_ = threads_ - 1;
    ++generation_;
  }
  job_ready_.notify_all();
  touch_part(base, bytes, 0, threads_);
  std::unique_lock lock(mutex_);
  job_done_.wait(lock, [&] { return remaining_ == 0; });
}

void page_toucher::work(std::size_t worker) {
  std::size_t seen = 0;
  for (;;) {
    char* ptr = nullptr;
    std::size_t bytes = 0;
    {
      std::unique_lock lock(mutex_);
      job_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      ptr = job_ptr_;
      bytes = job_bytes_;
    }
    touch_part(ptr, bytes, worker, threads_);
    bool last = false;
    {
      const std::lock_guard lock(mutex_);
      last = --remaining_ == 0;
    }
    if (last) job_done_.notify_one();
  }
}

}  // namespace streampool::host
