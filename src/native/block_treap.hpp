// block_treap.hpp — an intrusive treap of free blocks (hooks block::left/right, priority = a hash of
// the address), so inserting or removing a free block never allocates host memory. Ordered by
// `Less`: by address (inside one size bin) or by (size, address) (the large pool, docs/pytorch-compatibility.md §2.6 order).
#pragma once

#include <cstddef>
#include <cstdint>

#include "native/block.hpp"

namespace streampool::native {

struct by_address {
  static bool less(const block* a, const block* b) noexcept { return a->ptr < b->ptr; }
};
struct by_size_address {
  static bool less(const block* a, const block* b) noexcept {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

template <typename Order>
class block_treap {
 public:
  [[nodiscard]] bool empty() const noexcept { return root_ == nullptr; }

  void insert(block* node) noexcept {
    block** link = &root_;
    const std::uint64_t p = priority(node);
    while (*link != nullptr && priority(*link) >= p) {
      link = Order::less(node, *link) ? &(*link)->left : &(*link)->right;
    }
    split(*link, node, node->left, node->right);
    *link = node;
  }

  /// `node` must be in the tree.
  void erase(block* node) noexcept {
    block** link = &root_;
    while (*link != node) link = Order::less(node, *link) ? &(*link)->left : &(*link)->right;
    *link = merge(node->left, node->right);
    node->left = node->right = nullptr;
  }

  [[nodiscard]] block* leftmost() const noexcept {
    block* t = root_;
    if (t == nullptr) return nullptr;
    while (t->left != nullptr) t = t->left;
    return t;
  }
  [[nodiscard]] block* rightmost() const noexcept {
    block* t = root_;
    if (t == nullptr) return nullptr;
    while (t->right != nullptr) t = t->right;
    return t;
  }

  /// Smallest block of size >= `size`, lowest address among equals (by_size_address order only).
  [[nodiscard]] block* lower_bound_size(std::size_t size) const noexcept {
    block* best = nullptr;
    for (block* t = root_; t != nullptr;) {
      if (t->size >= size) {
        best = t;
        t = t->left;
      } else {
        t = t->right;
      }
    }
    return best;
  }

  /// The first block after `key` in the tree's order (`key` may be in the tree or not).
  [[nodiscard]] block* upper_bound(const block* key) const noexcept {
    block* best = nullptr;
    for (block* t = root_; t != nullptr;) {
      if (Order::less(key, t)) {
        best = t;
        t = t->left;
      } else {
        t = t->right;
      }
    }
    return best;
  }

  /// In order. `f` must not modify the tree.
  template <typename F>
  void for_each(F&& f) const {
    visit(root_, f);
  }
  /// The first block in order for which `pred` is true, or nullptr; stops there.
  template <typename P>
  [[nodiscard]] block* find_first(P&& pred) const {
    return first_of(root_, pred);
  }

 private:
  static std::uint64_t priority(const block* b) noexcept {
    return (static_cast<std::uint64_t>(b->ptr) >> 9) * 0x9E3779B97F4A7C15ull;
  }
  // Splits `t` into keys < key (l) and keys >= key (r).
  static void split(block* t, const block* key, block*& l, block*& r) noexcept {
    block** lp = &l;
    block** rp = &r;
    while (t != nullptr) {
      if (Order::less(t, key)) {
        *lp = t;
        lp = &t->right;
        t = t->right;
      } else {
        *rp = t;
        rp = &t->left;
        t = t->left;
      }
    }
    *lp = nullptr;
    *rp = nullptr;
  }
  // Every key of `a` is below every key of `b`.
  static block* merge(block* a, block* b) noexcept {
    block* root = nullptr;
    block** link = &root;
    while (a != nullptr && b != nullptr) {
      if (priority(a) > priority(b)) {
        *link = a;
        link = &a->right;
        a = a->right;
      } else {
        *link = b;
        link = &b->left;
        b = b->left;
      }
    }
    *link = a != nullptr ? a : b;
    return root;
  }
  template <typename P>
  static block* first_of(block* t, P& pred) {
    if (t == nullptr) return nullptr;
    if (block* found = first_of(t->left, pred)) return found;
    if (pred(t)) return t;
    return first_of(t->right, pred);
  }
  template <typename F>
  static void visit(block* t, F& f) {
    if (t == nullptr) return;
    visit(t->left, f);
    f(t);
    visit(t->right, f);
  }

  block* root_ = nullptr;
};

}  // namespace streampool::native
