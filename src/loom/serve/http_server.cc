#include "loom/serve/http_server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <thread>
#include <unordered_map>

#include "loom/base/clock.h"
#include "loom/comm/tcp/socket.h"

namespace loom::serve {

using comm::tcp::Fd;

// What exchanges share with the loop: the ready list and the eventfd that wakes the loop.
class LoopShared {
 public:
  explicit LoopShared(Fd event_fd) : event_fd_(std::move(event_fd)) {}

  void Ready(std::weak_ptr<Exchange> exchange) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(exchange));
    }
    Signal();
  }
  void Signal() {
    if (!signaled_.exchange(true, std::memory_order_acq_rel)) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
    }
  }
  // Loop thread: clears the signal and swaps the ready list into `out`.
  void Drain(std::vector<std::weak_ptr<Exchange>>* out) {
    uint64_t value = 0;
    [[maybe_unused]] ssize_t n = ::read(event_fd_.get(), &value, sizeof(value));
    signaled_.store(false, std::memory_order_release);
    std::lock_guard<std::mutex> lock(mu_);
    out->swap(ready_);
  }
  int event_fd() const { return event_fd_.get(); }
  bool OnLoopThread() const { return std::this_thread::get_id() == loop_thread_; }
  void SetLoopThread(std::thread::id id) { loop_thread_ = id; }
  std::atomic<bool> stopping{false};

 private:
  Fd event_fd_;
  std::atomic<bool> signaled_{false};
  std::mutex mu_;
  std::vector<std::weak_ptr<Exchange>> ready_;
  std::thread::id loop_thread_;
};

// ---------------------------------------------------------------------------------------------
// Exchange

Exchange::Exchange(std::shared_ptr<LoopShared> loop, uint64_t connection, HttpRequest request,
                   double received_at)
    : loop_(std::move(loop)),
      connection_(connection),
      request_(std::move(request)),
      received_at_(received_at) {}

void Exchange::Respond(int status, std::string_view content_type, std::string_view body,
                       const std::vector<HttpHeader>& headers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kNone) return;
    state_ = State::kDone;
    status_ = status;
    if (closed()) return;
    const bool keep_alive = request_.keep_alive && !loop_->stopping.load();
    out_ +=
        ResponseHead(status, content_type, headers, static_cast<int64_t>(body.size()), keep_alive);
    if (request_.method != "HEAD") out_ += body;
  }
  Posted();
}

void Exchange::BeginStream(int status, std::string_view content_type,
                           const std::vector<HttpHeader>& headers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kNone) return;
    state_ = State::kStreaming;
    status_ = status;
    if (closed()) return;
    const bool keep_alive = request_.keep_alive && !loop_->stopping.load();
    out_ += ResponseHead(status, content_type, headers, -1, keep_alive);
  }
  Posted();
}

void Exchange::Send(std::string_view data) {
  if (data.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kStreaming || closed()) return;
    AppendChunk(data, &out_);
  }
  Posted();
}

void Exchange::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kStreaming) return;
    state_ = State::kDone;
    if (closed()) return;
    out_ += kLastChunk;
  }
  Posted();
}

int Exchange::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Exchange::SetRoute(std::string_view route) {
  std::lock_guard<std::mutex> lock(mu_);
  route_ = std::string(route);
}

std::string Exchange::route() const {
  std::lock_guard<std::mutex> lock(mu_);
  return route_;
}

void Exchange::SetPump(std::function<void(Exchange&)> pump) { pump_ = std::move(pump); }

void Exchange::Wake() {
  if (!queued_.exchange(true, std::memory_order_acq_rel)) loop_->Ready(weak_from_this());
}

void Exchange::Posted() {
  // Output added by a pump on the loop thread is collected right after the pump returns.
  if (loop_->OnLoopThread()) return;
  Wake();
}

void Exchange::SetOnClose(std::function<void()> on_close) {
  bool run_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed()) {
      on_close_ = std::move(on_close);
      return;
    }
    run_now = state_ != State::kDone;
  }
  if (run_now && on_close) on_close();
}

bool Exchange::TakeOutput(std::string* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->append(out_);
  out_.clear();
  return state_ == State::kDone;
}

void Exchange::MarkClosed() {
  std::function<void()> on_close;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_.store(true, std::memory_order_release);
    on_close.swap(on_close_);
    out_.clear();
  }
  if (on_close) on_close();
}

void Exchange::RunPump() {
  if (pump_ && !closed()) pump_(*this);
}

void Exchange::ReleaseCallbacks() {
  pump_ = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  on_close_ = nullptr;
}

// ---------------------------------------------------------------------------------------------
// The loop

