#include "loom/fetch/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "loom/base/clock.h"

namespace loom::fetch {

namespace {

constexpr int64_t kMaxHeaderLine = 16 * 1024;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// A parsed URL (RAII over CURLU).
class Url {
 public:
  Url() : h_(curl_url()) {}
  Url(const Url&) = delete;
  Url& operator=(const Url&) = delete;
  ~Url() {
    if (h_ != nullptr) curl_url_cleanup(h_);
  }
  bool Set(const std::string& url) {
    return h_ != nullptr && curl_url_set(h_, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK;
  }
  std::string Get(CURLUPart part, unsigned flags = 0) const {
    char* out = nullptr;
    if (h_ == nullptr || curl_url_get(h_, part, &out, flags) != CURLUE_OK) return {};
    std::string s(out);
    curl_free(out);
    return s;
  }

 private:
  CURLU* h_;
};

// A list of extra request headers (RAII over curl_slist).
class HeaderList {
 public:
  HeaderList() = default;
  HeaderList(const HeaderList&) = delete;
  HeaderList& operator=(const HeaderList&) = delete;
  ~HeaderList() {
    if (list_ != nullptr) curl_slist_free_all(list_);
  }
  void Add(const std::string& line) { list_ = curl_slist_append(list_, line.c_str()); }
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

// State of one hop, shared with libcurl's callbacks.
struct Transfer {
  CURL* curl = nullptr;
  HttpHead head;
  BodySink* sink = nullptr;  // null: keep the body in `body`
  int64_t max_body = 0;
  bool sink_started = false;
  bool body_too_long = false;
  Status sink_status;
  std::string body;
  int64_t body_bytes = 0;
  // Stall detection: the transfer fails when nothing arrives for `stall_seconds`.
  double stall_seconds = 60;
  double last_progress = 0;    // seconds (base::NowSeconds) when a byte last arrived
  curl_off_t last_dlnow = -1;  // bytes received as of `last_progress`
  bool stalled = false;

