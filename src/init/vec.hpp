// A minimal growable array for trivially copyable records, on malloc/realloc:
// the init stays free of exceptions and of libstdc++'s allocator machinery.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <type_traits>

namespace gpureap::init {

template <class T>
class Vec {
  static_assert(std::is_trivially_copyable_v<T>, "Vec holds plain records only");

 public:
  Vec() = default;
  ~Vec() { std::free(data_); }
  Vec(const Vec&) = delete;
  Vec& operator=(const Vec&) = delete;

  // False when memory ran out (the caller treats the record as not seen).
  bool push(const T& value) {
    if (size_ == cap_ && !grow()) return false;
    data_[size_++] = value;
    return true;
  }
  void clear() { size_ = 0; }
  // Keeps the elements for which keep(element) is true, in order.
  template <class Pred>
  void keep_if(Pred keep) {
    size_t out = 0;
    for (size_t i = 0; i < size_; ++i) {
      if (keep(data_[i])) data_[out++] = data_[i];
    }
    size_ = out;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  bool grow() {
    size_t cap = cap_ == 0 ? 64 : cap_ * 2;
    void* p = std::realloc(data_, cap * sizeof(T));
    if (p == nullptr) return false;
    data_ = static_cast<T*>(p);
    cap_ = cap;
    return true;
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = 0;
};

}  // namespace gpureap::init
