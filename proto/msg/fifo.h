// A FIFO on a ring of slots that keeps its room: a steady stream of pushes
// and pops allocates nothing, where std::deque allocates and frees a block
// every few elements of a message's size. It grows by doubling and never
// shrinks; the port table drops empty ports, and their room with them.
//
// Not thread-safe: the port table's lock guards it.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace lt::proto {

template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  T& front() { return slots_[head_ & mask()]; }
  const T& front() const { return slots_[head_ & mask()]; }
  /// The i-th oldest element (i < size()).
  const T& operator[](size_t i) const { return slots_[(head_ + i) & mask()]; }

  void push_back(T&& v) { emplace_back() = std::move(v); }
  /// A new newest element, default-initialized in its slot (every slot past
  /// the newest is): the caller fills it there, with no temporary to move.
  T& emplace_back() {
    if (size() == slots_.size()) grow();
    return slots_[tail_++ & mask()];
  }
  /// Drops the oldest element (not empty); its slot lets go of what it held.
  /// Remade default-initialized, not assigned T{}: that value-initializes a
  /// temporary, zero-filling the whole of it (a message's 64 inline bytes
  /// included) with a `rep stos` that cost more than the rest of a pop.
  void pop_front() {
    T* s = &slots_[head_++ & mask()];
    std::destroy_at(s);
    ::new (static_cast<void*>(s)) T;
  }

  /// Removes the elements `pred` picks, keeping the others in order; how many.
  template <typename Pred>
  size_t erase_if(Pred pred) {
    size_t kept = head_;
    for (size_t i = head_; i != tail_; ++i) {
      T& x = slots_[i & mask()];
      if (pred(std::as_const(x))) continue;
      if (kept != i) slots_[kept & mask()] = std::move(x);
      ++kept;
    }
    const size_t n = tail_ - kept;
    for (size_t i = kept; i != tail_; ++i) slots_[i & mask()] = T{};
    tail_ = kept;
    return n;
  }

 private:
  size_t mask() const { return slots_.size() - 1; }  // the size is a power of two
  void grow() {
    const size_t n = size();
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < n; ++i) bigger[i] = std::move(slots_[(head_ + i) & mask()]);
    slots_.swap(bigger);
    head_ = 0;
    tail_ = n;
  }

  std::vector<T> slots_;
  size_t head_ = 0, tail_ = 0;  // count up; a slot is the count modulo the size
};

}  // namespace lt::proto