  bool IsSuccess() const { return head.status >= 200 && head.status < 300; }
  bool IsRedirect() const {
    return head.status == 301 || head.status == 302 || head.status == 303 || head.status == 307 ||
           head.status == 308;
  }
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (static_cast<int64_t>(n) > kMaxHeaderLine) return 0;
  const std::string_view line = Trim(std::string_view(data, n));
  if (line.rfind("HTTP/", 0) == 0) {
    // A new status line (an interim 1xx response may come first): start over.
    t->head.headers.clear();
    t->head.status = 0;
    const size_t sp = line.find(' ');
    if (sp != std::string_view::npos) {
      int status = 0;
      for (size_t i = sp + 1; i < line.size() && i < sp + 4; ++i) {
        if (line[i] < '0' || line[i] > '9') return 0;
        status = status * 10 + (line[i] - '0');
      }
      t->head.status = status;
    }
    return n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos && colon > 0) {
    t->head.headers.emplace_back(Lower(Trim(line.substr(0, colon))),
                                 std::string(Trim(line.substr(colon + 1))));
  }
  return n;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  t->body_bytes += static_cast<int64_t>(n);
  if (t->IsRedirect()) return n;  // a redirect's body is not wanted
  if (t->sink != nullptr && t->IsSuccess()) {
    if (!t->sink_started) {
      t->sink_started = true;
      t->sink_status = t->sink->Begin(t->head);
      if (!t->sink_status.ok()) return 0;
    }
    t->sink_status = t->sink->Write({reinterpret_cast<const std::byte*>(data), n});
    return t->sink_status.ok() ? n : 0;
  }
  if (static_cast<int64_t>(t->body.size() + n) > t->max_body) {
    t->body_too_long = true;
    return 0;
  }
  t->body.append(data, n);
  return n;
}

int OnProgress(void* user, curl_off_t /*dltotal*/, curl_off_t dlnow, curl_off_t /*ultotal*/,
               curl_off_t /*ulnow*/) {
  auto* t = static_cast<Transfer*>(user);
  const double now = base::NowSeconds();
  if (dlnow != t->last_dlnow) {
    t->last_dlnow = dlnow;
    t->last_progress = now;
    return 0;
  }
  if (now - t->last_progress > t->stall_seconds) {
    t->stalled = true;
    return 1;  // aborts the transfer
  }
  return 0;
}

// A URL for messages: without its query, which for a CDN holds a long signature.
std::string WithoutQuery(const std::string& url) { return url.substr(0, url.find('?')); }

bool IsTransportBreak(CURLcode code) {
  return code == CURLE_PARTIAL_FILE || code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR ||
         code == CURLE_GOT_NOTHING || code == CURLE_HTTP2 || code == CURLE_HTTP2_STREAM;
}

}  // namespace

struct HttpClient::Handle {
  CURL* curl = nullptr;
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

std::string HttpHead::Header(std::string_view lower_name) const {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it) {
    if (it->first == lower_name) return it->second;
  }
  return {};
}

std::string UrlOrigin(const std::string& url) {
  Url u;
  if (!u.Set(url)) return {};
  const std::string scheme = Lower(u.Get(CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https") return {};
  return scheme + "://" + Lower(u.Get(CURLUPART_HOST)) + ":" +
         u.Get(CURLUPART_PORT, CURLU_DEFAULT_PORT);
}

std::string UrlEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

HttpClient::HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;
HttpClient::~HttpClient() = default;

StatusOr<HttpClient> HttpClient::Create(const HttpOptions& options) {
  HttpClient client;
  client.options_ = options;
  client.handle_ = std::make_unique<Handle>();
  client.handle_->curl = curl_easy_init();
  if (client.handle_->curl == nullptr) return InternalError("http: curl_easy_init failed");
  return client;
}

StatusOr<HttpResult> HttpClient::Get(const HttpRequest& request, BodySink* sink, int64_t max_body) {
  if (handle_ == nullptr || handle_->curl == nullptr) {
    return FailedPreconditionError("http: client used after move");
  }
  CURL* curl = handle_->curl;
  const std::string auth_origin = UrlOrigin(request.url);
  if (auth_origin.empty()) return InvalidArgumentError("http: not an http(s) URL: ", request.url);
  HttpResult result;
  std::string url = request.url;
  for (int hop = 0;; ++hop) {
    if (hop > options_.max_redirects) {
      return UnavailableError("GET ", request.url, ": more than ", options_.max_redirects,
                              " redirects");
    }
    curl_easy_reset(curl);
    Transfer t;
    t.curl = curl;
    t.sink = sink;
    t.max_body = max_body;
    t.head.url = url;
    char error_text[CURL_ERROR_SIZE] = {};
    HeaderList headers;
    const std::string origin = UrlOrigin(url);
    if (!request.bearer_token.empty() && origin == auth_origin) {
      headers.Add("Authorization: Bearer " + request.bearer_token);
    }
    const std::string range =
        request.range_start >= 0 ? std::to_string(request.range_start) + "-" : std::string();
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, options_.user_agent.c_str());
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::max<int64_t>(1, options_.connect_timeout_ms)));
    // libcurl calls OnProgress about once a second even when nothing arrives.
    t.stall_seconds = static_cast<double>(std::max<int64_t>(1, options_.stall_timeout_ms)) / 1000;
    t.last_progress = base::NowSeconds();
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
    if (!range.empty()) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_text);
    const CURLcode code = curl_easy_perform(curl);
    if (!t.sink_status.ok()) return t.sink_status;
    if (t.body_too_long) {
      return ResourceExhaustedError("GET ", WithoutQuery(url), ": HTTP ", t.head.status,
                                    " body exceeds ", max_body, " bytes");
    }
    if (code != CURLE_OK) {
      const std::string shown = WithoutQuery(url);
      const std::string detail = error_text[0] != '\0' ? error_text : curl_easy_strerror(code);
      if (code == CURLE_COULDNT_RESOLVE_HOST || code == CURLE_COULDNT_RESOLVE_PROXY ||
          code == CURLE_COULDNT_CONNECT) {
        return UnavailableError("GET ", shown, ": cannot connect (", detail, ")");
      }
      if (t.stalled) {
        return DeadlineExceededError("GET ", shown, ": nothing received for ", t.stall_seconds,
                                     " s after ", t.body_bytes, " body bytes");
      }
      if (code == CURLE_OPERATION_TIMEDOUT) {
        return DeadlineExceededError("GET ", shown, ": timed out after ", t.body_bytes,
                                     " body bytes (", detail, ")");
      }
      if (IsTransportBreak(code)) {
        return UnavailableError("GET ", shown, ": connection broke after ", t.body_bytes,
                                " body bytes (", detail, ")");
      }
      return UnavailableError("GET ", shown, ": ", detail);
    }
    if (t.sink != nullptr && t.IsSuccess() && !t.sink_started) {
      // An empty body: the sink still learns the response.
      LOOM_RETURN_IF_ERROR(t.sink->Begin(t.head));
    }
    const bool redirect = t.IsRedirect();
    const std::string location = t.head.Header("location");
    result.body_bytes = t.body_bytes;
    result.body = std::move(t.body);
    result.hops.push_back(std::move(t.head));
    if (!redirect || location.empty()) return result;
    // Resolve the (possibly relative) Location against the current URL.
    Url next;
    if (!next.Set(url) || !next.Set(location)) {
      return DataLossError("GET ", url, ": unusable redirect Location '", location.substr(0, 200),
                           "'");
    }
    std::string next_url = next.Get(CURLUPART_URL);
    const std::string next_origin = UrlOrigin(next_url);
    if (next_origin.empty()) {
      return DataLossError("GET ", url, ": redirect to a non-http(s) URL '",
                           location.substr(0, 200), "'");
    }
    if (origin.rfind("https:", 0) == 0 && next_origin.rfind("http:", 0) == 0) {
      return PermissionDeniedError("GET ", url, ": refusing a redirect from https to plain http (",
                                   next_url.substr(0, 200), ")");
    }
    url = std::move(next_url);
  }
}

}  // namespace loom::fetch
