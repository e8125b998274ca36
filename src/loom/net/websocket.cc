// WebSocket connections on Beast's websocket::stream, over a TCP socket or a TLS stream (one
// template, instantiated twice, only in this file).
#include "loom/net/websocket.h"

#include <deque>

#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include "loom/base/clock.h"
#include "loom/net/transport.h"
#include "loom/net/websocket_internal.h"

namespace loom::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;
namespace ssl = boost::asio::ssl;
using internal::ErrorCode;
using internal::Seconds;
using internal::tcp;

namespace {

constexpr size_t kMaxCloseReason = 123;  // RFC 6455: 125 bytes of payload, 2 for the code

// At most kMaxCloseReason bytes, not cutting a UTF-8 sequence.
std::string_view CloseReasonText(std::string_view reason) {
  if (reason.size() <= kMaxCloseReason) return reason;
  size_t n = kMaxCloseReason;
  while (n > 0 && (static_cast<unsigned char>(reason[n]) & 0xC0) == 0x80) --n;
  return reason.substr(0, n);
}

bool ValidHeader(const std::pair<std::string, std::string>& header) {
  if (header.first.empty()) return false;
  for (char c : header.first) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == ':') return false;
  }
  for (char c : header.second) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

template <class WsStream>
class WsImpl final : public WebSocket,
                     public internal::Tracked,
                     public std::enable_shared_from_this<WsImpl<WsStream>> {
 public:
  template <class NextLayer>
  WsImpl(NextLayer&& next, std::shared_ptr<ssl::context> context, internal::WsOptions options,
         std::string remote)
      : context_(std::move(context)),
        ws_(std::forward<NextLayer>(next)),
        options_(options),
        remote_(std::move(remote)) {}

  // Server side: answers the upgrade request; `open` gets the socket once it is open.
  void Accept(internal::UpgradeRequest request, std::shared_ptr<internal::Registry> registry,
              std::function<void(std::shared_ptr<WebSocket>)> open) {
    Configure(options_.handshake_timeout_s);
    if (registry) {
      if (registry->stopping()) {
        Finish("server stopping");
        return;
      }
      registry_ = std::move(registry);
      id_ = registry_->Add(this->weak_from_this());
    }
    upgrade_request_ = std::move(request);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(beast::http::field::server, "loom"); }));
    ws_.async_accept(upgrade_request_, [self = this->shared_from_this(),
                                        open = std::move(open)](const ErrorCode& ec) {
      self->upgrade_request_ = {};
      if (self->finished_) return;
      if (ec) {
        self->Finish("websocket handshake failed: " + ec.message());
        return;
      }
      self->open_ = true;
      if (open) open(self);
    });
  }

  // Client side: the opening handshake on a connected stream.
  void Handshake(const Url& url, std::vector<std::pair<std::string, std::string>> headers,
                 double timeout_s, DialDone done) {
    Configure(timeout_s);
    ws_.set_option(websocket::stream_base::decorator(
        [headers = std::move(headers)](websocket::request_type& req) {
          req.set(beast::http::field::user_agent, "loom");
          for (const auto& [name, value] : headers) req.set(name, value);
        }));
    ws_.async_handshake(
        response_, url.HostPort(), url.target,
        [self = this->shared_from_this(), url, done = std::move(done)](const ErrorCode& ec) {
          if (ec) {
            Status status;
            const std::string where = "websocket " + url.ToString();
            if (ec == websocket::error::upgrade_declined) {
              const int code = self->response_.result_int();
              std::string body = self->response_.body().substr(0, 200);
              while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) {
                body.pop_back();
              }
              const std::string why = StrCat(where, ": the server refused the upgrade with HTTP ",
                                             code, body.empty() ? "" : ": " + body);
              status = code == 401 || code == 403 ? PermissionDeniedError(why)
                                                  : UnavailableError(why);
            } else if (ec == beast::error::timeout) {
              status = DeadlineExceededError(where, ": timed out in the websocket handshake");
            } else {
              status = UnavailableError(where, ": websocket handshake: ", ec.message());
            }
            self->Finish("websocket handshake failed");
            done(std::move(status));
            return;
          }
          self->open_ = true;
          done(std::shared_ptr<WebSocket>(self));
        });
  }

  void Send(std::string text) override {
    if (!open_ || finished_) return;
    queued_ += static_cast<int64_t>(text.size());
    queue_.push_back(std::move(text));
    if (!writing_) DoWrite();
  }

  void Close(std::string_view reason) override {
    if (finished_ || close_requested_) return;
    close_requested_ = true;
    open_ = false;
    close_reason_ = std::string(reason);
    if (!writing_) DoClose();
  }

  void OnMessage(std::function<void(std::string_view)> f) override { on_message_ = std::move(f); }
  void OnClose(std::function<void(std::string_view)> f) override { on_close_ = std::move(f); }

  void Start() override {
    if (started_ || finished_) return;
    started_ = true;
    DoRead();
  }

  std::string remote() const override { return remote_; }
  bool open() const override { return open_ && !finished_; }
  int64_t queued_bytes() const override { return queued_; }

  void Abort(std::string_view reason) override { Finish(std::string(reason)); }

 private:
  void Configure(double handshake_timeout_s) {
    ws_.read_message_max(static_cast<size_t>(std::max<int64_t>(options_.max_message_bytes, 1)));
    websocket::stream_base::timeout timeout{};
    timeout.handshake_timeout = handshake_timeout_s > 0 ? Seconds(handshake_timeout_s)
                                                        : websocket::stream_base::none();
    // Beast pings after half the idle timeout and gives up after all of it.
    timeout.idle_timeout = options_.ping_interval_s > 0 ? Seconds(2 * options_.ping_interval_s)
                                                        : websocket::stream_base::none();
    timeout.keep_alive_pings = options_.ping_interval_s > 0;
    ws_.set_option(timeout);
  }

  void DoRead() {
    reading_ = true;
    ws_.async_read(buffer_, [self = this->shared_from_this()](const ErrorCode& ec, size_t) {
      self->OnRead(ec);
    });
  }

  void OnRead(const ErrorCode& ec) {
    reading_ = false;
    if (finished_) return;
    if (ec) {
      Finish(ReasonFor(ec));
      return;
    }
    if (!ws_.got_text()) {
      buffer_.consume(buffer_.size());
      Close("policy: binary messages are not accepted");
    } else if (!close_requested_ && on_message_) {
      const auto data = buffer_.data();
      on_message_(std::string_view(static_cast<const char*>(data.data()), data.size()));
    }
    buffer_.consume(buffer_.size());
    // Reading goes on while closing: the peer's close frame ends it.
    if (!finished_) DoRead();
  }

  void DoWrite() {
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(queue_.front()),
                    [self = this->shared_from_this()](const ErrorCode& ec, size_t) {
                      self->OnWrite(ec);
                    });
  }

  void OnWrite(const ErrorCode& ec) {
    writing_ = false;
    if (!queue_.empty()) {
      queued_ -= static_cast<int64_t>(queue_.front().size());
      queue_.pop_front();
    }
    if (finished_) return;
    if (ec) {
      Finish(ReasonFor(ec));
      return;
    }
    if (!queue_.empty()) {
      DoWrite();
    } else if (close_requested_) {
      DoClose();
    }
  }

  void DoClose() {
    if (close_started_ || finished_) return;
    close_started_ = true;
    const bool policy = close_reason_.rfind("policy:", 0) == 0;
    const websocket::close_reason reason(
        policy ? websocket::close_code::policy_error : websocket::close_code::normal,
        CloseReasonText(close_reason_));
    ws_.async_close(reason, [self = this->shared_from_this()](const ErrorCode&) {
      // With a read pending, that read ends with the peer's answer; without one (never
      // started), the close operation read it itself.
      if (!self->reading_) self->Finish(self->close_reason_);
    });
  }

  std::string ReasonFor(const ErrorCode& ec) const {
    if (close_requested_) return close_reason_;
    // A close frame from the peer says more than what went wrong after it (e.g. the peer
    // closing before our close reply was written).
    if (ec == websocket::error::closed || ws_.reason().code != websocket::close_code::none) {
      const auto& r = ws_.reason();
      return StrCat("closed by the peer (code ", static_cast<int>(r.code),
                    r.reason.empty() ? "" : ": " + std::string(r.reason.data(), r.reason.size()),
                    ")");
    }
    if (ec == websocket::error::message_too_big) {
      return StrCat("message too big (limit ", options_.max_message_bytes, " bytes)");
    }
    if (ec == beast::error::timeout) return "timeout: the peer stopped answering";
    if (ec == asio::error::eof) return "connection closed by the peer without a close frame";
    return "connection error: " + ec.message() + " [" + ec.category().name() + "]";
  }

  // The end, whatever caused it: closes the socket (ending any pending operation) and runs
  // OnClose once.
  void Finish(std::string reason) {
    if (finished_) return;
    auto self = this->shared_from_this();
    finished_ = true;
    open_ = false;
    if (registry_) registry_->Remove(id_);
    ErrorCode ec;
    beast::get_lowest_layer(ws_).close(ec);
    queue_.clear();
    queued_ = 0;
    on_message_ = nullptr;
    auto on_close = std::move(on_close_);
    on_close_ = nullptr;
    if (on_close) on_close(reason);
  }

  const std::shared_ptr<ssl::context> context_;  // outlives ws_
  WsStream ws_;
  const internal::WsOptions options_;
  const std::string remote_;
  std::shared_ptr<internal::Registry> registry_;
  uint64_t id_ = 0;
  internal::UpgradeRequest upgrade_request_;  // until the accept completes
  websocket::response_type response_;         // client side: the handshake's answer
  beast::flat_buffer buffer_;                 // one message being read
  std::deque<std::string> queue_;             // front: being written
  int64_t queued_ = 0;
  std::string close_reason_;
  std::function<void(std::string_view)> on_message_;
  std::function<void(std::string_view)> on_close_;
  bool open_ = false;
  bool started_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool close_requested_ = false;
  bool close_started_ = false;
  bool finished_ = false;
};

