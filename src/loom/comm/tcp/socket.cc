#include "loom/comm/tcp/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace loom::comm::tcp {

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

StatusOr<AddrInfoPtr> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    return UnavailableError("cannot resolve '", host, "': ", gai_strerror(rc));
  }
  return AddrInfoPtr(result);
}

int PollTimeoutMs(int64_t deadline_ns) {
  const int64_t left = deadline_ns - NowNanos();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((left + 999'999) / 1'000'000, 1000));
}

}  // namespace

std::string ErrnoText(int err) { return std::strerror(err); }

void ShutdownAndClose(Fd& fd) {
  if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
  fd.Reset();
}

int64_t NowNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

StatusOr<Fd> Listen(const std::string& host, int port, int* bound_port) {
  LOOM_ASSIGN_OR_RETURN(AddrInfoPtr addrs, Resolve(host, port, /*passive=*/true));
  int last_errno = 0;
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_errno = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 256) != 0) {
      last_errno = errno;
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(*bound_port, LocalPort(fd.get()));
    return fd;
  }
  return UnavailableError("cannot listen on ", host, ":", port, ": ", ErrnoText(last_errno));
}

StatusOr<int> LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return UnavailableError("getsockname failed: ", ErrnoText(errno));
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return InvalidArgumentError("descriptor ", fd, " is not an internet socket");
}

Status ConfigureStream(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return UnavailableError("fcntl(O_NONBLOCK) failed: ", ErrnoText(errno));
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return UnavailableError("setsockopt(TCP_NODELAY) failed: ", ErrnoText(errno));
  }
  return OkStatus();
}

StatusOr<Fd> ConnectWithRetry(const std::string& host, int port, int64_t deadline_ns,
                              std::string_view who) {
  LOOM_ASSIGN_OR_RETURN(AddrInfoPtr addrs, Resolve(host, port, /*passive=*/false));
  int64_t backoff_ns = 2'000'000;
  std::string last_error = "no address";
  for (;;) {
    for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) {
        last_error = ErrnoText(errno);
        continue;
      }
      LOOM_RETURN_IF_ERROR(ConfigureStream(fd.get()));
      int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        for (;;) {
          rc = ::poll(&p, 1, PollTimeoutMs(deadline_ns));
          if (rc > 0 || (rc < 0 && errno != EINTR) || NowNanos() >= deadline_ns) break;
        }
        if (rc < 0) {
          last_error = ErrnoText(errno);
          continue;
        }
        if (rc == 0) {
          last_error = "connect timed out";
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) return fd;
        last_error = ErrnoText(err);
      } else if (rc == 0) {
        return fd;
      } else {
        last_error = ErrnoText(errno);
      }
    }
    const int64_t now = NowNanos();
    if (now >= deadline_ns) {
      return DeadlineExceededError("cannot connect to ", who, " at ", host, ":", port, ": ",
                                   last_error, " (gave up at the deadline)");
    }
    const int64_t sleep_ns = std::min(backoff_ns, deadline_ns - now);
    timespec ts{static_cast<time_t>(sleep_ns / 1'000'000'000),
                static_cast<long>(sleep_ns % 1'000'000'000)};
    ::nanosleep(&ts, nullptr);
    backoff_ns = std::min<int64_t>(backoff_ns * 2, 100'000'000);
  }
}

Status ReadFull(int fd, std::span<uint8_t> bytes, int64_t deadline_ns, std::string_view who) {
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::recv(fd, bytes.data() + got, bytes.size() - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return UnavailableError(who, " closed the connection after ", got, " of ", bytes.size(),
                              " bytes");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return UnavailableError("reading from ", who, ": ", ErrnoText(errno));
    }
    if (NowNanos() >= deadline_ns) {
      return DeadlineExceededError("timed out reading from ", who, " (", got, " of ", bytes.size(),
                                   " bytes arrived)");
    }
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, PollTimeoutMs(deadline_ns));
  }
  return OkStatus();
}

Status WriteFull(int fd, std::span<const uint8_t> bytes, int64_t deadline_ns,
                 std::string_view who) {
  size_t put = 0;
  while (put < bytes.size()) {
    const ssize_t n =
        ::send(fd, bytes.data() + put, bytes.size() - put, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      put += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return UnavailableError("writing to ", who, ": ", ErrnoText(errno));
    }
    if (NowNanos() >= deadline_ns) {
      return DeadlineExceededError("timed out writing to ", who);
    }
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, PollTimeoutMs(deadline_ns));
  }
  return OkStatus();
}

}  // namespace loom::comm::tcp