namespace {

constexpr uint64_t kListenId = 0;
constexpr uint64_t kEventId = 1;
constexpr size_t kReadChunk = 64 << 10;

enum class Phase { kHead, kBody, kHandling, kClosing };

struct Connection {
  Fd fd;
  uint64_t id = 0;
  Phase phase = Phase::kHead;
  bool idle = true;     // kHead: no byte of the next request yet
  double deadline = 0;  // for the current phase
  std::string in;       // received, not yet consumed
  std::string out;      // to send, from out_off
  size_t out_off = 0;
  double last_progress = 0;  // last time output moved (or was first queued)
  bool want_write = false;   // EPOLLOUT registered
  bool close_after_write = false;
  HttpRequest request;                 // kBody: the parsed head
  std::shared_ptr<Exchange> exchange;  // kHandling
};

std::string ErrorJson(int status, std::string_view message) {
  // The transport's own errors, shaped like the API's ({"error": {...}}).
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
  return std::string("{\"error\":{\"message\":\"") + escaped + "\",\"type\":\"" + type +
         "\",\"param\":null,\"code\":\"" + code + "\"}}";
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(const HttpServerOptions& options, Handler handler, FinishObserver on_finish, Fd listen_fd,
       Fd epoll_fd, std::shared_ptr<LoopShared> shared)
      : options_(options),
        handler_(std::move(handler)),
        on_finish_(std::move(on_finish)),
        listen_fd_(std::move(listen_fd)),
        epoll_fd_(std::move(epoll_fd)),
        shared_(std::move(shared)) {}

  void Start() {
    loop_ = std::thread([this] { Loop(); });
    for (int i = 0; i < std::max(1, options_.handler_threads); ++i) {
      handlers_.emplace_back([this] { HandlerLoop(); });
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(work_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    shared_->stopping.store(true);
    shared_->Signal();
    work_cv_.notify_all();
    if (loop_.joinable()) loop_.join();
    for (auto& t : handlers_) {
      if (t.joinable()) t.join();
    }
    work_.clear();
  }

  HttpServerStats Stats() const {
    HttpServerStats s;
    s.open_connections = open_.load();
    s.accepted = accepted_.load();
    s.refused = refused_.load();
    s.timed_out = timed_out_.load();
    s.bad_requests = bad_requests_.load();
    return s;
  }

 private:
  void Loop() {
    shared_->SetLoopThread(std::this_thread::get_id());
    epoll_event events[128];
    std::vector<std::weak_ptr<Exchange>> ready;
    double next_sweep = base::NowSeconds() + 0.1;
    while (!shared_->stopping.load()) {
      const int n = ::epoll_wait(epoll_fd_.get(), events, 128, 100);
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        const uint32_t ev = events[i].events;
        if (id == kListenId) {
          Accept();
        } else if (id == kEventId) {
          shared_->Drain(&ready);
          for (auto& weak : ready) {
            if (auto ex = weak.lock()) Pump(ex);
          }
          ready.clear();
        } else {
          auto it = connections_.find(id);
          if (it == connections_.end()) continue;
          Connection& c = *it->second;
          if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            if (!Read(c)) continue;
          }
          if (ev & EPOLLOUT) Flush(c);
        }
      }
      const double now = base::NowSeconds();
      if (now >= next_sweep) {
        Sweep(now);
        next_sweep = now + 0.1;
      }
    }
    // Stopping: every connection goes; pending exchanges learn it through their on-close.
    while (!connections_.empty()) Close(*connections_.begin()->second);
  }

  void Accept() {
    for (;;) {
      const int raw = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (raw < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the pending connection would wake us again at once.  Stop
          // listening for a moment (Sweep resumes) instead of spinning.
          ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
          accept_paused_until_ = base::NowSeconds() + 0.1;
        }
        return;  // EAGAIN, or a transient error: try again on the next event
      }
      Fd fd(raw);
      if (static_cast<int64_t>(connections_.size()) >= options_.max_connections) {
        const std::string body = ErrorJson(503, "too many open connections; retry later");
        const std::string reply =
            ResponseHead(503, "application/json", {{"Retry-After", "1"}},
                         static_cast<int64_t>(body.size()), /*keep_alive=*/false) +
            body;
        [[maybe_unused]] ssize_t n = ::send(fd.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
        ++refused_;
        continue;
      }
      if (!comm::tcp::ConfigureStream(fd.get()).ok()) continue;
      auto c = std::make_unique<Connection>();
      c->id = next_id_++;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = c->id;
      if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) continue;
      c->fd = std::move(fd);
      c->deadline = base::NowSeconds() + options_.read_timeout_s;
      ++accepted_;
      ++open_;
      connections_.emplace(c->id, std::move(c));
    }
  }

