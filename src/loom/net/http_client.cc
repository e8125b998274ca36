#include "loom/net/http_client.h"

#include <cctype>
#include <cstring>
#include <optional>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include "loom/base/clock.h"
#include "loom/net/tls.h"
#include "loom/net/transport.h"

namespace loom::net {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using internal::ErrorCode;
using internal::Seconds;
using HeaderList = std::vector<std::pair<std::string, std::string>>;

namespace {

constexpr size_t kReadChunk = 16 << 10;
constexpr uint32_t kMaxResponseHead = 64 << 10;
constexpr size_t kMaxFetchBody = size_t{256} << 20;

// A response parser that hands body bytes over as they are parsed (chunked, Content-Length or
// until the connection closes), without keeping the whole body.
class ResponseParser final : public http::basic_parser<false> {
 public:
  int status = 0;
  HeaderList headers;
  std::string body;  // parsed and not yet handed over

 private:
  void on_request_impl(http::verb, boost::beast::string_view, boost::beast::string_view, int,
                       ErrorCode&) override {}
  void on_response_impl(int code, boost::beast::string_view, int, ErrorCode&) override { status = code; }
  void on_field_impl(http::field, boost::beast::string_view name, boost::beast::string_view value,
                     ErrorCode&) override {
    std::string lower(name);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    headers.emplace_back(std::move(lower), std::string(value));
  }
  void on_header_impl(ErrorCode&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, ErrorCode&) override {}
  size_t on_body_impl(boost::beast::string_view data, ErrorCode&) override {
    body.append(data);
    return data.size();
  }
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, ErrorCode&) override {}
  size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view data, ErrorCode&) override {
    body.append(data);
    return data.size();
  }
  void on_finish_impl(ErrorCode&) override {}
};

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || std::string_view("()<>@,;:\\\"/[]?={}").find(c) !=
                                      std::string_view::npos) {
      return false;
    }
  }
  return true;
}

