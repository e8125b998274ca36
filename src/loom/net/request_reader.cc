#include "loom/net/request_reader.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

namespace loom::net {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using ErrorCode = boost::system::error_code;

std::string_view Request::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

namespace internal {

struct RequestReader::Impl {
  explicit Impl(ReaderLimits l) : limits(l) { Fresh(); }

  void Fresh() {
    parser.emplace();
    const int64_t header_limit =
        std::clamp<int64_t>(limits.max_header_bytes, 64, std::numeric_limits<uint32_t>::max());
    parser->header_limit(static_cast<uint32_t>(header_limit));
    parser->body_limit(static_cast<uint64_t>(std::max<int64_t>(limits.max_body_bytes, 0)));
    parser->eager(false);  // stop after the head so that it can be checked first
    state = State::kNeedMore;
    header_reported = false;
    status = 0;
    message.clear();
  }

  void SetError(int code, std::string why) {
    state = State::kError;
    status = code;
    message = std::move(why);
  }

  void SetParseError(const ErrorCode& ec) {
    if (ec == http::error::header_limit) {
      SetError(431, StrCat("request head too large (limit ", limits.max_header_bytes, " bytes)"));
    } else if (ec == http::error::body_limit) {
      SetError(413, StrCat("request body too large (limit ", limits.max_body_bytes, " bytes)"));
    } else {
      SetError(400, "malformed request: " + ec.message());
    }
  }

  // What Beast accepts but this server does not.
  bool CheckHeader() {
    const auto& req = parser->get();
    if (req.version() != 10 && req.version() != 11) {
      SetError(400, req.version() >= 20 ? "HTTP/2 is not supported here; use HTTP/1.1"
                                        : "unsupported HTTP version");
      return false;
    }
    const std::string_view target = req.target();
    if (target.empty() || target.front() != '/') {
      SetError(400, "the request target must be a path starting with '/'");
      return false;
    }
    if (req.count(http::field::transfer_encoding) != 0 && !parser->chunked()) {
      SetError(400, "unsupported transfer-encoding (only chunked is accepted)");
      return false;
    }
    return true;
  }

  ReaderLimits limits;
  std::optional<http::request_parser<http::string_body>> parser;
  State state = State::kNeedMore;
  bool header_reported = false;
  int status = 0;
  std::string message;
};

RequestReader::RequestReader(ReaderLimits limits) : impl_(std::make_unique<Impl>(limits)) {}
RequestReader::~RequestReader() = default;

size_t RequestReader::Feed(std::string_view data) {
  Impl& m = *impl_;
  if (m.state == State::kError || m.state == State::kComplete) return 0;
  size_t used = 0;
  for (;;) {
    if (m.parser->is_done()) {
      m.state = State::kComplete;
      return used;
    }
    if (used == data.size()) {
      m.state = State::kNeedMore;
      return used;
    }
    ErrorCode ec;
    const size_t n = m.parser->put(asio::buffer(data.data() + used, data.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      // Beast bounds the head but not a chunk header (size and extensions) or the trailer,
      // which it only parses once whole: bound what waits unconsumed here.
      if (m.header_reported &&
          static_cast<int64_t>(data.size() - used) > m.limits.max_header_bytes) {
        m.SetError(400, StrCat("chunk header or trailer too long (limit ",
                               m.limits.max_header_bytes, " bytes)"));
        return used;
      }
      m.state = State::kNeedMore;
      return used;
    }
    if (ec) {
      m.SetParseError(ec);
      return used;
    }
    if (m.parser->is_header_done() && !m.header_reported) {
      m.header_reported = true;
      if (!m.CheckHeader()) return used;
      m.parser->eager(true);
      m.state = State::kHeader;
      return used;
    }
    if (n == 0) {  // no progress and no error: wait for more rather than spin
      m.state = State::kNeedMore;
      return used;
    }
  }
}

RequestReader::State RequestReader::state() const { return impl_->state; }
int RequestReader::error_status() const { return impl_->status; }
const std::string& RequestReader::error_message() const { return impl_->message; }

bool RequestReader::keep_alive() const { return impl_->parser->keep_alive(); }

bool RequestReader::expects_continue() const {
  const auto& req = impl_->parser->get();
  return req.version() == 11 && !impl_->parser->is_done() &&
         boost::beast::iequals(req[http::field::expect], "100-continue");
}

bool RequestReader::websocket_upgrade() const {
  return boost::beast::websocket::is_upgrade(impl_->parser->get());
}

Request RequestReader::TakeRequest(std::string remote, double received_at) {
  auto& msg = impl_->parser->get();
  Request r;
  r.method = std::string(msg.method_string());
  r.target = std::string(msg.target());
  const size_t q = r.target.find('?');
  r.path = r.target.substr(0, q);
  if (q != std::string::npos) r.query = r.target.substr(q + 1);
  for (const auto& field : msg) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  r.body = std::move(msg.body());
  r.remote = std::move(remote);
  r.received_at = received_at;
  r.version = static_cast<int>(msg.version());
  return r;
}

HttpRequestMessage RequestReader::ReleaseMessage() { return impl_->parser->release(); }

void RequestReader::Reset() { impl_->Fresh(); }

}  // namespace internal

}  // namespace loom::net
