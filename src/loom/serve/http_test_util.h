// Test-only: a blocking loopback HTTP client over a raw socket, so that tests can send exactly the
// bytes they want (partial heads, pipelined requests) and read exactly what the server wrote.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

namespace loom::serve::testing {

class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads whatever arrives within `seconds` (returns early at EOF).  Sets eof() at EOF.
  std::string ReadFor(double seconds) {
    std::string out;
    const auto end = Deadline(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (!ReadSome(&out, end)) break;
    }
    return out;
  }

  // Reads until `needle` appears in what was read since the call began, EOF, or `seconds`.
  std::string ReadUntil(std::string_view needle, double seconds) {
    std::string out;
    const auto end = Deadline(seconds);
    while (out.find(needle) == std::string::npos && std::chrono::steady_clock::now() < end) {
      if (!ReadSome(&out, end)) break;
    }
    return out;
  }

  // Reads one response with a Content-Length or chunked body.  Returns the raw bytes.
  std::string ReadResponse(double seconds = 10) {
    std::string out = pending_;
    pending_.clear();
    const auto end = Deadline(seconds);
    for (;;) {
      const size_t head_end = out.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const std::string head = out.substr(0, head_end);
        size_t total = std::string::npos;
        const size_t cl = Lower(head).find("content-length:");
        if (cl != std::string::npos) {
          total = head_end + 4 + std::strtoull(head.c_str() + cl + 15, nullptr, 10);
        } else if (Lower(head).find("transfer-encoding: chunked") != std::string::npos) {
          const size_t last = out.find("\r\n0\r\n\r\n", head_end);
          if (last != std::string::npos)
            total = last + 7;
          else if (out.compare(head_end + 4, 5, "0\r\n\r\n") == 0)
            total = head_end + 9;
        }
        if (total != std::string::npos && out.size() >= total) {
          pending_ = out.substr(total);
          return out.substr(0, total);
        }
      }
      if (std::chrono::steady_clock::now() >= end || !ReadSome(&out, end)) return out;
    }
  }

  bool eof() const { return eof_; }

  static std::chrono::steady_clock::time_point Deadline(double seconds) {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(seconds));
  }

  static std::string Lower(std::string s) {
    for (char& c : s) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return s;
  }

 private:
  bool ReadSome(std::string* out, std::chrono::steady_clock::time_point end) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r <= 0) return r == 0;
    char buf[65536];
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
  std::string pending_;
};

// The status code of a raw response ("HTTP/1.1 200 OK..." -> 200), 0 when malformed.
inline int StatusOf(std::string_view response) {
  if (response.size() < 12 || response.substr(0, 9) != "HTTP/1.1 ") return 0;
  return std::atoi(std::string(response.substr(9, 3)).c_str());
}

// The body after the head (raw: chunked bodies keep their chunk framing).
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

inline std::string Post(std::string_view path, std::string_view body,
                        std::string_view extra_headers = "") {
  return "POST " + std::string(path) +
         " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" + std::string(extra_headers) +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

inline std::string Get(std::string_view path, std::string_view extra_headers = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: t\r\n" + std::string(extra_headers) +
         "\r\n";
}

}  // namespace loom::serve::testing
