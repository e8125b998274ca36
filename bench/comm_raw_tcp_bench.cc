// The baselines the tcp backend is measured against, over raw loopback TCP sockets between two
// processes (no Loom code in the data path):
//   stream      one direction, 1 MiB writes: the "raw loopback TCP stream" bandwidth
//   duplex      both directions at once (what a ring all-reduce does on every link)
//   pingpong    16 KiB round trips with busy-polling receives (one-way time = half)
// Usage: comm_raw_tcp_bench [--seconds S] [--bytes N]   (prints one line per measurement)
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// A connected pair of loopback TCP sockets: returns (parent end, child end) after fork.
int Connect(bool* is_child) {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(l, 1) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    Die("listen");
  }
  const pid_t pid = ::fork();
  int fd;
  if (pid == 0) {
    ::close(l);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect");
    *is_child = true;
  } else {
    fd = ::accept(l, nullptr, nullptr);
    ::close(l);
    *is_child = false;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) Die("write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void ReadAll(int fd, char* p, size_t n, bool spin) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, spin ? MSG_DONTWAIT : 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      Die("read");
    }
  }
}

// Sends and receives `total` bytes at once on a non-blocking socket.
void Duplex(int fd, char* out, char* in, size_t chunk, int64_t total) {
  int64_t sent = 0, got = 0;
  while (sent < total || got < total) {
    pollfd p{fd, static_cast<short>((sent < total ? POLLOUT : 0) | (got < total ? POLLIN : 0)), 0};
    ::poll(&p, 1, 1000);
    if (sent < total && (p.revents & POLLOUT)) {
      const ssize_t w = ::send(fd, out, std::min<int64_t>(chunk, total - sent), MSG_DONTWAIT);
      if (w > 0) sent += w;
    }
    if (got < total && (p.revents & POLLIN)) {
      const ssize_t r = ::recv(fd, in, std::min<int64_t>(chunk, total - got), MSG_DONTWAIT);
      if (r > 0) got += r;
      if (r == 0) Die("duplex eof");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  size_t msg = 16 << 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--seconds") seconds = std::atof(argv[i + 1]);
    if (std::string(argv[i]) == "--bytes") msg = static_cast<size_t>(std::atol(argv[i + 1]));
  }
  const size_t chunk = 1 << 20;
  std::vector<char> out(chunk, 'x'), in(chunk);
  const int64_t total = static_cast<int64_t>(4.0e9 * seconds / 2);  // ~ seconds at 4 GB/s

  bool child = false;
  int fd = Connect(&child);
  // stream: the child sends, the parent receives and times.
  if (child) {
    for (int64_t left = total; left > 0; left -= chunk)
      WriteAll(fd, out.data(), std::min<int64_t>(chunk, left));
  } else {
    const double t0 = Now();
    for (int64_t left = total; left > 0; left -= chunk)
      ReadAll(fd, in.data(), std::min<int64_t>(chunk, left), false);
    const double t = Now() - t0;
    std::printf("stream    %lld bytes  %.2f GB/s\n", static_cast<long long>(total),
                total / t / 1e9);
  }
  // duplex: both send and receive `total` bytes; per-direction GB/s.
  {
    const double t0 = Now();
    Duplex(fd, out.data(), in.data(), chunk, total);
    const double t = Now() - t0;
    if (!child) {
      std::printf("duplex    %lld bytes each way  %.2f GB/s per direction\n",
                  static_cast<long long>(total), total / t / 1e9);
    }
  }
  // ping-pong: busy-polling receives; median one-way time.
  {
    const int iters = 20000;
    std::vector<double> t(iters);
    for (int i = 0; i < iters; ++i) {
      const double t0 = Now();
      if (child) {
        ReadAll(fd, in.data(), msg, true);
        WriteAll(fd, out.data(), msg);
      } else {
        WriteAll(fd, out.data(), msg);
        ReadAll(fd, in.data(), msg, true);
      }
      t[i] = Now() - t0;
    }
    if (!child) {
      std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
      std::printf("pingpong  %zu bytes  one-way %.2f us (median of %d round trips / 2)\n", msg,
                  t[iters / 2] / 2 * 1e6, iters);
    }
  }
  // exchange: both send a message, then both busy-poll for the other's (the one-shot all-reduce
  // pattern of two ranks); median time per exchange.
  {
    const int iters = 20000;
    std::vector<double> t(iters);
    for (int i = 0; i < iters; ++i) {
      const double t0 = Now();
      WriteAll(fd, out.data(), msg);
      ReadAll(fd, in.data(), msg, true);
      t[i] = Now() - t0;
    }
    if (!child) {
      std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
      std::printf("exchange  %zu bytes  %.2f us (median of %d simultaneous exchanges)\n", msg,
                  t[iters / 2] * 1e6, iters);
    }
  }
  ::close(fd);
  if (child) return 0;
  int status = 0;
  ::wait(&status);
  return 0;
}
