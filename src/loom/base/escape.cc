#include "loom/base/escape.h"

#include <cstdint>
#include <cstdio>

namespace loom::base {
namespace {

// Length of the valid UTF-8 sequence at s[i] and its code point, or 0 when it is not one.
size_t Utf8Sequence(std::string_view s, size_t i, uint32_t* cp) {
  const uint8_t b0 = static_cast<uint8_t>(s[i]);
  size_t len = 0;
  uint32_t lower = 0;
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    *cp = b0 & 0x1F;
    lower = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    *cp = b0 & 0x0F;
    lower = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    *cp = b0 & 0x07;
    lower = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values beyond U+10FFFF are not UTF-8.
  if (*cp < lower || (*cp >= 0xD800 && *cp <= 0xDFFF) || *cp > 0x10FFFF) return 0;
  return len;
}

bool IsBidiControl(uint32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string EscapeForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    uint32_t cp = 0;
    const size_t len = Utf8Sequence(text, i, &cp);
    if (len == 0) {
      std::snprintf(buf, sizeof(buf), "\\x%02X", static_cast<uint8_t>(c));
      out += buf;
      ++i;
      continue;
    }
    if (len == 1) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\r') {
        out += "\\r";
      } else if (cp < 0x20 || cp == 0x7F) {
        std::snprintf(buf, sizeof(buf), "\\x%02X", cp);
        out += buf;
      } else {
        out.push_back(c);
      }
    } else if ((cp >= 0x80 && cp <= 0x9F) || IsBidiControl(cp)) {
      std::snprintf(buf, sizeof(buf), "\\u{%04X}", cp);
      out += buf;
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace loom::base
