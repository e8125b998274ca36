// An owning, 64-byte-aligned, fixed-size array of trivially constructible values (scratch buffers,
// KV caches, copied weights).  Allocated once; never resized in hot loops.
#pragma once

#include <sys/mman.h>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace loom::base {

template <class T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  // Zero-initialized; throws std::bad_alloc if the memory is not available.
  explicit AlignedBuffer(int64_t count) : AlignedBuffer(count, kAlignment) {}

  // The same, aligned to 2 MiB and (on Linux) advised to be backed by transparent huge pages: for
  // large arrays streamed over and over (weights), where 4 KiB pages cost a TLB miss per page.
  static AlignedBuffer WithHugePages(int64_t count) { return AlignedBuffer(count, kHugePage); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  T& operator[](int64_t i) { return data_[i]; }
  const T& operator[](int64_t i) const { return data_[i]; }
  std::span<T> span() { return {data_, static_cast<size_t>(size_)}; }
  std::span<const T> span() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;

  AlignedBuffer(int64_t count, size_t alignment) : size_(count) {
    if (count <= 0) {
      size_ = 0;
      return;
    }
    const size_t bytes =
        (static_cast<size_t>(count) * sizeof(T) + alignment - 1) / alignment * alignment;
    data_ = static_cast<T*>(std::aligned_alloc(alignment, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (alignment == kHugePage) ::madvise(data_, bytes, MADV_HUGEPAGE);  // advice: may be ignored
#endif
    std::memset(static_cast<void*>(data_), 0, bytes);
  }

  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace loom::base
