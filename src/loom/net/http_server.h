// An HTTP/1.1 server (plain or TLS) with chunked streaming responses and WebSocket upgrades, on
// Boost.Beast's parser and Boost.Asio.
//
// Threads: the server, its sessions and every callback run on the one thread that runs the
// io_context given to Start(); Responder and WebSocket methods must be called there too.
//
// One session object per connection owns its socket, buffers and timer; its pending operations
// keep it alive.  Protection against misbehaving clients: the first request must start within
// read_timeout_s of the accept (after the TLS handshake, itself bounded by read_timeout_s), a
// request's head and body must arrive within read_timeout_s of its first byte (else 408), an
// idle keep-alive connection closes after idle_timeout_s, heads over max_header_bytes get 431,
// bodies over max_body_bytes get 413 (Content-Length or chunked), malformed requests 400, and a
// response the client does not read for write_timeout_s, or that piles up more than
// max_queued_bytes unread, drops the connection.  Beyond max_connections a connection gets 503
// (plain HTTP) and is closed.  The server's own error answers carry an OpenAI-shaped JSON body
// ({"error": {"message", "type", "param", "code"}}) and close the connection after a short
// lingering drain, so that the client reads them.  A client that closes its connection while its
// response is pending is noticed at once (a read stays pending while the response is produced)
// and the Responder's OnClose runs.
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
#include "loom/net/websocket.h"

namespace boost::asio::ssl {
class context;
}

namespace loom::net {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // as sent, e.g. "GET"
  std::string target;  // path?query as sent (percent-encoding kept)
  std::string path;    // target without the query
  std::string query;   // after '?', "" if none
  Headers headers;     // names lower-cased, values as sent, in order
  std::string body;
  std::string remote;       // "ip:port" of the peer
  double received_at = 0;   // base::NowSeconds() when the head arrived
  int version = 11;         // 10 or 11

  // The first header named `lower_name`, "" if absent.
  std::string_view Header(std::string_view lower_name) const;
};

// One HTTP exchange.  The server keeps it alive until it is answered and written, or the client
// goes away.  Only the first Respond() or BeginStream() counts; calls that do not fit the state
// (Send before BeginStream, anything after End, anything once closed) do nothing, so a caller may
// keep and call it after the connection died.
class Responder {
 public:
  virtual ~Responder() = default;
  // A whole response with Content-Length.  `headers` must not carry Content-Length,
  // Transfer-Encoding or Connection (they are dropped); headers with CR, LF or NUL are dropped.
  virtual void Respond(int status, std::string_view content_type, std::string body,
                       Headers headers = {}) = 0;
  // Starts a chunked response (for HTTP/1.0 clients: unframed, ended by closing).
  virtual void BeginStream(int status, std::string_view content_type, Headers headers = {}) = 0;
  // Queues one chunk; writes are ordered; never blocks.  Empty data is ignored.
  virtual void Send(std::string data) = 0;
  // The last chunk; the connection then serves its next request (keep-alive) or closes.
  virtual void End() = 0;
  // Whether the client went away (or the server stopped) before the response was written.
  virtual bool closed() const = 0;
  // Runs `f` once if the connection closes before the response ended (End() or Respond()); at once
  // when it already has.
  virtual void OnClose(std::function<void()> f) = 0;
  // Runs `f` once when the exchange is over: `completed` is true when its response was written
  // whole (or the connection became a WebSocket), false when the connection closed first (the
  // client left, a write failed or timed out, or the server stopped).  At once when it is over.
  virtual void OnDone(std::function<void(bool completed)> f) = 0;
  // Bytes accepted by Respond/BeginStream/Send and not yet written to the socket.
  virtual int64_t queued_bytes() const = 0;
};

struct ServerOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address, or a name resolved once at Start
  int port = 0;                    // 0: any free port (see HttpServer::port())
  std::shared_ptr<boost::asio::ssl::context> tls;  // null: plain HTTP
  int64_t max_body_bytes = 4 << 20;     // bigger: 413 with a JSON error body, closed
  double read_timeout_s = 10;           // head + body of one request (408), TLS handshake
  double idle_timeout_s = 60;           // keep-alive connection between requests: closed silently
  double write_timeout_s = 60;          // one write of a response that the client does not read
  // Output accepted and not yet taken by the client; more: the connection is dropped.  (Checked
  // when more is queued behind a write in progress, so one response bigger than this still goes.)
  int64_t max_queued_bytes = 16 << 20;
  int64_t max_header_bytes = 16 << 10;  // request line + headers; bigger: 431
  int64_t max_ws_message_bytes = 8 << 20;
  double ws_ping_interval_s = 5;
  int64_t max_connections = 4096;  // HTTP and WebSocket; beyond: accepted, then closed at once
};
// (A timeout <= 0 disables that timeout.)

// Counters since Start (readable from any thread).
struct ServerStats {
  int64_t open_connections = 0;  // HTTP sessions and WebSockets
  int64_t accepted = 0;
  int64_t refused = 0;       // over max_connections
  int64_t timed_out = 0;     // TLS handshake, read (408), idle and write timeouts
  int64_t bad_requests = 0;  // refused by the request parser: 400, 413, 431
};

using HttpHandler = std::function<void(Request request, std::shared_ptr<Responder> responder)>;

// Called for a request that asks for a WebSocket upgrade (on any path).  The handler decides,
// typically by path and headers, before it returns: it accepts by setting `*accept` to a callback
// that receives the open socket (not started yet) once the handshake is done; or it refuses by
// answering through `refuse` (e.g. 401 or 404), then or later.  Setting *accept after answering
// through `refuse` does nothing.  A null UpgradeHandler sends such requests to the HttpHandler.
using UpgradeHandler =
    std::function<void(const Request& request, std::shared_ptr<Responder> refuse,
                       std::function<void(std::shared_ptr<WebSocket>)>* accept)>;

class HttpServer {
 public:
  // Binds, listens and starts accepting on `io`.  The handlers are released by Stop().
  static StatusOr<std::unique_ptr<HttpServer>> Start(boost::asio::io_context& io,
                                                     ServerOptions options, HttpHandler http,
                                                     UpgradeHandler upgrade);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  int64_t open_connections() const;  // HTTP sessions and WebSockets
  ServerStats Stats() const;         // any thread
  // Closes the listener and every connection: each pending Responder's OnClose and each
  // WebSocket's OnClose ("server stopping") run before Stop returns, and the server leaves no
  // work on the io_context.  Idempotent.  Call on the io_context's thread, or while it is not
  // running.
  void Stop();

 private:
  struct State;
  HttpServer();
  std::unique_ptr<State> state_;
  int port_ = 0;
};

}  // namespace loom::net
