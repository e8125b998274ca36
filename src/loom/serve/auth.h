// API keys: `Authorization: Bearer KEY`, compared in constant time (the time taken depends only on
// the configured key's length, never on how much of a guess matches).
#pragma once

#include <string_view>

namespace loom::serve {

// Whether `a` equals `secret`, taking time that depends only on secret.size().
bool ConstantTimeEquals(std::string_view a, std::string_view secret);

// The token of an Authorization header value "Bearer TOKEN" ("Bearer" in any case, one or more
// spaces, trailing spaces dropped); "" when it is not a bearer token.
std::string_view BearerToken(std::string_view authorization);

// Whether an Authorization header value carries `key` as a bearer token ("Bearer" in any case,
// one or more spaces).  An empty `key` means no key is configured: everything is allowed.
bool BearerMatches(std::string_view authorization, std::string_view key);

}  // namespace loom::serve
