// Test-only helpers for loom_net's tests: an io_context on a thread of its own, waiting on
// conditions with deadlines, raw TCP clients for malformed input, temporary folders.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include "loom/base/clock.h"
#include "loom/net/http_server.h"

namespace loom::net::testing {

// Runs an io_context on a thread until destroyed (or Release()d and out of work).
class LoopThread {
 public:
  LoopThread() : guard_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~LoopThread() {
    guard_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  boost::asio::io_context& io() { return io_; }

  // Runs `f` on the loop thread and waits for it (up to 10 s); on this thread once the loop ended.
  template <class F>
  auto Run(F f) -> decltype(f()) {
    using R = decltype(f());
    if (joined_) return f();
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(f));
    auto future = task->get_future();
    boost::asio::post(io_, [task] { (*task)(); });
    if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      std::abort();  // the loop is stuck: nothing sensible can follow
    }
    return future.get();
  }

  // Drops the work guard and waits up to `seconds` for io.run() to return by itself.
  bool ReleaseAndJoin(double seconds) {
    guard_.reset();
    const double deadline = base::NowSeconds() + seconds;
    while (!io_.stopped() && base::NowSeconds() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!io_.stopped()) return false;
    thread_.join();
    joined_ = true;
    return true;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
  bool joined_ = false;
};

// Shared state between loop callbacks and the test thread.
template <class T>
class Shared {
 public:
  template <class F>
  void Update(F f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      f(value_);
    }
    cv_.notify_all();
  }
  // Waits until pred(value) holds (up to `seconds`); returns whether it did.
  template <class P>
  bool WaitFor(P pred, double seconds = 10) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return pred(value_); });
  }
  T Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  T value_{};
};

// A blocking TCP client on 127.0.0.1 for writing arbitrary bytes.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Sends all bytes; false if the connection broke.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads what arrives until the peer closes or `seconds` pass; sets eof().
  std::string ReadUntilClose(double seconds = 10) {
    std::string out;
    const double deadline = base::NowSeconds() + seconds;
    while (ReadSome(&out, deadline)) {
    }
    return out;
  }
  // Reads until `out` contains `what` (true), or EOF / the deadline (false).
  bool ReadUntil(std::string* out, std::string_view what, double seconds = 10) {
    const double deadline = base::NowSeconds() + seconds;
    while (out->find(what) == std::string::npos) {
      if (!ReadSome(out, deadline)) return false;
    }
    return true;
  }
  // Reads one response with a Content-Length or chunked body (the head and the raw body).
  std::string ReadResponse(double seconds = 10) {
    const double deadline = base::NowSeconds() + seconds;
    while (pending_.find("\r\n\r\n") == std::string::npos) {
      if (!ReadSome(&pending_, deadline)) return Take(pending_.size());
    }
    const size_t head_end = pending_.find("\r\n\r\n") + 4;
    const std::string head = Lower(pending_.substr(0, head_end));
    if (head.find("transfer-encoding: chunked") != std::string::npos) {
      // Ends with the last chunk (no trailers are sent by the servers under test).
      for (;;) {
        if (pending_.compare(head_end, 5, "0\r\n\r\n") == 0) return Take(head_end + 5);
        const size_t last = pending_.find("\r\n0\r\n\r\n", head_end);
        if (last != std::string::npos) return Take(last + 7);
        if (!ReadSome(&pending_, deadline)) return Take(pending_.size());
      }
    }
    size_t length = 0;
    const size_t cl = head.find("content-length:");
    if (cl != std::string::npos) length = std::strtoul(head.c_str() + cl + 15, nullptr, 10);
    while (pending_.size() < head_end + length) {
      if (!ReadSome(&pending_, deadline)) break;
    }
    return Take(std::min(pending_.size(), head_end + length));
  }
  bool eof() const { return eof_; }

 private:
  static std::string Lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  std::string Take(size_t n) {
    std::string out = pending_.substr(0, n);
    pending_.erase(0, n);
    return out;
  }
  // One read into `out`; false at EOF, error or deadline.
  bool ReadSome(std::string* out, double deadline) {
    if (!pending_.empty() && out != &pending_) {
      out->append(pending_);
      pending_.clear();
      return true;
    }
    const double left = deadline - base::NowSeconds();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) return false;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    out->append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string pending_;  // read by ReadResponse beyond the response it returned
};

// The status code of a raw response ("HTTP/1.1 200 OK..." -> 200), 0 when malformed.
inline int StatusOf(std::string_view response) {
  if (response.size() < 12 || response.substr(0, 9) != "HTTP/1.1 ") return 0;
  return std::atoi(std::string(response.substr(9, 3)).c_str());
}

// The body after the head (raw: a chunked body keeps its framing).
inline std::string BodyOf(std::string_view response) {
  const size_t p = response.find("\r\n\r\n");
  return p == std::string_view::npos ? std::string() : std::string(response.substr(p + 4));
}

// Decodes a chunked body.
inline std::string Unchunk(std::string_view body) {
  std::string out;
  while (!body.empty()) {
    const size_t eol = body.find("\r\n");
    if (eol == std::string_view::npos) break;
    const size_t n = std::strtoull(std::string(body.substr(0, eol)).c_str(), nullptr, 16);
    if (n == 0) break;
    out.append(body.substr(eol + 2, n));
    body.remove_prefix(std::min(body.size(), eol + 2 + n + 2));
  }
  return out;
}

// A port on 127.0.0.1 that nobody listens on (bound, then released).
inline int UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A socket listening on 127.0.0.1 that never accepts: connects succeed, nothing is answered.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A temporary folder, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "loom_net_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A self-signed P-256 certificate for localhost and 127.0.0.1, made with the openssl CLI.
// (`san`: the subjectAltName.)  Returns false if the CLI failed.
inline bool MakeSelfSignedCert(const std::string& cert, const std::string& key,
                               const std::string& san = "DNS:localhost,IP:127.0.0.1") {
  const std::string command =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "
      "/CN=localhost -addext subjectAltName=" +
      san + " -keyout '" + key + "' -out '" + cert + "' >/dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

// A server on a loop thread; torn down on that thread.
class ServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options, HttpHandler http, UpgradeHandler upgrade = nullptr) {
    server_ = loop_.Run([&]() -> std::unique_ptr<HttpServer> {
      auto server = HttpServer::Start(loop_.io(), options, std::move(http), std::move(upgrade));
      EXPECT_TRUE(server.ok()) << server.status().ToString();
      return server.ok() ? std::move(server).value() : nullptr;
    });
    ASSERT_NE(server_, nullptr);
    port_ = server_->port();
  }
  void TearDown() override {
    loop_.Run([&] { server_.reset(); });
  }
  std::string Address(const std::string& scheme, const std::string& path) const {
    return scheme + "://127.0.0.1:" + std::to_string(port_) + path;
  }

  LoopThread loop_;  // first: outlives the server
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

}  // namespace loom::net::testing
