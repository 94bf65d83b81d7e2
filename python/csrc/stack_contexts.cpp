// stack_contexts.cpp — recording and attaching the stack contexts of _record_memory_history
// (stack_contexts.hpp, Note [Stack contexts]).
#include "stack_contexts.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace streampool::torch_ext {

void stack_contexts::configure(bool enabled, c10a::CreateContextFn recorder, c10a::RecordContext when,
                               std::size_t max_entries, bool clear) {
  const bool on = enabled && recorder != nullptr && when != c10a::RecordContext::NEVER;
  std::lock_guard<std::mutex> lock(mutex_);
  recorder_.store(on ? recorder : nullptr);
  when_.store(on ? static_cast<int>(when) : 0);
  max_entries_ = max_entries;
  if (clear || !enabled) {
    live_.clear();
    events_.clear();
    windows_.clear();
  }
  while (events_.size() > max_entries_) events_.pop_front();
  while (windows_.size() > max_entries_) windows_.pop_front();
}

std::uint64_t stack_contexts::now_us() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// Note [Contexts of a call]
// PyTorch gives a segment_free entry the stack of the call that freed the segment (empty_cache,
// or the allocation whose retry released cached memory), when recording with context="all".
// streampool traces segment frees inside the library, where no PyTorch context exists, so the
// extension notes the window of trace-clock time of each such call with its context, and at
// _snapshot() gives the context to the segment_free / segment_unmap entries of the same device
// traced inside a window. Two threads releasing at the same moment could swap contexts; the
// entries themselves are streampool's and exact.
void stack_contexts::after_release(std::uint64_t start_us, context_ptr context) {
  if (context == nullptr) return;
  const std::uint64_t end_us = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  if (max_entries_ == 0) return;
  if (windows_.size() == max_entries_) windows_.pop_front();
  windows_.push_back({start_us, end_us, std::move(context)});
}

// Note [User metadata]
// torch.cuda.memory._set_memory_metadata(text) makes PyTorch's allocator store `text` in every
// trace entry it records from then on ("user_metadata" in _snapshot()). streampool's entries are
// recorded in the library, so the extension keeps the times at which the metadata changed and
// gives each entry, at _snapshot(), the text in effect when it was recorded: the last change made
// strictly before the entry's time (a change is a call between allocator calls, so an entry in the
// same microsecond as a change was recorded by the call before it).
void stack_contexts::record_change(std::vector<metadata_change>& log, std::string text) {
  log.push_back({now_us(), std::move(text)});
  // A bounded log: the oldest changes go first (their entries have left the trace ring, or are the
  // oldest still in it).
  constexpr std::size_t max_changes = 1u << 16;
  if (log.size() > max_changes) log.erase(log.begin(), log.begin() + max_changes / 2);
}

const std::string* stack_contexts::text_at(const std::vector<metadata_change>& log, std::uint64_t t) {
  // The last change strictly before t (Note [User metadata]).
  const auto after = std::lower_bound(log.begin(), log.end(), t,
                                      [](const metadata_change& c, std::uint64_t at) { return c.since_us < at; });
  return after == log.begin() ? nullptr : &std::prev(after)->text;
}

void stack_contexts::set_metadata(std::string metadata) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (metadata_.empty() && metadata.empty()) return;
  record_change(metadata_, std::move(metadata));
}

void stack_contexts::push_compile_context(std::string region) {
  std::lock_guard<std::mutex> lock(mutex_);
  compile_stack_.push_back(std::move(region));
  record_change(compile_, compile_stack_.back());
}

void stack_contexts::pop_compile_context() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!compile_stack_.empty()) compile_stack_.pop_back();
  record_change(compile_, compile_stack_.empty() ? std::string("N/A") : compile_stack_.back());
}

std::string stack_contexts::metadata() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return metadata_.empty() ? std::string() : metadata_.back().text;
}

context_ptr stack_contexts::gather(c10a::RecordContext level) const {
  const c10a::CreateContextFn recorder = recorder_.load(std::memory_order_acquire);
  if (recorder == nullptr || !keeps(level)) return nullptr;
  return recorder();
}

void stack_contexts::push(event e) {
  if (max_entries_ == 0) return;
  if (events_.size() == max_entries_) events_.pop_front();
  events_.push_back(std::move(e));
}

void stack_contexts::after_alloc(void* ptr, context_ptr context) {
  if (context == nullptr || ptr == nullptr) return;
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  if (keeps(c10a::RecordContext::ALLOC)) push({action::ALLOC, address, context});
  live_[address] = std::move(context);
}

void stack_contexts::before_free(void* ptr) {
  if (recorder_.load(std::memory_order_relaxed) == nullptr) return;
  context_ptr context = gather(c10a::RecordContext::ALL);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  live_.erase(address);
  if (context != nullptr) push({action::FREE_REQUESTED, address, std::move(context)});
}

void stack_contexts::annotate_windows(c10a::SnapshotInfo& snap) const {
  if (windows_.empty()) return;
  for (auto& trace : snap.device_traces) {
    for (auto& entry : trace) {
      if (entry.action_ != action::SEGMENT_FREE && entry.action_ != action::SEGMENT_UNMAP) continue;
      if (entry.context_ != nullptr) continue;
      const auto t = static_cast<std::uint64_t>(entry.time_.t_);
      for (const release_window& w : windows_) {
        if (t >= w.start_us && t <= w.end_us) {
          entry.context_ = w.context;
          break;
        }
      }
    }
  }
}

void stack_contexts::annotate_metadata(c10a::SnapshotInfo& snap) const {
  for (auto& trace : snap.device_traces) {
    for (auto& entry : trace) {
      const auto t = static_cast<std::uint64_t>(entry.time_.t_);
      if (const std::string* text = text_at(metadata_, t)) entry.user_metadata_ = *text;
      const std::string* region = text_at(compile_, t);
      entry.compile_context_ = region != nullptr ? *region : std::string("N/A");
    }
  }
}

void stack_contexts::annotate(c10a::SnapshotInfo& snap) const {
  std::lock_guard<std::mutex> lock(mutex_);
  annotate_windows(snap);
  annotate_metadata(snap);
  if (live_.empty() && events_.empty()) return;
  // The trace: per (action, address), the contexts oldest first; entries take them newest first.
  std::map<std::pair<int, std::uintptr_t>, std::vector<const context_ptr*>> logged;
  for (const event& e : events_) logged[{static_cast<int>(e.what), e.address}].push_back(&e.context);
  for (auto& trace : snap.device_traces) {
    for (auto entry = trace.rbegin(); entry != trace.rend(); ++entry) {
      if (entry->action_ != action::ALLOC && entry->action_ != action::FREE_REQUESTED) continue;
      const auto found = logged.find({static_cast<int>(entry->action_), entry->addr_});
      if (found == logged.end() || found->second.empty()) continue;
      entry->context_ = *found->second.back();
      found->second.pop_back();
    }
  }
  // The blocks: tiled from their segment's address (Note [Blocks tile the segment]).
  for (auto& segment : snap.segments) {
    std::uintptr_t address = segment.address;
    for (auto& block : segment.blocks) {
      if (block.allocated) {
        const auto found = live_.find(address);
        if (found != live_.end()) block.context_when_allocated = found->second;
      }
      address += block.size;
    }
  }
}

}  // namespace streampool::torch_ext
