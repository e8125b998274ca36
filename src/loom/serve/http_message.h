// HTTP/1.1 messages: parsing a request head from untrusted bytes and writing response heads.
// The parser is a pure function over a buffer (no sockets), so it is tested and fuzzed alone.
//
// Accepted: origin-form targets ("/path?query"), HTTP/1.0 and 1.1, Content-Length bodies, line ends
// CRLF or bare LF.  Refused with the status a client should see: malformed syntax (400), a head
// larger than the limit or too many headers (431), a body larger than the limit (413), chunked or
// other transfer codings in requests (411: send Content-Length), unknown expectations (417),
// other HTTP versions (505).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::serve {

struct HttpHeader {
  std::string name;  // lower case in parsed requests
  std::string value;
};

struct HttpRequest {
  std::string method;     // "GET", "POST", ...
  std::string target;     // as sent: "/v1/models?x=1"
  std::string path;       // the target without its query: "/v1/models"
  std::string query;      // after '?', without it
  int version_minor = 1;  // HTTP/1.x
  std::vector<HttpHeader> headers;
  int64_t content_length = 0;
  bool keep_alive = true;        // from the version and the Connection header
  bool expect_continue = false;  // "Expect: 100-continue"
  std::string body;

  // The value of header `lower_name` (first occurrence), "" when absent.
  std::string_view Header(std::string_view lower_name) const;
};

struct HttpLimits {
  int64_t max_head_bytes = 16 << 10;  // request line + headers
  int64_t max_headers = 100;
  int64_t max_body_bytes = 4 << 20;
};

struct HeadParse {
  enum Kind { kIncomplete, kComplete, kError };
  Kind kind = kIncomplete;
  size_t head_bytes = 0;  // kComplete: bytes of the head, blank line included
  int status = 0;         // kError: the HTTP status to answer with
  std::string message;    // kError: why
};

// Parses the request head at the start of `buffer` into `out` (body not read).  kIncomplete when
// more bytes are needed (and the limit is not yet exceeded).
HeadParse ParseRequestHead(std::string_view buffer, const HttpLimits& limits, HttpRequest* out);

// "OK", "Not Found", ... ("Unknown" for codes not listed).
std::string_view ReasonPhrase(int status);

// A response head.  content_length < 0 means Transfer-Encoding: chunked.
std::string ResponseHead(int status, std::string_view content_type,
                         const std::vector<HttpHeader>& headers, int64_t content_length,
                         bool keep_alive);

// One chunk of a chunked body ("" gives nothing; use kLastChunk to end the body).
void AppendChunk(std::string_view data, std::string* out);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Decodes %XX escapes (a malformed escape is kept as is); '+' is not special in paths.
std::string PercentDecode(std::string_view text);

}  // namespace loom::serve
