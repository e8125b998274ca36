// URLs of the endpoints the network layer dials (http, https, ws and wss), and decoding paths.
#pragma once

#include <string>
#include <string_view>

#include "loom/base/status.h"

namespace loom::net {

struct Url {
  std::string scheme;        // "http", "https", "ws" or "wss" (lower-cased)
  std::string host;          // lower-cased name or address; IPv6 without brackets ("::1")
  int port = 0;              // explicit, or 80 (http, ws) / 443 (https, wss)
  std::string target = "/";  // path?query as sent in the request line; "/" if empty

  bool tls() const { return scheme == "https" || scheme == "wss"; }
  bool websocket() const { return scheme == "ws" || scheme == "wss"; }
  // "host:port" as a Host header carries it ("[::1]:8080" for IPv6).
  std::string HostPort() const;
  std::string ToString() const;  // scheme://host:port/target
};

// Parses "scheme://host[:port][/path][?query][#fragment]".  User info ("user@") is refused, the
// fragment is dropped, and the target must not contain spaces or control characters.
StatusOr<Url> ParseUrl(std::string_view url);

// Decodes %XX escapes in a request path (a malformed escape is kept as it is); '+' is not special.
std::string PercentDecode(std::string_view text);

}  // namespace loom::net
