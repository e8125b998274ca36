// Sockets for the tcp backend: an owning descriptor, listening, connecting with a deadline, and
// exact-length reads/writes with a deadline for the handshake.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "loom/base/fd.h"
#include "loom/base/status.h"

namespace loom::comm::tcp {

using base::Fd;

// Shuts both directions of a socket down (the peer sees EOF at once, even if another process
// shares the descriptor) and closes it.
void ShutdownAndClose(Fd& fd);

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
