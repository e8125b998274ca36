// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), used to authenticate group members (a
// challenge-response over the shared group secret) and to derive names from group ids.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace loom::comm {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void Update(std::span<const uint8_t> bytes);
  void Update(std::string_view text) {
    Update({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  }
  Digest Finish();  // the object must not be used afterwards

 private:
  void Block(const uint8_t* block);  // one 64-byte block

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  uint64_t length_ = 0;  // bytes hashed so far
  size_t buffered_ = 0;
};

Digest Sha256Of(std::string_view text);

// HMAC-SHA-256 of the concatenation of `parts` under `key`.
Digest HmacSha256(std::string_view key, std::span<const std::span<const uint8_t>> parts);

// Constant-time comparison (authentication tags).
bool DigestEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);

std::string DigestHex(std::span<const uint8_t> digest);

}  // namespace loom::comm