using PlainWs = websocket::stream<tcp::socket>;
using TlsWs = websocket::stream<internal::TlsStream>;

}  // namespace

namespace internal {

void AcceptWebSocket(std::unique_ptr<Transport> transport, UpgradeRequest request,
                     WsOptions options, std::shared_ptr<Registry> registry,
                     std::function<void(std::shared_ptr<WebSocket>)> open) {
  std::string remote = RemoteString(transport->socket());
  ReleasedStream stream = ReleaseStream(std::move(transport));
  if (stream.tls) {
    auto ws = std::make_shared<WsImpl<TlsWs>>(std::move(*stream.tls), std::move(stream.context),
                                              options, std::move(remote));
    ws->Accept(std::move(request), std::move(registry), std::move(open));
  } else {
    auto ws = std::make_shared<WsImpl<PlainWs>>(std::move(*stream.plain), nullptr, options,
                                                std::move(remote));
    ws->Accept(std::move(request), std::move(registry), std::move(open));
  }
}

}  // namespace internal

void DialWebSocket(asio::io_context& io, const Url& url, std::shared_ptr<ssl::context> tls,
                   std::vector<std::pair<std::string, std::string>> headers, double timeout_s,
                   int64_t max_message_bytes, DialDone done, double ping_interval_s) {
  const auto fail = [&](Status status) {
    asio::post(io, [done = std::move(done), status = std::move(status)] { done(status); });
  };
  if (!url.websocket()) {
    fail(InvalidArgumentError("websocket: '", url.ToString(), "' is not a ws:// or wss:// URL"));
    return;
  }
  if (url.tls() && !tls) {
    fail(InvalidArgumentError("websocket ", url.ToString(), ": wss needs a TLS context"));
    return;
  }
  for (const auto& header : headers) {
    if (!ValidHeader(header)) {
      fail(InvalidArgumentError("websocket ", url.ToString(), ": invalid header '", header.first,
                                "'"));
      return;
    }
  }
  internal::WsOptions options;
  options.max_message_bytes = max_message_bytes;
  options.ping_interval_s = ping_interval_s;
  const double deadline = base::NowSeconds() + timeout_s;
  internal::Connect(
      io, url.host, url.port, url.tls() ? std::move(tls) : nullptr, timeout_s,
      [url, headers = std::move(headers), timeout_s, deadline, options,
       done = std::move(done)](StatusOr<std::unique_ptr<internal::Transport>> connected) mutable {
        if (!connected.ok()) {
          done(connected.status().WithContext("websocket " + url.ToString()));
          return;
        }
        // What is left of the time limit, for the WebSocket handshake.
        const double left =
            timeout_s > 0 ? std::max(deadline - base::NowSeconds(), 0.001) : 0.0;
        std::unique_ptr<internal::Transport> transport = std::move(connected).value();
        std::string remote = internal::RemoteString(transport->socket());
        internal::ReleasedStream stream = internal::ReleaseStream(std::move(transport));
        if (stream.tls) {
          auto ws = std::make_shared<WsImpl<TlsWs>>(
              std::move(*stream.tls), std::move(stream.context), options, std::move(remote));
          ws->Handshake(url, std::move(headers), left, std::move(done));
        } else {
          auto ws = std::make_shared<WsImpl<PlainWs>>(std::move(*stream.plain), nullptr, options,
                                                      std::move(remote));
          ws->Handshake(url, std::move(headers), left, std::move(done));
        }
      });
}

}  // namespace loom::net
