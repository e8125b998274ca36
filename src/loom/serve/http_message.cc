#include "loom/serve/http_message.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace loom::serve {
namespace {

bool IsTokenChar(char c) {  // RFC 9110 tchar
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

HeadParse Error(int status, std::string message) {
  HeadParse r;
  r.kind = HeadParse::kError;
  r.status = status;
  r.message = std::move(message);
  return r;
}

// Finds the end of the head: the first empty line.  Returns the offset just after it, or npos.
size_t FindHeadEnd(std::string_view buffer) {
  size_t i = 0;
  while (true) {
    const size_t nl = buffer.find('\n', i);
    if (nl == std::string_view::npos) return std::string_view::npos;
    // The line [i, nl) is empty (or just "\r"): the head ends here.  A head starts with a
    // request line, so an empty line at offset 0 is a stray CRLF between requests, also allowed.
    std::string_view line = buffer.substr(i, nl - i);
    if (line.empty() || line == "\r") {
      if (i != 0) return nl + 1;
    }
    i = nl + 1;
  }
}

// Splits the head into lines without their line ends.
template <class F>
void ForEachLine(std::string_view head, const F& f) {
  size_t i = 0;
  while (i < head.size()) {
    size_t nl = head.find('\n', i);
    if (nl == std::string_view::npos) nl = head.size();
    std::string_view line = head.substr(i, nl - i);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!f(line)) return;
    i = nl + 1;
  }
}

bool HasToken(std::string_view list, std::string_view token) {
  size_t i = 0;
  while (i <= list.size()) {
    size_t comma = list.find(',', i);
    if (comma == std::string_view::npos) comma = list.size();
    if (EqualsIgnoreCase(Trim(list.substr(i, comma - i)), token)) return true;
    i = comma + 1;
  }
  return false;
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view lower_name) const {
  for (const HttpHeader& h : headers) {
    if (h.name == lower_name) return h.value;
  }
  return {};
}

HeadParse ParseRequestHead(std::string_view buffer, const HttpLimits& limits, HttpRequest* out) {
  // Tolerate empty lines before a request (RFC 9112 2.2).
  size_t skip = 0;
  while (skip < buffer.size() && (buffer[skip] == '\r' || buffer[skip] == '\n')) ++skip;
  const std::string_view rest = buffer.substr(skip);
  const size_t end = FindHeadEnd(rest);
  if (end == std::string_view::npos) {
    if (static_cast<int64_t>(rest.size()) > limits.max_head_bytes) {
      return Error(431,
                   "request head larger than " + std::to_string(limits.max_head_bytes) + " bytes");
    }
    return {};
  }
  if (static_cast<int64_t>(end) > limits.max_head_bytes) {
    return Error(431, "request head of " + std::to_string(end) + " bytes exceeds the limit of " +
                          std::to_string(limits.max_head_bytes));
  }
  *out = HttpRequest{};
  const std::string_view head = rest.substr(0, end);
  HeadParse error;
  bool first = true;
  bool have_length = false;
  int64_t n_headers = 0;
  ForEachLine(head, [&](std::string_view line) {
    if (first) {
      first = false;
      // METHOD SP target SP HTTP/1.x
      const size_t sp1 = line.find(' ');
      const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
      if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
        error = Error(400, "malformed request line");
        return false;
      }
      const std::string_view method = line.substr(0, sp1);
      const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      const std::string_view version = line.substr(sp2 + 1);
      if (method.empty() || method.size() > 32 ||
          !std::all_of(method.begin(), method.end(), IsTokenChar)) {
        error = Error(400, "malformed request method");
        return false;
      }
      if (target.empty() || target.front() != '/') {
        error = Error(400, "the request target must be a path starting with '/'");
        return false;
      }
      for (char c : target) {
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
          error = Error(400, "control character in the request target");
          return false;
        }
      }
      if (version.size() != 8 || version.substr(0, 5) != "HTTP/") {
        error = Error(400, "malformed HTTP version");
        return false;
      }
      if (version == "HTTP/1.1") {
        out->version_minor = 1;
      } else if (version == "HTTP/1.0") {
        out->version_minor = 0;
      } else {
        error = Error(505, "only HTTP/1.0 and HTTP/1.1 are supported");
        return false;
      }
      out->method = std::string(method);
      out->target = std::string(target);
      const size_t q = target.find('?');
      out->path = std::string(target.substr(0, q));
      if (q != std::string_view::npos) out->query = std::string(target.substr(q + 1));
      return true;
    }
    if (line.empty()) return false;  // end of head
    if (line.front() == ' ' || line.front() == '\t') {
      error = Error(400, "obsolete header line folding is not accepted");
      return false;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      error = Error(400, "malformed header line");
      return false;
    }
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), IsTokenChar)) {
      error = Error(400, "malformed header name");
      return false;
    }
    const std::string_view value = Trim(line.substr(colon + 1));
    for (char c : value) {
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
        error = Error(400, "control character in a header value");
        return false;
      }
    }
    if (++n_headers > limits.max_headers) {
      error = Error(431, "more than " + std::to_string(limits.max_headers) + " headers");
      return false;
    }
    HttpHeader h;
    h.name.resize(name.size());
    std::transform(name.begin(), name.end(), h.name.begin(), Lower);
    h.value = std::string(value);
    if (h.name == "content-length") {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        error = Error(400, "malformed Content-Length");
        return false;
      }
      int64_t length = 0;
      std::from_chars(value.data(), value.data() + value.size(), length);  // <= 18 digits: fits
      if (have_length && length != out->content_length) {
        error = Error(400, "conflicting Content-Length headers");
        return false;
      }
      have_length = true;
      out->content_length = length;
    } else if (h.name == "transfer-encoding") {
      error = Error(411, "request bodies must be sent with Content-Length (no transfer coding)");
      return false;
    } else if (h.name == "expect") {
      if (!EqualsIgnoreCase(value, "100-continue")) {
        error = Error(417, "unsupported expectation");
        return false;
      }
      out->expect_continue = true;
    }
    out->headers.push_back(std::move(h));
    return true;
  });
  if (error.kind == HeadParse::kError) return error;
  if (first) return Error(400, "empty request");

  const std::string_view connection = out->Header("connection");
  if (out->version_minor == 0) {
    out->keep_alive = HasToken(connection, "keep-alive");
  } else {
    out->keep_alive = !HasToken(connection, "close");
  }
  if (out->content_length > limits.max_body_bytes) {
    return Error(413, "request body of " + std::to_string(out->content_length) +
                          " bytes exceeds the limit of " + std::to_string(limits.max_body_bytes));
  }
  HeadParse r;
  r.kind = HeadParse::kComplete;
  r.head_bytes = skip + end;
  return r;
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string ResponseHead(int status, std::string_view content_type,
                         const std::vector<HttpHeader>& headers, int64_t content_length,
                         bool keep_alive) {
  std::string out;
  out.reserve(256);
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += ReasonPhrase(status);
  out += "\r\n";
  if (!content_type.empty()) {
    out += "Content-Type: ";
    out += content_type;
    out += "\r\n";
  }
  if (content_length >= 0) {
    out += "Content-Length: ";
    out += std::to_string(content_length);
    out += "\r\n";
  } else {
    out += "Transfer-Encoding: chunked\r\n";
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const HttpHeader& h : headers) {
    out += h.name;
    out += ": ";
    out += h.value;
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

void AppendChunk(std::string_view data, std::string* out) {
  if (data.empty()) return;
  char size[24];
  const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  out->append(size, static_cast<size_t>(n));
  out->append(data);
  out->append("\r\n");
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

}  // namespace loom::serve
