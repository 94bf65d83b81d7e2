// stack_contexts.cpp — recording and attaching the stack contexts of _record_memory_history
// (stack_contexts.hpp, Note [Stack contexts]).
#include "stack_contexts.hpp"

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
  if (clear || !on) {
    live_.clear();
    events_.clear();
  }
  while (events_.size() > max_entries_) events_.pop_front();
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

void stack_contexts::annotate(c10a::SnapshotInfo& snap) const {
  std::lock_guard<std::mutex> lock(mutex_);
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