  // Reads what is available.  Returns false when the connection was closed.
  bool Read(Connection& c) {
    char buf[kReadChunk];
    const size_t cap =
        static_cast<size_t>(options_.limits.max_head_bytes + options_.limits.max_body_bytes) +
        kReadChunk;
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        if (c.phase == Phase::kClosing) continue;  // discarding until the client closes
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > cap) {
          Close(c);  // pipelining far past any request we accept
          return false;
        }
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      // EOF or a reset: the client is gone (a half-closed client cannot get a streamed reply it
      // will read anyway: HTTP clients never half-close while waiting).
      Close(c);
      return false;
    }
    return Advance(c);
  }

  // Parses and dispatches what `in` holds.  Returns false when the connection was closed.
  bool Advance(Connection& c) {
    for (;;) {
      if (c.phase == Phase::kHead) {
        if (c.in.empty()) return true;
        if (c.idle) {
          c.idle = false;
          c.deadline = base::NowSeconds() + options_.read_timeout_s;
        }
        const HeadParse r = ParseRequestHead(c.in, options_.limits, &c.request);
        if (r.kind == HeadParse::kIncomplete) return true;
        if (r.kind == HeadParse::kError) {
          ++bad_requests_;
          return Fail(c, r.status, r.message);
        }
        c.in.erase(0, r.head_bytes);
        c.phase = Phase::kBody;
        c.deadline = base::NowSeconds() + options_.read_timeout_s;
        if (c.request.expect_continue &&
            static_cast<int64_t>(c.in.size()) < c.request.content_length) {
          c.out += "HTTP/1.1 100 Continue\r\n\r\n";
          if (!Flush(c)) return false;
        }
      }
      if (c.phase == Phase::kBody) {
        const auto length = static_cast<size_t>(c.request.content_length);
        if (c.in.size() < length) return true;
        c.request.body = c.in.substr(0, length);
        c.in.erase(0, length);
        Dispatch(c);
        return true;
      }
      return true;  // kHandling (later bytes wait) or kClosing
    }
  }

  void Dispatch(Connection& c) {
    c.phase = Phase::kHandling;
    c.exchange =
        std::make_shared<Exchange>(shared_, c.id, std::move(c.request), base::NowSeconds());
    c.request = HttpRequest{};
    {
      std::lock_guard<std::mutex> lock(work_mu_);
      work_.push_back(c.exchange);
    }
    work_cv_.notify_one();
  }

  void HandlerLoop() {
    for (;;) {
      std::shared_ptr<Exchange> ex;
      {
        std::unique_lock<std::mutex> lock(work_mu_);
        work_cv_.wait(lock, [&] { return stopped_ || !work_.empty(); });
        if (stopped_) return;
        ex = std::move(work_.front());
        work_.pop_front();
      }
      if (ex->closed()) continue;
      try {
        handler_(ex);
      } catch (const std::exception& e) {
        // Handlers report expected failures as responses; this is a bug, not a client error.
        ex->Respond(500, "application/json",
                    ErrorJson(500, std::string("internal error: ") + e.what()));
      }
    }
  }

  // Loop thread: runs the exchange's pump and moves its output to the socket.
  void Pump(const std::shared_ptr<Exchange>& ex) {
    ex->queued_.store(false, std::memory_order_release);
    auto it = connections_.find(ex->connection_);
    if (it == connections_.end() || it->second->exchange != ex) return;
    Connection& c = *it->second;
    ex->RunPump();
    Flush(c);
  }

  // The response is fully written: next request, or close.  Returns false when the connection
  // was closed.
  bool Complete(Connection& c) {
    const bool keep_alive = c.exchange->request().keep_alive && !shared_->stopping.load();
    c.exchange->ReleaseCallbacks();
    if (on_finish_) on_finish_(*c.exchange, /*completed=*/true);
    c.exchange.reset();
    if (!keep_alive) {
      Linger(c);
      return true;
    }
    c.phase = Phase::kHead;
    c.idle = true;
    c.deadline = base::NowSeconds() + options_.idle_timeout_s;
    return Advance(c);  // a pipelined request may be waiting
  }

  // Answers with an error and closes once it is written.
  bool Fail(Connection& c, int status, std::string_view message) {
    const std::string body = ErrorJson(status, message);
    c.out += ResponseHead(status, "application/json", {}, static_cast<int64_t>(body.size()),
                          /*keep_alive=*/false);
    c.out += body;
    c.close_after_write = true;
    c.phase = Phase::kClosing;
    c.in.clear();
    return Flush(c);
  }

  // Collects the exchange's output and sends what is queued; completes the exchange once its
  // response is written.  Returns false when the connection was closed.
  bool Flush(Connection& c) {
    bool done = false;
    if (c.phase == Phase::kHandling && c.exchange != nullptr) {
      if (c.out_off == c.out.size()) {
        c.out.clear();
        c.out_off = 0;
        c.last_progress = base::NowSeconds();  // the write timeout counts from here
      }
      done = c.exchange->TakeOutput(&c.out);
      if (static_cast<int64_t>(c.out.size() - c.out_off) > options_.max_pending_output) {
        Close(c);  // the client reads far slower than we produce
        return false;
      }
    }
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        c.last_progress = base::NowSeconds();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (c.out_off > (1 << 20)) {
          c.out.erase(0, c.out_off);
          c.out_off = 0;
        }
        SetWantWrite(c, true);
        return true;
      }
      Close(c);
      return false;
    }
    c.out.clear();
    c.out_off = 0;
    SetWantWrite(c, false);
    if (c.close_after_write) {
      c.close_after_write = false;
      Linger(c);
      return true;
    }
    if (done) return Complete(c);
    return true;
  }

  // Stops sending and discards input until the client closes (or a short deadline), so that an
  // error response is not destroyed by a reset while the client is still sending its body.
  void Linger(Connection& c) {
    ::shutdown(c.fd.get(), SHUT_WR);
    c.phase = Phase::kClosing;
    c.in.clear();
    c.deadline = base::NowSeconds() + 2.0;
  }

  void SetWantWrite(Connection& c, bool want) {
    if (c.want_write == want) return;
    c.want_write = want;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
    ev.data.u64 = c.id;
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  }

  void Close(Connection& c) {
    std::shared_ptr<Exchange> ex = std::move(c.exchange);
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
    --open_;
    connections_.erase(c.id);  // closes the socket; `c` is gone
    if (ex != nullptr) {
      ex->MarkClosed();
      ex->ReleaseCallbacks();
      if (on_finish_) on_finish_(*ex, /*completed=*/false);
    }
  }

  void Sweep(double now) {
    if (accept_paused_until_ > 0 && now >= accept_paused_until_) {
      accept_paused_until_ = 0;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev);
    }
    std::vector<Connection*> expired;
    for (auto& [id, conn] : connections_) {
      Connection& c = *conn;
      const bool reading = c.phase == Phase::kHead || c.phase == Phase::kBody;
      const bool stalled_write =
          c.out_off < c.out.size() && now - c.last_progress > options_.write_timeout_s;
      if ((reading || c.phase == Phase::kClosing) && now > c.deadline)
        expired.push_back(&c);
      else if (stalled_write)
        expired.push_back(&c);
    }
    for (Connection* c : expired) {
      ++timed_out_;
      const bool partial_request =
          (c->phase == Phase::kHead && !c->idle) || c->phase == Phase::kBody;
      if (partial_request && c->out_off == c->out.size()) {
        Fail(*c, 408,
             "the request did not arrive within " +
                 std::to_string(static_cast<int>(options_.read_timeout_s)) + " s");
      } else {
        Close(*c);
      }
    }
  }

  const HttpServerOptions options_;
  const Handler handler_;
  const FinishObserver on_finish_;
  Fd listen_fd_;
  Fd epoll_fd_;
  std::shared_ptr<LoopShared> shared_;
  std::thread loop_;
  std::vector<std::thread> handlers_;

  // Loop thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  uint64_t next_id_ = 2;
  double accept_paused_until_ = 0;  // > 0: listening is paused (out of descriptors)

  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Exchange>> work_;
  bool stopped_ = false;

  std::atomic<int64_t> open_{0};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> timed_out_{0};
  std::atomic<int64_t> bad_requests_{0};
};

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const HttpServerOptions& options,
                                                         Handler handler,
                                                         FinishObserver on_finish) {
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgumentError("http: port ", options.port, " is outside 0..65535");
  }
  int port = 0;
  LOOM_ASSIGN_OR_RETURN(Fd listen_fd, comm::tcp::Listen(options.host, options.port, &port));
  if (::fcntl(listen_fd.get(), F_SETFL, ::fcntl(listen_fd.get(), F_GETFL, 0) | O_NONBLOCK) != 0) {
    return UnavailableError("http: cannot make the listening socket non-blocking: ",
                            std::strerror(errno));
  }
  Fd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  Fd event_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll_fd.valid() || !event_fd.valid()) {
    return UnavailableError("http: cannot create epoll/eventfd: ", std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, listen_fd.get(), &ev) != 0) {
    return UnavailableError("http: epoll_ctl failed: ", std::strerror(errno));
  }
  ev.data.u64 = kEventId;
  if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, event_fd.get(), &ev) != 0) {
    return UnavailableError("http: epoll_ctl failed: ", std::strerror(errno));
  }
  auto shared = std::make_shared<LoopShared>(std::move(event_fd));
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->port_ = port;
  server->impl_ =
      std::make_unique<Impl>(options, std::move(handler), std::move(on_finish),
                             std::move(listen_fd), std::move(epoll_fd), std::move(shared));
  return server;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() { impl_->Start(); }

void HttpServer::Stop() {
  if (impl_ != nullptr) impl_->Stop();
}

HttpServerStats HttpServer::Stats() const { return impl_->Stats(); }

}  // namespace loom::serve
