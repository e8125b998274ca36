// Small UTF-8 helpers shared by the tokenizers and the Jinja interpreter.  Validity is the strict
// kind (no overlong forms, no surrogates, nothing above U+10FFFF), the same PCRE2 and ICU demand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::text {

// The length (1-4) of the valid UTF-8 character starting at text[pos], or 0 when the bytes there
// are not one (a stray continuation byte, an overlong form, a truncated sequence...).
inline size_t Utf8CharLength(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const size_t n = text.size();
  if (pos >= n) return 0;
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + len > n) return 0;
  const uint8_t b1 = byte(pos + 1);
  if (b1 < lo || b1 > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((byte(pos + k) & 0xC0) != 0x80) return 0;
  }
  return len;
}

// The length of the longest valid UTF-8 prefix of `text`.
inline size_t ValidUtf8Prefix(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t len = Utf8CharLength(text, pos);
    if (len == 0) break;
    pos += len;
  }
  return pos;
}

inline bool IsValidUtf8(std::string_view text) { return ValidUtf8Prefix(text) == text.size(); }

// Decodes the valid character of `len` bytes at text[pos] (as measured by Utf8CharLength).
inline char32_t DecodeUtf8Char(std::string_view text, size_t pos, size_t len) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  switch (len) {
    case 1:
      return byte(pos);
    case 2:
      return (char32_t{byte(pos)} & 0x1F) << 6 | (byte(pos + 1) & 0x3F);
    case 3:
      return (char32_t{byte(pos)} & 0x0F) << 12 | (char32_t{byte(pos + 1)} & 0x3F) << 6 |
             (byte(pos + 2) & 0x3F);
    default:
      return (char32_t{byte(pos)} & 0x07) << 18 | (char32_t{byte(pos + 1)} & 0x3F) << 12 |
             (char32_t{byte(pos + 2)} & 0x3F) << 6 | (byte(pos + 3) & 0x3F);
  }
}

// Appends code point `cp` (<= U+10FFFF, not a surrogate) as UTF-8.
inline void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace loom::text
