// A small HTTP/1.1 server: one event-loop thread (epoll) owns every connection, a few handler
// threads run the application's handler for each complete request.  Connections cost no thread,
// so many clients can hold streaming responses open at once.
//
// Protection against misbehaving clients: a request's head and then its body must each arrive
// within read_timeout (slow-loris), idle keep-alive connections close after idle_timeout, head and
// body sizes are limited (431/413 before the body is read), a client that stops reading a pending
// response is dropped after write_timeout or when too much output is queued for it, and at most
// max_connections are open (more get 503).  A client that closes its connection while its response
// is pending is noticed at once (EOF / RDHUP) and the exchange's on-close callback runs.
//
// Threads: handlers run on handler threads; an Exchange may be answered from any thread; pumps and
// on-close callbacks run on the loop thread and must be quick.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/serve/http_message.h"

namespace loom::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address or a host name
  int port = 8080;                 // 0: any free port (see HttpServer::port())
  HttpLimits limits;
  double read_timeout_s = 10;   // for a request's head, and again for its body
  double idle_timeout_s = 60;   // a keep-alive connection waiting for its next request
  double write_timeout_s = 60;  // a pending response that the client does not read
  int64_t max_connections = 1024;
  int64_t max_pending_output = 16 << 20;  // bytes queued for one client
  int handler_threads = 2;
};

class LoopShared;

// One request and its response.  Thread-safe.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<LoopShared> loop, uint64_t connection, HttpRequest request,
           double received_at);

  const HttpRequest& request() const { return request_; }
  double received_at() const { return received_at_; }  // base::NowSeconds() at the request's end

  // A whole response.  Only the first Respond()/BeginStream() counts; later calls are ignored.
  void Respond(int status, std::string_view content_type, std::string_view body,
               const std::vector<HttpHeader>& headers = {});
  // A chunked response: BeginStream, Send as often as needed, End.
  void BeginStream(int status, std::string_view content_type,
                   const std::vector<HttpHeader>& headers = {});
  void Send(std::string_view data);
  void End();

  // Whether the client went away (or the server is stopping) before the response ended.
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // Status of the response, 0 before one was started.
  int status() const;
  // A label for metrics (the route pattern, not the raw path).
  void SetRoute(std::string_view route);
  std::string route() const;

  // Runs `pump(exchange)` on the loop thread after each Wake(), until the response has ended or
  // the client is gone.  Set it before anything can call Wake().
  void SetPump(std::function<void(Exchange&)> pump);
  // Schedules the pump; callable from any thread, cheap, coalesces.
  void Wake();
  // Runs `on_close` once if the connection closes before the response ended (at once when it
  // already has).  Runs on the loop thread, or on the caller's when already closed.
  void SetOnClose(std::function<void()> on_close);

 private:
  friend class HttpServer;
  enum class State { kNone, kStreaming, kDone };
  void Posted();                      // output was added
  bool TakeOutput(std::string* out);  // loop thread: moves queued bytes out; returns done
  void MarkClosed();                  // loop thread: the connection is gone
  void RunPump();                     // loop thread
  void ReleaseCallbacks();            // loop thread: the exchange is over

  const std::shared_ptr<LoopShared> loop_;
  const uint64_t connection_;
  const HttpRequest request_;
  const double received_at_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> queued_{false};      // on the loop's ready list
  std::function<void(Exchange&)> pump_;  // set once, then read by the loop thread only

  mutable std::mutex mu_;
  State state_ = State::kNone;
  int status_ = 0;
  std::string route_;
  std::string out_;  // bytes for the socket not yet taken by the loop
  std::function<void()> on_close_;
};

using Handler = std::function<void(const std::shared_ptr<Exchange>&)>;
// Told on the loop thread when an exchange ends: its response written (`completed`), or its
// client gone first.
using FinishObserver = std::function<void(const Exchange& exchange, bool completed)>;

struct HttpServerStats {
  int64_t open_connections = 0;
  int64_t accepted = 0;
  int64_t refused = 0;       // over max_connections
  int64_t timed_out = 0;     // read/idle/write timeouts
  int64_t bad_requests = 0;  // answered by the transport itself (4xx/5xx parse errors)
};

class HttpServer {
 public:
  // Binds and listens; serving starts with Start().
  static StatusOr<std::unique_ptr<HttpServer>> Create(const HttpServerOptions& options,
                                                      Handler handler,
                                                      FinishObserver on_finish = nullptr);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  void Start();
  // Closes every connection (running their on-close callbacks) and joins the threads.
  // Thread-safe, idempotent.
  void Stop();
  HttpServerStats Stats() const;

 private:
  class Impl;
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace loom::serve
