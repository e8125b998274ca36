// Internal to loom_net (not for users): turns request bytes into Requests under the server's
// limits, with Beast's parser.  The server's sessions and the fuzz target both use it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "loom/net/http_server.h"

namespace loom::net::internal {

using HttpRequestMessage = boost::beast::http::request<boost::beast::http::string_body>;

struct ReaderLimits {
  int64_t max_header_bytes = 16 << 10;  // request line + headers
  int64_t max_body_bytes = 4 << 20;     // Content-Length or the sum of chunks
};

class RequestReader {
 public:
  enum class State {
    kNeedMore,  // feed more bytes
    kHeader,    // the head just completed (reported once; the body may follow): feed again
    kComplete,  // a whole request: TakeRequest(), then Reset() for the next one
    kError,     // error_status() and error_message() say what to answer
  };

  explicit RequestReader(ReaderLimits limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Parses from the start of `data`, which holds every byte not consumed before; returns how
  // many bytes it consumed (the caller drops them and keeps the rest for the next call).
  size_t Feed(std::string_view data);
  State state() const;
  int error_status() const;                 // 400, 413 or 431 in kError
  const std::string& error_message() const;  // a short reason in kError

  // Valid from kHeader on.
  bool keep_alive() const;
  bool expects_continue() const;   // "Expect: 100-continue" and the body is still to come
  bool websocket_upgrade() const;  // a WebSocket opening handshake
  // In kComplete: the request (the parsed message stays for a WebSocket handshake).
  Request TakeRequest(std::string remote, double received_at);
  // After TakeRequest: Beast's message (all but the body), for a WebSocket handshake.
  HttpRequestMessage ReleaseMessage();
  // Ready for the next request.
  void Reset();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::net::internal
