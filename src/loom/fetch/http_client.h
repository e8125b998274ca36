// A small HTTP(S) GET client over libcurl for downloads: follows redirects itself (so the caller
// sees every hop's headers, and a bearer token never travels to another origin), streams 2xx bodies
// into a sink, asks for byte ranges, and fails a transfer that stalls instead of hanging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"

namespace loom::fetch {

struct HttpOptions {
  int64_t connect_timeout_ms = 30000;
  int64_t stall_timeout_ms = 60000;  // a transfer that receives nothing for this long fails
  int max_redirects = 10;
  std::string user_agent = "loom/0.1";
};

// The status line and headers of one response.
struct HttpHead {
  int status = 0;
  std::string url;                                           // the URL this response answered
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case, in order

  // The last value of header `lower_name`; "" when absent.
  std::string Header(std::string_view lower_name) const;
};

// Receives the body of the final, successful (2xx) response.
class BodySink {
 public:
  virtual ~BodySink() = default;
  // Called once before the first byte (also for an empty body); an error stops the transfer and
  // is what Get returns.
  virtual Status Begin(const HttpHead& head) = 0;
  virtual Status Write(std::span<const std::byte> data) = 0;
};

struct HttpRequest {
  std::string url;
  std::string bearer_token;  // sent as "Authorization: Bearer ..." only to the origin of `url`
  int64_t range_start = -1;  // >= 0: ask only for the bytes from this offset on
};

struct HttpResult {
  std::vector<HttpHead> hops;  // every response in order, redirects first
  std::string body;            // the final body when no sink took it (non-2xx, or no sink),
                               // cut at `max_body` bytes
  int64_t body_bytes = 0;      // body bytes the final response delivered

  const HttpHead& final_head() const { return hops.back(); }
  int status() const { return hops.empty() ? 0 : hops.back().status; }
};

// "scheme://host:port" of an absolute http(s) URL (host lower-case, default port filled in); ""
// when the URL cannot be parsed.
std::string UrlOrigin(const std::string& url);

// Percent-encodes everything but unreserved characters and, when `keep_slash`, '/'.
std::string UrlEncode(std::string_view text, bool keep_slash);

class HttpClient {
 public:
  static StatusOr<HttpClient> Create(const HttpOptions& options);

  HttpClient();
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  ~HttpClient();

  // One GET, redirects followed (http and https only; never from https down to http).  A failure
  // of the transport (cannot resolve or connect, connection dropped, stalled, TLS) is an error
  // status naming the URL; an HTTP error status is a result.  The 2xx body goes to `sink` when one
  // is given; otherwise (and for every other status) up to `max_body` bytes of it are kept in
  // the result: a longer body fails with ResourceExhausted.
  StatusOr<HttpResult> Get(const HttpRequest& request, BodySink* sink, int64_t max_body);

 private:
  struct Handle;
  HttpOptions options_;
  std::unique_ptr<Handle> handle_;
};

}  // namespace loom::fetch
