#include "loom/net/url.h"

#include <cctype>

namespace loom::net {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsHostChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

bool IsIpv6Char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

}  // namespace

std::string Url::HostPort() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Url::ToString() const { return scheme + "://" + HostPort() + target; }

StatusOr<Url> ParseUrl(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgumentError("url '", text, "': ", why);
  };
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos) return bad("missing scheme (e.g. https://)");
  Url url;
  url.scheme = Lower(text.substr(0, sep));
  int default_port = 0;
  if (url.scheme == "http" || url.scheme == "ws") {
    default_port = 80;
  } else if (url.scheme == "https" || url.scheme == "wss") {
    default_port = 443;
  } else {
    return bad("unsupported scheme '" + url.scheme + "' (http, https, ws or wss)");
  }
  std::string_view rest = text.substr(sep + 3);
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  const size_t target_at = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, target_at);
  std::string_view target =
      target_at == std::string_view::npos ? std::string_view() : rest.substr(target_at);
  if (authority.find('@') != std::string_view::npos) return bad("user info is not supported");
  if (authority.empty()) return bad("missing host");

  std::string_view port_text;
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    const std::string_view v6 = authority.substr(1, close - 1);
    if (v6.empty()) return bad("empty IPv6 address");
    for (char c : v6) {
      if (!IsIpv6Char(c)) return bad("bad character in IPv6 address");
    }
    url.host = Lower(v6);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("unexpected text after IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = authority.find(':');
    const std::string_view host = authority.substr(0, colon);
    if (host.empty()) return bad("missing host");
    for (char c : host) {
      if (!IsHostChar(c)) return bad("bad character in host");
    }
    url.host = Lower(host);
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
    }
  }
  url.port = default_port;
  if (!port_text.empty()) {
    if (port_text.size() > 5) return bad("port out of range");
    int port = 0;
    for (char c : port_text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return bad("port is not a number");
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) return bad("port out of range");
    url.port = port;
  }
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return bad("space or control character in path");
    }
  }
  url.target.clear();
  if (target.empty() || target.front() == '?') url.target.push_back('/');
  url.target.append(target.data(), target.size());
  return url;
}

std::string PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace loom::net
