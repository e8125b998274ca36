#include "loom/net/http_server.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/status.hpp>

#include "loom/base/clock.h"
#include "loom/net/request_reader.h"
#include "loom/net/transport.h"
#include "loom/net/websocket_internal.h"

namespace loom::net {

namespace http = boost::beast::http;
namespace asio = boost::asio;
using internal::ErrorCode;
using internal::Seconds;
using internal::tcp;

// ---------------------------------------------------------------------------------------------
// Responses

namespace {

constexpr int64_t kChunked = -1;     // Transfer-Encoding: chunked
constexpr int64_t kUntilClose = -2;  // no framing: the body ends when the connection closes
constexpr int64_t kNoBody = -3;      // 204, 304: neither a body nor a length
constexpr size_t kReadChunk = 16 << 10;
constexpr double kCloseTimeout = 5;  // to write an error answer and drain (seconds)
constexpr double kLinger = 2;        // reading what the client still sends before closing

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || std::strchr("()<>@,;:\\\"/[]?={}", c) != nullptr) return false;
  }
  return true;
}

bool IsFieldValue(std::string_view s) {
  for (char c : s) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

bool IEquals(std::string_view a, std::string_view b) { return boost::beast::iequals(a, b); }

std::string ResponseHead(int status, std::string_view content_type, const Headers& headers,
                         int64_t content_length, bool keep_alive, bool http10) {
  std::string reason(http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status))));
  if (reason.empty() || reason.front() == '<') reason = "Status";
  std::string out = StrCat("HTTP/1.1 ", status, " ", reason, "\r\n");
  if (!content_type.empty() && IsFieldValue(content_type)) {
    out.append("Content-Type: ").append(content_type).append("\r\n");
  }
  for (const auto& [name, value] : headers) {
    if (!IsToken(name) || !IsFieldValue(value)) continue;
    if (IEquals(name, "content-length") || IEquals(name, "transfer-encoding") ||
        IEquals(name, "connection") || (!content_type.empty() && IEquals(name, "content-type"))) {
      continue;
    }
    out.append(name).append(": ").append(value).append("\r\n");
  }
  if (content_length >= 0) {
    out += StrCat("Content-Length: ", content_length, "\r\n");
  } else if (content_length == kChunked) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (http10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

// The transport's own errors, shaped like the API's ({"error": {...}}).
std::string ErrorJson(int status, std::string_view message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  const char* code = status == 408   ? "request_timeout"
                     : status == 413 ? "request_too_large"
                     : status == 431 ? "headers_too_large"
                     : status == 503 ? "server_busy"
                     : status >= 500 ? "server_error"
                                     : "bad_request";
  return StrCat("{\"error\":{\"message\":\"", escaped, "\",\"type\":\"", type,
                "\",\"param\":null,\"code\":\"", code, "\"}}");
}

int FinalStatus(int status) { return status >= 200 && status <= 599 ? status : 500; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Server state and sessions

namespace {

struct ServerShared {
  ServerShared(asio::io_context& io_context, ServerOptions o)
      : io(io_context), options(std::move(o)), acceptor(io_context), retry(io_context) {}

  struct Handlers {
    HttpHandler http;
    UpgradeHandler upgrade;
  };

  asio::io_context& io;
  const ServerOptions options;
  // Copied by a session before it calls a handler, so that Stop() may drop them meanwhile.
  std::shared_ptr<const Handlers> handlers;
  std::shared_ptr<internal::Registry> registry = std::make_shared<internal::Registry>();
  tcp::acceptor acceptor;
  asio::steady_timer retry;  // after a failed accept (e.g. out of file descriptors)
  bool stopping = false;
  // Written on the loop thread, read by Stats() from any thread.
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> refused{0};
  std::atomic<int64_t> timed_out{0};
  std::atomic<int64_t> bad_requests{0};
};

class Session;

// The Responder of one exchange.  Holds its session while the exchange runs.
class Exchange final : public Responder {
 public:
  explicit Exchange(std::shared_ptr<Session> session) : session_(std::move(session)) {}

  void Respond(int status, std::string_view content_type, std::string body,
               Headers headers) override;
  void BeginStream(int status, std::string_view content_type, Headers headers) override;
  void Send(std::string data) override;
  void End() override;
  bool closed() const override { return closed_; }
  void OnClose(std::function<void()> f) override {
    if (closed_) {
      if (!ended_ && f) f();
      return;
    }
    if (!ended_) on_close_ = std::move(f);
  }
  void OnDone(std::function<void(bool)> f) override {
    if (!f) return;
    if (over_) {
      f(!closed_);
      return;
    }
    on_done_ = std::move(f);
  }
  int64_t queued_bytes() const override;

  bool started() const { return started_; }
  // The response was written (or the connection handed to a WebSocket): the exchange is over.
  void Detach() {
    over_ = true;
    session_.reset();
    on_close_ = nullptr;
    auto done = std::move(on_done_);
    on_done_ = nullptr;
    if (done) done(true);
  }
  // The connection closed first.
  void MarkClosed() {
    closed_ = true;
    over_ = true;
    auto f = std::move(on_close_);
    on_close_ = nullptr;
    auto done = std::move(on_done_);
    on_done_ = nullptr;
    session_.reset();
    if (f && !ended_) f();
    if (done) done(false);
  }

 private:
  std::shared_ptr<Session> session_;
  bool started_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool head_only_ = false;  // a HEAD request: the head is all
  bool ended_ = false;
  bool closed_ = false;
  bool over_ = false;  // Detach()ed or MarkClosed()
  std::function<void()> on_close_;
  std::function<void(bool)> on_done_;
};

// One connection: owns its transport, buffers and timer; its pending operations keep it alive.
class Session final : public internal::Tracked, public std::enable_shared_from_this<Session> {
 public:
  enum class Phase {
    kHandshake,  // TLS handshake
    kIdle,       // waiting for the first byte of a request
    kReading,    // head and body of a request (read_timeout_s)
    kHandling,   // the handler has the request; a read stays pending to notice the client leaving
    kClosing,    // writing an error answer, draining reads
    kLinger,     // sent everything, FIN sent; draining reads until the client closes
    kClosed,
  };

  Session(std::shared_ptr<ServerShared> shared, std::unique_ptr<internal::Transport> transport)
      : shared_(std::move(shared)),
        transport_(std::move(transport)),
        remote_(internal::RemoteString(transport_->socket())),
        timer_(shared_->io),
        reader_({shared_->options.max_header_bytes, shared_->options.max_body_bytes}),
        read_buffer_(kReadChunk) {}

  void Start() {
    id_ = shared_->registry->Add(weak_from_this());
    if (transport_->tls()) {
      phase_ = Phase::kHandshake;
      Arm(shared_->options.read_timeout_s);
      transport_->AsyncHandshake(true, [self = shared_from_this()](const ErrorCode& ec) {
        if (self->closed_) return;
        if (ec) {
          self->Close();
          return;
        }
        self->BeginIdle();
      });
      return;
    }
    BeginIdle();
  }

  void Abort(std::string_view) override { Close(); }

  // From the Exchange.
  void Write(std::string bytes) {
    if (closed_ || bytes.empty()) return;
    const int64_t limit = shared_->options.max_queued_bytes;
    if (writing_ && limit > 0 && queued_ > limit) {
      Close();  // the client takes its output far slower than it is produced
      return;
    }
    queued_ += static_cast<int64_t>(bytes.size());
    out_.push_back(std::move(bytes));
    if (!writing_) Flush();
  }
  void ResponseEnded() {
    response_ended_ = true;
    if (!writing_ && out_.empty()) {
      asio::post(shared_->io, [self = shared_from_this()] { self->ResponseDone(); });
    }
  }
  bool keep_alive() const { return keep_alive_ && !shared_->stopping; }
  void DisableKeepAlive() { keep_alive_ = false; }
  bool http10() const { return http10_; }
  bool head_request() const { return head_request_; }
  int64_t queued_bytes() const { return queued_; }

 private:
  void Arm(double seconds) {
    ++timer_generation_;
    write_watched_ = false;
    if (seconds <= 0) {
      timer_.cancel();
      return;
    }
    timer_.expires_after(Seconds(seconds));
    timer_.async_wait([self = shared_from_this(), generation = timer_generation_](
                          const ErrorCode& ec) {
      if (ec || generation != self->timer_generation_ || self->closed_) return;
      self->OnTimeout();
    });
  }
  void Disarm() {
    ++timer_generation_;
    write_watched_ = false;
    timer_.cancel();
  }

  // While a response is written the timer watches the writes lazily: armed once, when it fires it
  // checks whether the write in flight has taken longer than write_timeout_s (and re-arms for the
  // rest), so that a stream of small writes costs no timer operations (each would be syscalls).
  void WatchWrite() {
    write_started_ = base::NowSeconds();
    if (write_watched_ || shared_->options.write_timeout_s <= 0) return;
    Arm(shared_->options.write_timeout_s);
    write_watched_ = true;
  }

  void OnTimeout() {
    switch (phase_) {
      case Phase::kReading:
        ++shared_->timed_out;
        Fail(408, StrCat("the request did not arrive within ", shared_->options.read_timeout_s,
                         " s"));
        return;
      case Phase::kHandling: {  // the write watch
        if (!writing_) return;  // between writes: the next one arms it again
        const double left =
            write_started_ + shared_->options.write_timeout_s - base::NowSeconds();
        if (left > 0) {
          Arm(left);
          write_watched_ = true;
          return;
        }
        ++shared_->timed_out;  // a write the client does not take
        Close();
        return;
      }
      case Phase::kHandshake:
      case Phase::kIdle:
        ++shared_->timed_out;
        Close();
        return;
      default:  // closing or lingering: the answer was given
        Close();
        return;
    }
  }

  void BeginIdle() {
    phase_ = Phase::kIdle;
    reader_.Reset();
    if (in_.size() > 0) {
      BeginRequest();
      return;
    }
    Arm(first_ ? shared_->options.read_timeout_s : shared_->options.idle_timeout_s);
    if (!reading_) ReadMore();
  }

  void BeginRequest() {
    phase_ = Phase::kReading;
    first_ = false;
    received_at_ = base::NowSeconds();
    Arm(shared_->options.read_timeout_s);
    Parse();
  }

  void ReadMore() {
    if (reading_ || closed_ || peer_eof_) return;
    reading_ = true;
    transport_->AsyncReadSome(
        asio::buffer(read_buffer_),
        [self = shared_from_this()](const ErrorCode& ec, size_t n) { self->OnRead(ec, n); });
  }

  void OnRead(const ErrorCode& ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      peer_eof_ = true;
      // A client gone while its response is produced; or one that stopped mid-request.  While
      // an error answer is written the write decides.
      if (phase_ != Phase::kClosing) Close();
      return;
    }
    auto space = in_.prepare(n);
    std::memcpy(space.data(), read_buffer_.data(), n);
    in_.commit(n);
    switch (phase_) {
      case Phase::kIdle:
        BeginRequest();
        return;
      case Phase::kReading:
        Parse();
        return;
      case Phase::kHandling:
        // Pipelined bytes wait for the response to end; past a head's worth, stop reading.
        if (static_cast<int64_t>(in_.size()) < PipelineCap()) ReadMore();
        return;
      case Phase::kClosing:
      case Phase::kLinger:
        in_.consume(in_.size());
        ReadMore();
        return;
      default:
        return;
    }
  }

  int64_t PipelineCap() const {
    return std::max<int64_t>(shared_->options.max_header_bytes, 4096);
  }

  void Parse() {
    for (;;) {
      const auto data = in_.data();
      const size_t used = reader_.Feed(
          std::string_view(static_cast<const char*>(data.data()), data.size()));
      in_.consume(used);
      switch (reader_.state()) {
        case internal::RequestReader::State::kError:
          ++shared_->bad_requests;
          Fail(reader_.error_status(), reader_.error_message());
          return;
        case internal::RequestReader::State::kNeedMore:
          ReadMore();
          return;
        case internal::RequestReader::State::kHeader:
          received_at_ = base::NowSeconds();
          if (reader_.expects_continue()) Write("HTTP/1.1 100 Continue\r\n\r\n");
          continue;
        case internal::RequestReader::State::kComplete:
          Dispatch();
          return;
      }
    }
  }

  void Dispatch() {
    Disarm();
    phase_ = Phase::kHandling;
    response_ended_ = false;
    Request request = reader_.TakeRequest(remote_, received_at_);
    keep_alive_ = reader_.keep_alive();
    http10_ = request.version == 10;
    head_request_ = request.method == "HEAD";
    const auto handlers = shared_->handlers;
    if (!handlers) {
      Close();
      return;
    }
    auto exchange = std::make_shared<Exchange>(shared_from_this());
    exchange_ = exchange;
    if (handlers->upgrade && reader_.websocket_upgrade()) {
      std::function<void(std::shared_ptr<WebSocket>)> accept;
      handlers->upgrade(request, exchange, &accept);
      if (closed_) return;
      if (accept && !exchange->started()) {
        Upgrade(std::move(accept));
        return;
      }
    } else if (handlers->http) {
      handlers->http(std::move(request), exchange);
      if (closed_) return;
    } else {
      exchange->Respond(404, "text/plain; charset=utf-8", "not found\n", {});
    }
    if (phase_ == Phase::kHandling && static_cast<int64_t>(in_.size()) < PipelineCap()) {
      ReadMore();
    }
  }

  void Upgrade(std::function<void(std::shared_ptr<WebSocket>)> accept) {
    auto self = shared_from_this();
    if (writing_ || reading_) {  // bytes still moving (a pipelined upgrade): not a clean handover
      Close();
      return;
    }
    exchange_->Detach();
    exchange_.reset();
    closed_ = true;
    phase_ = Phase::kClosed;
    Disarm();
    shared_->registry->Remove(id_);
    internal::WsOptions options;
    options.max_message_bytes = shared_->options.max_ws_message_bytes;
    options.ping_interval_s = shared_->options.ws_ping_interval_s;
    options.handshake_timeout_s = shared_->options.read_timeout_s;
    internal::AcceptWebSocket(std::move(transport_), reader_.ReleaseMessage(), options,
                              shared_->registry, std::move(accept));
  }

  void Flush() {
    writing_ = true;
    in_flight_.clear();
    while (!out_.empty() && in_flight_.size() < 64) {
      in_flight_.push_back(std::move(out_.front()));
      out_.pop_front();
    }
    std::vector<asio::const_buffer> buffers;
    buffers.reserve(in_flight_.size());
    for (const auto& s : in_flight_) buffers.emplace_back(s.data(), s.size());
    if (phase_ == Phase::kHandling) WatchWrite();
    transport_->AsyncWrite(std::move(buffers),
                           [self = shared_from_this()](const ErrorCode& ec, size_t) {
                             self->OnWrite(ec);
                           });
  }

  void OnWrite(const ErrorCode& ec) {
    writing_ = false;
    for (const auto& s : in_flight_) queued_ -= static_cast<int64_t>(s.size());
    in_flight_.clear();
    if (closed_) return;
    if (ec) {
      Close();
      return;
    }
    if (!out_.empty()) {
      Flush();
      return;
    }
    if (phase_ == Phase::kHandling) {
      if (response_ended_) ResponseDone();
    } else if (phase_ == Phase::kClosing) {
      Linger();
    }
  }

  void ResponseDone() {
    if (closed_ || phase_ != Phase::kHandling || writing_ || !out_.empty()) return;
    if (exchange_) {
      auto exchange = std::move(exchange_);
      exchange_.reset();
      exchange->Detach();
    }
    if (!keep_alive()) {
      Linger();
      return;
    }
    BeginIdle();
  }

  // An error answer for a request that could not be read; the connection then closes.
  void Fail(int status, std::string_view message) {
    if (closed_ || phase_ == Phase::kClosing || phase_ == Phase::kLinger) return;
    phase_ = Phase::kClosing;
    keep_alive_ = false;
    std::string body = ErrorJson(status, message);
    Write(ResponseHead(status, "application/json", {}, static_cast<int64_t>(body.size()), false,
                       false) +
          body);
    Arm(kCloseTimeout);
    // Go on reading (and dropping) what the client still sends, so that closing does not reset
    // the connection before the client has read the answer.
    ReadMore();
  }

  void Linger() {
    phase_ = Phase::kLinger;
    transport_->ShutdownSend();
    if (peer_eof_) {
      Close();
      return;
    }
    Arm(kLinger);
    ReadMore();
  }

  void Close() {
    if (closed_) return;
    auto self = shared_from_this();  // the exchange may hold the last reference
    closed_ = true;
    phase_ = Phase::kClosed;
    Disarm();
    if (transport_) transport_->Close();
    shared_->registry->Remove(id_);
    out_.clear();
    queued_ = 0;
    if (exchange_) {
      auto exchange = std::move(exchange_);
      exchange_.reset();
      exchange->MarkClosed();
    }
  }

  const std::shared_ptr<ServerShared> shared_;
  std::unique_ptr<internal::Transport> transport_;
  const std::string remote_;
  uint64_t id_ = 0;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  bool write_watched_ = false;  // the timer watches writes (kHandling)
  double write_started_ = 0;    // base::NowSeconds() when the write in flight began
  internal::RequestReader reader_;
  std::vector<char> read_buffer_;   // (kReadChunk) one read's bytes
  boost::beast::flat_buffer in_;    // bytes read and not parsed yet
  std::deque<std::string> out_;     // queued for the socket
  std::vector<std::string> in_flight_;  // being written
  int64_t queued_ = 0;              // bytes in out_ and in_flight_
  std::shared_ptr<Exchange> exchange_;
  Phase phase_ = Phase::kIdle;
  double received_at_ = 0;
  bool first_ = true;  // no request yet on this connection
  bool reading_ = false;
  bool writing_ = false;
  bool peer_eof_ = false;
  bool closed_ = false;
  bool response_ended_ = false;
  bool keep_alive_ = false;
  bool http10_ = false;
  bool head_request_ = false;
};

void Exchange::Respond(int status, std::string_view content_type, std::string body,
                       Headers headers) {
  if (!session_ || started_ || closed_) return;
  const auto session = session_;
  started_ = true;
  ended_ = true;
  status = FinalStatus(status);
  const bool no_body = status == 204 || status == 304;
  session->Write(ResponseHead(status, content_type, headers,
                              no_body ? kNoBody : static_cast<int64_t>(body.size()),
                              session->keep_alive(), session->http10()));
  if (!no_body && !session->head_request()) session->Write(std::move(body));
  session->ResponseEnded();
}

void Exchange::BeginStream(int status, std::string_view content_type, Headers headers) {
  if (!session_ || started_ || closed_) return;
  const auto session = session_;
  started_ = true;
  streaming_ = true;
  status = FinalStatus(status);
  head_only_ = session->head_request();
  chunked_ = !session->http10();
  if (!chunked_) session->DisableKeepAlive();
  session->Write(ResponseHead(status, content_type, headers, chunked_ ? kChunked : kUntilClose,
                              session->keep_alive(), session->http10()));
}

void Exchange::Send(std::string data) {
  if (!session_ || !streaming_ || ended_ || closed_ || head_only_ || data.empty()) return;
  const auto session = session_;
  if (!chunked_) {
    session->Write(std::move(data));
    return;
  }
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string frame;
  frame.reserve(data.size() + 24);
  frame.append(size).append(data).append("\r\n");
  session->Write(std::move(frame));
}

void Exchange::End() {
  if (!session_ || !streaming_ || ended_ || closed_) return;
  const auto session = session_;
  ended_ = true;
  if (chunked_ && !head_only_) session->Write("0\r\n\r\n");
  session->ResponseEnded();
}

int64_t Exchange::queued_bytes() const { return session_ ? session_->queued_bytes() : 0; }

void Refuse(ServerShared& shared, tcp::socket socket) {
  ErrorCode ec;
  if (!shared.options.tls) {
    // Best effort, without waiting: the socket buffer of a fresh connection takes it.
    const std::string body = ErrorJson(503, "too many open connections; retry later");
    const std::string answer =
        ResponseHead(503, "application/json", {{"Retry-After", "1"}},
                     static_cast<int64_t>(body.size()), false, false) +
        body;
    socket.non_blocking(true, ec);
    socket.write_some(asio::buffer(answer), ec);
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

void Accept(const std::shared_ptr<ServerShared>& shared) {
  shared->acceptor.async_accept([shared](const ErrorCode& ec, tcp::socket socket) {
    if (shared->stopping) return;
    if (ec) {
      // E.g. out of file descriptors: try again shortly instead of spinning.
      shared->retry.expires_after(Seconds(0.05));
      shared->retry.async_wait([shared](const ErrorCode& wait_ec) {
        if (!wait_ec && !shared->stopping) Accept(shared);
      });
      return;
    }
    ErrorCode option_ec;
    socket.set_option(tcp::no_delay(true), option_ec);
    if (shared->registry->size() >= shared->options.max_connections) {
      ++shared->refused;
      Refuse(*shared, std::move(socket));
    } else {
      ++shared->accepted;
      auto transport = shared->options.tls
                           ? internal::MakeServerTlsTransport(std::move(socket),
                                                              shared->options.tls)
                           : internal::MakePlainTransport(std::move(socket));
      std::make_shared<Session>(shared, std::move(transport))->Start();
    }
    Accept(shared);
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// HttpServer

struct HttpServer::State {
  std::shared_ptr<ServerShared> shared;
};

HttpServer::HttpServer() = default;

HttpServer::~HttpServer() { Stop(); }

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(asio::io_context& io,
                                                        ServerOptions options, HttpHandler http,
                                                        UpgradeHandler upgrade) {
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgumentError("http server: port ", options.port, " out of range");
  }
  const std::string where = StrCat(options.host, ":", options.port);
  ErrorCode ec;
  tcp::endpoint endpoint;
  const auto address = asio::ip::make_address(options.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<uint16_t>(options.port));
  } else {
    tcp::resolver resolver(io);
    const auto results = resolver.resolve(options.host, std::to_string(options.port), ec);
    if (ec || results.empty()) {
      return UnavailableError("http server: resolve '", options.host,
                              "': ", ec ? ec.message() : "no address");
    }
    endpoint = results.begin()->endpoint();
  }
  auto shared = std::make_shared<ServerShared>(io, std::move(options));
  auto& acceptor = shared->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (ec) return UnavailableError("http server: open a socket for ", where, ": ", ec.message());
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  acceptor.bind(endpoint, ec);
  if (ec) return UnavailableError("http server: bind ", where, ": ", ec.message());
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return UnavailableError("http server: listen on ", where, ": ", ec.message());
  const auto local = acceptor.local_endpoint(ec);
  if (ec) return UnavailableError("http server: local address of ", where, ": ", ec.message());
  shared->handlers = std::make_shared<const ServerShared::Handlers>(
      ServerShared::Handlers{std::move(http), std::move(upgrade)});

  std::unique_ptr<HttpServer> server(new HttpServer());
  server->state_ = std::make_unique<State>();
  server->state_->shared = shared;
  server->port_ = local.port();
  Accept(shared);
  return server;
}

int64_t HttpServer::open_connections() const {
  return state_ ? state_->shared->registry->size() : 0;
}

ServerStats HttpServer::Stats() const {
  ServerStats s;
  if (!state_) return s;
  const ServerShared& shared = *state_->shared;
  s.open_connections = shared.registry->size();
  s.accepted = shared.accepted.load(std::memory_order_relaxed);
  s.refused = shared.refused.load(std::memory_order_relaxed);
  s.timed_out = shared.timed_out.load(std::memory_order_relaxed);
  s.bad_requests = shared.bad_requests.load(std::memory_order_relaxed);
  return s;
}

void HttpServer::Stop() {
  if (!state_) return;
  auto shared = state_->shared;
  if (shared->stopping) return;
  shared->stopping = true;
  ErrorCode ec;
  shared->acceptor.close(ec);
  shared->retry.cancel();
  const auto handlers = std::move(shared->handlers);  // released when Stop returns
  shared->handlers.reset();
  shared->registry->AbortAll("server stopping");
}

}  // namespace loom::net
