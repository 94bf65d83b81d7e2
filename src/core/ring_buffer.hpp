// ring_buffer.hpp — a FIFO on a power-of-two vector: push/pop never allocate once it has grown to
// the largest backlog seen (std::deque allocates and frees chunks as it moves). Used for the
// per-stream queues of outstanding events (core/stream_queues.hpp).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace streampool::core {

template <typename T>
class ring_buffer {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] T& front() noexcept { return items_[head_]; }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return items_[(head_ + i) & (items_.size() - 1)]; }

  /// Makes room for `count` items in total, so that push_back up to that size cannot throw.
  void reserve(std::size_t count) {
    while (items_.size() < count) grow();
  }
  void push_back(T value) {
    if (size_ == items_.size()) grow();
    items_[(head_ + size_) & (items_.size() - 1)] = std::move(value);
    ++size_;
  }
  void pop_front() noexcept {
    head_ = (head_ + 1) & (items_.size() - 1);
    --size_;
  }

 private:
  void grow() {
    std::vector<T> bigger(items_.empty() ? 8 : items_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move(items_[(head_ + i) & (items_.size() - 1)]);
    items_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> items_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace streampool::core
