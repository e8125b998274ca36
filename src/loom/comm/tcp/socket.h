// Sockets for the tcp backend: an owning descriptor, listening, connecting with a deadline, and
// exact-length reads/writes with a deadline for the handshake.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "loom/base/status.h"

namespace loom::comm::tcp {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset();
  // Shuts both directions down (the peer sees EOF at once, even if another process shares the
  // descriptor) and closes.
  void ShutdownAndClose();

 private:
  int fd_ = -1;
};

// Monotonic clock in nanoseconds (CLOCK_MONOTONIC: shared by all processes of a host).
int64_t NowNanos();

// A listening TCP socket on host:port (port 0 picks a free port); *bound_port gets the port.
StatusOr<Fd> Listen(const std::string& host, int port, int* bound_port);
// The local port of a bound socket.
StatusOr<int> LocalPort(int fd);

// Connects to host:port (resolving names), retrying refused connections (the peer may not be
// listening yet) until `deadline_ns`.  The socket is non-blocking with TCP_NODELAY.
StatusOr<Fd> ConnectWithRetry(const std::string& host, int port, int64_t deadline_ns,
                              std::string_view who);

// Sets O_NONBLOCK, TCP_NODELAY and close-on-exec.
Status ConfigureStream(int fd);

// Reads or writes exactly bytes.size() bytes on a non-blocking socket, waiting with poll() until
// `deadline_ns`.  EOF and errors name `who`.
Status ReadFull(int fd, std::span<uint8_t> bytes, int64_t deadline_ns, std::string_view who);
Status WriteFull(int fd, std::span<const uint8_t> bytes, int64_t deadline_ns, std::string_view who);

std::string ErrnoText(int err);

}  // namespace loom::comm::tcp
