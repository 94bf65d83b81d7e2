// stack_contexts.hpp — the stack traces of _record_memory_history for streampool's extension
// allocator (Note [Stack contexts]): gathered with PyTorch's context recorder around each
// allocation and free, kept beside streampool's own trace, and attached to the trace entries and
// allocated blocks of _snapshot(), where PyTorch turns them into "frames".
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace streampool::torch_ext {

namespace c10a = c10::cuda::CUDACachingAllocator;
/// What PyTorch's context recorder returns (a shared pointer to its gathered stack).
using context_ptr = std::invoke_result_t<c10a::CreateContextFn>;

// Note [Stack contexts]
// PyTorch's allocator asks the recorder that _record_memory_history installs for a context (the
// Python and C++ stack, gathered but not yet symbolised) at each allocation and, with
// context="all", at each free, and keeps it in the trace entry and in the allocated block; its
// snapshot pickler turns contexts into "frames". streampool's trace lives in the library, under
// its locks, and has no room for PyTorch objects, so the extension keeps them itself: the context
// of every allocation still live (for the blocks) and of the last `max_entries` allocations and
// frees (for the trace), by address. At _snapshot() the trace entries get their contexts by
// address, newest first: an address is handed out again only after it was freed, so the n-th
// newest allocation at an address is the n-th newest alloc entry there, in both logs, whichever
// threads made them. Gathering happens before streampool is called (no lock held), as PyTorch
// does; with recording off each call pays one atomic load.
class stack_contexts {
 public:
  /// recordHistory: gathering is on while `enabled` and `recorder` is set and `when` is not NEVER
  /// (STATE: blocks only; ALLOC: allocations in the trace too; ALL: frees as well). The logs are
  /// cleared when `clear` or when recording stops, not when it goes on without stacks
  /// (context=None keeps what was gathered before, as PyTorch's trace keeps it).
  void configure(bool enabled, c10a::CreateContextFn recorder, c10a::RecordContext when, std::size_t max_entries,
                 bool clear);
  /// The context of an allocation about to be made; null when not gathering.
  [[nodiscard]] context_ptr before_alloc() const { return gather(c10a::RecordContext::STATE); }
  /// The allocation at `ptr` was made; `context` is what before_alloc gave.
  void after_alloc(void* ptr, context_ptr context);
  /// `ptr` is about to be freed.
  void before_free(void* ptr);
  /// The context of a call that may free segments (empty_cache); null unless frees are gathered.
  [[nodiscard]] context_ptr before_release() const { return gather(c10a::RecordContext::ALL); }
  /// The segment frees and unmaps that streampool traced between `start_us` and now (its trace
  /// clock) were made by the call whose context before_release gave (Note [Contexts of a call]).
  void after_release(std::uint64_t start_us, context_ptr context);
  /// _set_memory_metadata: trace entries from now on carry `metadata` (Note [User metadata]).
  void set_metadata(std::string metadata);
  [[nodiscard]] std::string metadata() const;
  /// torch.compile's region markers (pushCompileContext / popCompileContext): trace entries carry
  /// the innermost region open when they were recorded, "N/A" outside any (as PyTorch's).
  void push_compile_context(std::string region);
  void pop_compile_context();
  /// Sets the contexts of `snap`'s alloc / free_requested trace entries and allocated blocks, the
  /// contexts of segment frees made by a call (after_release) and every entry's user metadata.
  void annotate(c10a::SnapshotInfo& snap) const;
  /// The trace's clock (microseconds since the epoch; streampool's trace_entry::time_us).
  [[nodiscard]] static std::uint64_t now_us() noexcept;

 private:
  using action = c10::CachingDeviceAllocator::TraceEntry::Action;
  struct event {
    action what;
    std::uintptr_t address;
    context_ptr context;
  };
  /// A call that released segments: [start_us, end_us] of the trace clock, and its context.
  struct release_window {
    std::uint64_t start_us;
    std::uint64_t end_us;
    context_ptr context;
  };
  /// A _set_memory_metadata call (or a compile region opened or closed): entries after
  /// `since_us` carry `text`.
  struct metadata_change {
    std::uint64_t since_us;
    std::string text;
  };
  /// Appends a change to `log` (bounded), under mutex_.
  static void record_change(std::vector<metadata_change>& log, std::string text);
  /// The text of `log` in effect at trace time `t` (Note [User metadata]); nullptr before any.
  [[nodiscard]] static const std::string* text_at(const std::vector<metadata_change>& log, std::uint64_t t);
  void annotate_windows(c10a::SnapshotInfo& snap) const;
  void annotate_metadata(c10a::SnapshotInfo& snap) const;
  [[nodiscard]] context_ptr gather(c10a::RecordContext level) const;
  [[nodiscard]] bool keeps(c10a::RecordContext level) const noexcept {
    return when_.load(std::memory_order_relaxed) >= static_cast<int>(level);
  }
  void push(event e);

  std::atomic<c10a::CreateContextFn> recorder_{nullptr};
  std::atomic<int> when_{0};
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, context_ptr> live_;
  std::deque<event> events_;
  std::deque<release_window> windows_;
  std::vector<metadata_change> metadata_;  ///< oldest first; the last is in effect
  std::vector<metadata_change> compile_;   ///< the innermost compile region over time
  std::vector<std::string> compile_stack_;
  std::size_t max_entries_ = 0;
};

}  // namespace streampool::torch_ext
