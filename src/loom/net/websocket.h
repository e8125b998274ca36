// WebSocket connections (RFC 6455) carrying text messages, server or client side, over TCP or TLS.
//
// Threads: every method must be called on the thread that runs the connection's io_context, and
// every callback runs there.  No locks are needed or taken.
//
// Limits: a message bigger than the connection's limit closes the connection (close code 1009);
// a binary message closes it with 1008 (policy).  A ping is sent after `ping_interval_s` without
// any data from the peer; a peer that sends nothing for twice that long is dropped ("timeout").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "loom/base/status.h"
#include "loom/net/url.h"

namespace boost::asio::ssl {
class context;
}

namespace loom::net {

// One WebSocket connection.  Its pending operations keep it alive; a caller that keeps the
// shared_ptr after the connection ended may still call every method (they do nothing).
class WebSocket {
 public:
  virtual ~WebSocket() = default;
  // Queues one text message; messages go out in order.  Dropped once closed or closing.
  virtual void Send(std::string text) = 0;
  // Sends what is queued, then a close frame with `reason` (at most 123 bytes are sent): code 1008
  // (policy) when the reason starts with "policy:", else 1000 (normal).  OnClose follows (with
  // this reason) once the peer answered, or the close handshake timed out.
  virtual void Close(std::string_view reason) = 0;
  // One call per complete text message.  Set before Start().
  virtual void OnMessage(std::function<void(std::string_view message)> f) = 0;
  // Called exactly once when the connection ends, whatever ends it (the peer's close frame, an
  // error, a timeout, a too-big message, Close(), or the server stopping), and only after Start()
  // or Close().  Callbacks are released after it ran.
  virtual void OnClose(std::function<void(std::string_view reason)> f) = 0;
  // Begins reading.  Call once, after setting the callbacks.
  virtual void Start() = 0;
  virtual std::string remote() const = 0;  // "ip:port" of the peer
  virtual bool open() const = 0;           // not yet closed or closing
  // Bytes queued by Send and not yet written (for back-pressure decisions).
  virtual int64_t queued_bytes() const = 0;
};

using DialDone = std::function<void(StatusOr<std::shared_ptr<WebSocket>>)>;

// Dials a ws:// or wss:// URL: resolves the host (Asio's resolver, which runs getaddrinfo on a
// helper thread of its own; IP literals skip it), connects, does the TLS handshake for wss (SNI,
// certificate verification through `tls`, which wss requires), then the WebSocket handshake
// with the extra `headers` (e.g. authorization).  All of it within `timeout_s`.  `done` runs
// once, on the io_context's thread, never inside this call.  A handshake the server refuses
// reports its HTTP status (kPermissionDenied for 401 and 403, kUnavailable otherwise).  The socket
// handed over is not started: set its callbacks, then Start().
void DialWebSocket(boost::asio::io_context& io, const Url& url,
                   std::shared_ptr<boost::asio::ssl::context> tls,
                   std::vector<std::pair<std::string, std::string>> headers, double timeout_s,
                   int64_t max_message_bytes, DialDone done, double ping_interval_s = 5);

}  // namespace loom::net
