// Part of hub_sim (see the header of hub_sim.cc): the processes it runs (the hub, and perf with
// --perf), stopped whatever happens; their CPU time and memory from /proc; and the hub's unread
// bytes, from netlink sock_diag.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hub_sim {

[[noreturn]] void Die(const std::string& message);

// ---- Child processes: the hub (and perf), stopped whatever happens ----

extern pid_t g_hub_pid;
extern pid_t g_perf_pid;

// SIGINT to perf, SIGKILL to the hub (from atexit and the signal handlers).
void KillChildrenNow(int);
// The SIGINT/SIGTERM handler: the children go, then this process (exit status 128 + sig).
void OnSignal(int sig);

// Sends `sig` to `*pid` and waits up to `timeout_s` for it to exit (then SIGKILL); *pid = -1.
void StopChild(pid_t* pid, int sig, double timeout_s);

// fork + exec with stdout to `stdout_fd` (-1: inherit) and stderr to `stderr_path` ("" inherit);
// the child gets SIGKILL when this process dies.
pid_t Spawn(const std::vector<std::string>& argv, int stdout_fd, int close_fd,
            const std::string& stderr_path);

// ---- /proc ----

double ProcCpuSeconds(pid_t pid);  // utime + stime, all threads
int64_t ProcRssKb(pid_t pid);
double SelfCpuSeconds();
std::string LoadAverage();

// ---- The hub's unread bytes: receive queues of its established sockets (netlink sock_diag) ----

struct Backlog {
  int64_t bytes = 0;
  int64_t sockets = 0;
};

class SockDiag {
 public:
  SockDiag();
  ~SockDiag();
  // The bytes queued for reading in IPv4 TCP sockets whose local port is `port` (the hub's
  // accepted connections), or nullopt when the kernel does not answer.
  std::optional<Backlog> RecvBacklog(uint16_t port);

 private:
  int fd_ = -1;
  uint32_t seq_ = 0;
  std::vector<char> buffer_;
};

}  // namespace hub_sim
