// Bounds-checked little-endian reading of untrusted bytes (files, sockets).  Every read checks the
// remaining length in ordinary code; a short buffer is a DataLoss error, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "loom/base/status.h"

namespace loom::base {

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  int64_t offset() const { return offset_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  int64_t remaining() const { return size() - offset_; }

  // Reads a trivially copyable value (little-endian hosts only; x86-64 and arm64).
  template <class T>
  Status Read(T* out) {
    static_assert(std::is_trivially_copyable_v<T>);
    LOOM_RETURN_IF_ERROR(Need(sizeof(T)));
    std::memcpy(out, bytes_.data() + offset_, sizeof(T));
    offset_ += static_cast<int64_t>(sizeof(T));
    return OkStatus();
  }

  // Returns a view of the next `n` bytes and advances past them.
  Status ReadSpan(int64_t n, std::span<const std::byte>* out) {
    LOOM_RETURN_IF_ERROR(Need(n));
    *out = bytes_.subspan(static_cast<size_t>(offset_), static_cast<size_t>(n));
    offset_ += n;
    return OkStatus();
  }

  // Reads `n` bytes into a string.
  Status ReadString(int64_t n, std::string* out) {
    std::span<const std::byte> s;
    LOOM_RETURN_IF_ERROR(ReadSpan(n, &s));
    out->assign(reinterpret_cast<const char*>(s.data()), s.size());
    return OkStatus();
  }

  Status Skip(int64_t n) {
    LOOM_RETURN_IF_ERROR(Need(n));
    offset_ += n;
    return OkStatus();
  }

  Status Seek(int64_t offset) {
    if (offset < 0 || offset > size()) {
      return DataLossError("offset ", offset, " is outside the ", size(), "-byte input");
    }
    offset_ = offset;
    return OkStatus();
  }

 private:
  Status Need(int64_t n) const {
    if (n < 0 || n > remaining()) {
      return DataLossError("truncated: need ", n, " bytes at offset ", offset_, " but only ",
                           remaining(), " remain");
    }
    return OkStatus();
  }

  std::span<const std::byte> bytes_;
  int64_t offset_ = 0;
};

}  // namespace loom::base
