#include "loom/serve/auth.h"

#include <cstdint>

namespace loom::serve {

bool ConstantTimeEquals(std::string_view a, std::string_view secret) {
  // Every byte of the secret is compared with the byte of `a` at the same place (or with a
  // filler when `a` is shorter), and a length mismatch is folded into the same accumulator.
  volatile uint8_t diff = a.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const uint8_t x = i < a.size() ? static_cast<uint8_t>(a[i]) : 0;
    diff = diff | static_cast<uint8_t>(x ^ static_cast<uint8_t>(secret[i]));
  }
  return diff == 0;
}

std::string_view BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return {};
  }
  std::string_view token = authorization.substr(kScheme.size());
  if (token.front() != ' ') return {};
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

bool BearerMatches(std::string_view authorization, std::string_view key) {
  if (key.empty()) return true;
  const std::string_view token = BearerToken(authorization);
  return !token.empty() && ConstantTimeEquals(token, key);
}

}  // namespace loom::serve