bool IsFieldValue(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

class CallImpl final : public ClientCall, public std::enable_shared_from_this<CallImpl> {
 public:
  using HeadFn = std::function<void(int, const HeaderList&)>;

  CallImpl(asio::io_context& io, ClientRequest request, std::shared_ptr<asio::ssl::context> tls,
           HeadFn on_head, std::function<void(std::string_view)> on_data,
           std::function<void(Status)> on_done)
      : io_(io),
        request_(std::move(request)),
        tls_(std::move(tls)),
        on_head_(std::move(on_head)),
        on_data_(std::move(on_data)),
        on_done_(std::move(on_done)),
        timer_(io),
        read_buffer_(kReadChunk),
        where_(request_.method + " " + request_.url.ToString()) {}

  void Start() {
    if (Status status = Validate(); !status.ok()) {
      asio::post(io_, [self = shared_from_this(), status] { self->Finish(status); });
      return;
    }
    NewParser();
    deadline_ = base::NowSeconds() + request_.timeout_s;
    connector_ = internal::Connect(
        io_, request_.url.host, request_.url.port, request_.url.tls() ? tls_ : nullptr,
        request_.timeout_s,
        [self = shared_from_this()](StatusOr<std::unique_ptr<internal::Transport>> connected) {
          self->OnConnected(std::move(connected));
        });
  }

  void Cancel() override {
    if (done_ || cancelled_) return;
    cancelled_ = true;
    if (connector_) connector_->Cancel();
    if (transport_) transport_->Close();
    timer_.cancel();
    asio::post(io_, [self = shared_from_this()] { self->Interrupted(); });
  }

 private:
  Status Validate() const {
    const Url& url = request_.url;
    if (url.scheme != "http" && url.scheme != "https") {
      return InvalidArgumentError(where_, ": only http:// and https:// URLs");
    }
    if (url.tls() && !tls_) return InvalidArgumentError(where_, ": https needs a TLS context");
    if (!IsToken(request_.method)) return InvalidArgumentError(where_, ": invalid method");
    for (const auto& [name, value] : request_.headers) {
      if (!IsToken(name) || !IsFieldValue(value)) {
        return InvalidArgumentError(where_, ": invalid header '", name, "'");
      }
    }
    return OkStatus();
  }

  void NewParser() {
    parser_.emplace();
    parser_->eager(true);
    parser_->header_limit(kMaxResponseHead);
    parser_->body_limit(boost::none);
    if (request_.method == "HEAD") parser_->skip(true);
  }

  std::string Serialize() const {
    const Url& url = request_.url;
    const int default_port = url.tls() ? 443 : 80;
    std::string host = url.HostPort();
    if (url.port == default_port) host.resize(host.rfind(':'));
    std::string out = StrCat(request_.method, " ", url.target, " HTTP/1.1\r\nHost: ", host, "\r\n");
    bool user_agent = false;
    for (const auto& [name, value] : request_.headers) {
      using boost::beast::iequals;
      if (iequals(name, "host") || iequals(name, "content-length") ||
          iequals(name, "connection") || iequals(name, "transfer-encoding")) {
        continue;
      }
      user_agent = user_agent || iequals(name, "user-agent");
      out.append(name).append(": ").append(value).append("\r\n");
    }
    if (!user_agent) out += "User-Agent: loom\r\n";
    const std::string& m = request_.method;
    if (!request_.body.empty() || m == "POST" || m == "PUT" || m == "PATCH") {
      out += StrCat("Content-Length: ", request_.body.size(), "\r\n");
    }
    out += "Connection: close\r\n\r\n";
    out += request_.body;
    return out;
  }

  void OnConnected(StatusOr<std::unique_ptr<internal::Transport>> connected) {
    connector_.reset();
    if (done_) return;
    if (!connected.ok()) {
      if (!Interrupted()) Finish(connected.status().WithContext(where_));
      return;
    }
    transport_ = std::move(connected).value();
    if (Interrupted()) return;
    Arm(request_.timeout_s > 0 ? std::max(deadline_ - base::NowSeconds(), 0.001) : 0);
    stage_ = "write request";
    out_ = Serialize();
    transport_->AsyncWrite({asio::buffer(out_)},
                           [self = shared_from_this()](const ErrorCode& ec, size_t) {
                             if (self->Interrupted()) return;
                             if (ec) {
                               self->Fail(ec);
                               return;
                             }
                             self->out_.clear();
                             self->stage_ = "read response head";
                             self->ReadMore();
                           });
  }

  void ReadMore() {
    transport_->AsyncReadSome(
        asio::buffer(read_buffer_),
        [self = shared_from_this()](const ErrorCode& ec, size_t n) { self->OnRead(ec, n); });
  }

  void OnRead(const ErrorCode& ec, size_t n) {
    if (Interrupted()) return;
    if (ec) {
      const bool eof = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
      if (eof && head_seen_ && !parser_->is_done()) {
        ErrorCode eof_ec;
        parser_->put_eof(eof_ec);  // a body that ends with the connection
        if (!eof_ec) {
          Deliver();
          if (!Interrupted()) Finish(OkStatus());
          return;
        }
      }
      Fail(ec);
      return;
    }
    auto space = in_.prepare(n);
    std::memcpy(space.data(), read_buffer_.data(), n);
    in_.commit(n);
    while (in_.size() > 0 && !parser_->is_done()) {
      ErrorCode parse_ec;
      const size_t used = parser_->put(in_.data(), parse_ec);
      in_.consume(used);
      if (parse_ec && parse_ec != http::error::need_more) {
        Finish(DataLossError(where_, ": ", stage_, ": malformed response: ", parse_ec.message()));
        return;
      }
      // The head may complete in a put that then asks for more body (eager parsing of a
      // streamed response): announce it before waiting for the rest.
      if (parser_->is_header_done() && !head_seen_) {
        const int status = parser_->status;
        if (status >= 100 && status < 200 && status != 101 && parser_->is_done()) {
          NewParser();  // an interim answer (100 Continue): the real one follows
          continue;
        }
        head_seen_ = true;
        stage_ = "read response body";
        Arm(request_.idle_timeout_s);
        if (on_head_) on_head_(status, parser_->headers);
        if (Interrupted()) return;
      }
      if (parse_ec == http::error::need_more || used == 0) break;
    }
    Deliver();
    if (Interrupted()) return;
    if (head_seen_ && parser_->is_done()) {
      Finish(OkStatus());
      return;
    }
    if (head_seen_) Arm(request_.idle_timeout_s);
    ReadMore();
  }

  void Deliver() {
    if (parser_->body.empty()) return;
    std::string piece;
    piece.swap(parser_->body);
    if (on_data_) on_data_(piece);
  }

  void Arm(double seconds) {
    ++timer_generation_;
    if (seconds <= 0) {
      timer_.cancel();
      return;
    }
    timeout_in_use_ = seconds;
    timer_.expires_after(Seconds(seconds));
    timer_.async_wait([self = shared_from_this(), generation = timer_generation_](
                          const ErrorCode& ec) {
      if (ec || generation != self->timer_generation_ || self->done_) return;
      self->timed_out_ = true;
      if (self->transport_) self->transport_->Close();
    });
  }

  // Reports a Cancel() or a timeout once they happened; true when the call is over.
  bool Interrupted() {
    if (done_) return true;
    if (cancelled_) {
      Finish(CancelledError(where_, ": cancelled"));
      return true;
    }
    if (timed_out_) {
      Finish(DeadlineExceededError(where_, ": timed out after ", timeout_in_use_, " s (",
                                   stage_, ")"));
      return true;
    }
    return false;
  }

  void Fail(const ErrorCode& ec) {
    const bool eof = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
    Finish(UnavailableError(where_, ": ", stage_, ": ",
                            eof ? "connection closed by the server" : ec.message()));
  }

  void Finish(Status status) {
    if (done_) return;
    done_ = true;
    ++timer_generation_;
    timer_.cancel();
    if (transport_) transport_->Close();
    if (connector_) connector_->Cancel();
    auto on_done = std::move(on_done_);
    on_head_ = nullptr;
    on_data_ = nullptr;
    on_done_ = nullptr;
    if (on_done) on_done(std::move(status));
  }

  asio::io_context& io_;
  const ClientRequest request_;
  const std::shared_ptr<asio::ssl::context> tls_;
  HeadFn on_head_;
  std::function<void(std::string_view)> on_data_;
  std::function<void(Status)> on_done_;
  std::shared_ptr<internal::Connector> connector_;
  std::unique_ptr<internal::Transport> transport_;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  double timeout_in_use_ = 0;
  double deadline_ = 0;
  std::optional<ResponseParser> parser_;
  std::vector<char> read_buffer_;  // (kReadChunk)
  boost::beast::flat_buffer in_;   // read, not parsed yet
  std::string out_;                // the request while it is written
  const std::string where_;        // "GET http://host:port/path"
  const char* stage_ = "connect";
  bool head_seen_ = false;
  bool cancelled_ = false;
  bool timed_out_ = false;
  bool done_ = false;
};

}  // namespace

