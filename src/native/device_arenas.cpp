// device_arenas.cpp — creating, looking up and recycling the arenas of one device (device_arenas.hpp),
// the shared arena of cross_stream_reuse:True, and the loops over every arena: locking them, and
// polling or waiting for their events. Device mutex held throughout.
#include "native/device_arenas.hpp"

#include <algorithm>

namespace streampool::native {

stream_arena& device_arenas::default_arena(stream_t stream) {
  if (stream_arena* a = table_.find(stream)) return *a;
  if (context_->cross_stream) {
    if (stream_arena* shared = shared_arena(stream)) {
      table_.insert(stream, shared);
      return *shared;
    }
  }
  stream_arena& a = create(stream, nullptr, mempool_id{});
  table_.insert(stream, &a);
  return a;
}

stream_arena& device_arenas::create(stream_t stream, private_pool* pool, mempool_id pool_id) {
  if (!spare_arenas_.empty()) {
    stream_arena* a = spare_arenas_.back();
    spare_arenas_.pop_back();
    std::lock_guard lock(a->mutex());
    a->reassign(stream, pool, pool_id);
    return *a;
  }
  arenas_.reserve(arenas_.size() + 1);
  arenas_.push_back(std::make_unique<stream_arena>(*context_, stream, pool, pool_id));
  return *arenas_.back();
}

std::vector<stream_arena*> device_arenas::default_pool() const {
  std::vector<stream_arena*> out;
  for (const auto& a : arenas_) {
    if (a->pool() == nullptr && std::find(spare_arenas_.begin(), spare_arenas_.end(), a.get()) == spare_arenas_.end()) {
      out.push_back(a.get());
    }
  }
  return out;
}

void device_arenas::recycle(const std::vector<stream_arena*>& arenas) {
  spare_arenas_.reserve(spare_arenas_.size() + arenas.size());
  for (stream_arena* a : arenas) {
    std::lock_guard lock(a->mutex());
    a->reassign(nullptr, nullptr, mempool_id{});
    spare_arenas_.push_back(a);
  }
}

stream_arena* device_arenas::shared_arena(stream_t stream) {
  if (shared_ == nullptr) {
    order_ = std::make_unique<stream_order>(*context_);
    shared_ = &create(stream, nullptr, mempool_id{});
    std::lock_guard lock(shared_->mutex());
    shared_->share(order_.get());
  }
  std::lock_guard lock(shared_->mutex());  // hot-path readers look streams up under it
  return order_->add(stream) ? shared_ : nullptr;
}

std::vector<std::unique_lock<arena_mutex>> device_arenas::lock_all(const stream_arena* held) {
  std::vector<std::unique_lock<arena_mutex>> locks;
  locks.reserve(arenas_.size());
  for (auto& a : arenas_) {
    if (a.get() != held) locks.emplace_back(a->mutex());
  }
  return locks;
}

void device_arenas::process_events(const stream_arena* held) {
  if (context_->pending_events.load(std::memory_order_relaxed) == 0) return;
  for (auto& a : arenas_) {
    std::unique_lock<arena_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->has_pending_events()) a->process_events();
  }
}

void device_arenas::synchronize_events(const stream_arena* held) {
  if (context_->pending_events.load(std::memory_order_relaxed) == 0) return;
  for (auto& a : arenas_) {
    std::unique_lock<arena_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->has_pending_events()) a->synchronize_events();
  }
}

}  // namespace streampool::native