std::shared_ptr<ClientCall> StartRequest(
    asio::io_context& io, ClientRequest request, std::shared_ptr<asio::ssl::context> tls,
    std::function<void(int, const HeaderList&)> on_head,
    std::function<void(std::string_view)> on_data, std::function<void(Status)> on_done) {
  auto call = std::make_shared<CallImpl>(io, std::move(request), std::move(tls),
                                         std::move(on_head), std::move(on_data),
                                         std::move(on_done));
  call->Start();
  return call;
}

StatusOr<ClientResponse> Fetch(const ClientRequest& request,
                               std::shared_ptr<asio::ssl::context> tls) {
  if (request.url.tls() && !tls) {
    LOOM_ASSIGN_OR_RETURN(tls, MakeClientTls(""));
  }
  ClientRequest r = request;
  if (r.idle_timeout_s <= 0) r.idle_timeout_s = r.timeout_s;
  asio::io_context io;
  ClientResponse response;
  Status result = InternalError("fetch: no result");
  bool too_big = false;
  std::shared_ptr<ClientCall> call;
  call = StartRequest(
      io, std::move(r), std::move(tls),
      [&](int status, const HeaderList& headers) {
        response.status = status;
        response.headers = headers;
      },
      [&](std::string_view data) {
        if (response.body.size() + data.size() > kMaxFetchBody) {
          too_big = true;
          call->Cancel();
          return;
        }
        response.body.append(data);
      },
      [&](Status status) { result = std::move(status); });
  io.run();
  if (too_big) {
    return ResourceExhaustedError(request.method, " ", request.url.ToString(),
                                  ": response body over ", kMaxFetchBody, " bytes");
  }
  if (!result.ok()) return result;
  return response;
}

}  // namespace loom::net
