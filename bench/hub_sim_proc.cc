// Part of hub_sim (see the header of hub_sim.cc): child processes, /proc and sock_diag.
#include "hub_sim_proc.h"

#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "loom/base/clock.h"

namespace hub_sim {
namespace {

using loom::base::NowSeconds;

// Waits up to `timeout_s` for `pid` to exit; true when it did.
bool WaitExit(pid_t pid, double timeout_s) {
  const double end = NowSeconds() + timeout_s;
  while (NowSeconds() < end) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) return true;
    ::usleep(10000);
  }
  return false;
}

}  // namespace

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "hub_sim: %s\n", message.c_str());
  std::exit(1);
}

// ---- Child processes: the hub (and perf), stopped whatever happens ----

pid_t g_hub_pid = -1;
pid_t g_perf_pid = -1;

void KillChildrenNow(int) {
  if (g_perf_pid > 0) ::kill(g_perf_pid, SIGINT);
  if (g_hub_pid > 0) ::kill(g_hub_pid, SIGKILL);
}

void OnSignal(int sig) {
  KillChildrenNow(sig);
  ::_exit(128 + sig);
}

void StopChild(pid_t* pid, int sig, double timeout_s) {
  if (*pid <= 0) return;
  ::kill(*pid, sig);
  if (!WaitExit(*pid, timeout_s)) {
    ::kill(*pid, SIGKILL);
    WaitExit(*pid, 5);
  }
  *pid = -1;
}

// fork + exec with stdout to `stdout_fd` (-1: inherit) and stderr to `stderr_path` ("" inherit);
// the child gets SIGKILL when this process dies.
pid_t Spawn(const std::vector<std::string>& argv, int stdout_fd, int close_fd,
            const std::string& stderr_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) Die(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (close_fd >= 0) ::close(close_fd);
    if (stdout_fd >= 0) ::dup2(stdout_fd, 1);
    if (!stderr_path.empty()) {
      const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) ::dup2(fd, 2);
    }
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

// ---- /proc ----

double ProcCpuSeconds(pid_t pid) {  // utime + stime, all threads
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(s.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  // After "pid (comm) ": state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && (fields >> f); ++i) {
    if (i == 14) utime = std::atof(f.c_str());
    if (i == 15) stime = std::atof(f.c_str());
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int64_t ProcRssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// ---- The hub's unread bytes: receive queues of its established sockets (netlink sock_diag) ----

SockDiag::SockDiag() { fd_ = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG); }

SockDiag::~SockDiag() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<Backlog> SockDiag::RecvBacklog(uint16_t port) {
  if (fd_ < 0) return std::nullopt;
  struct Request {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
    nlattr attr;
    inet_diag_bc_op ops[2];
  } r{};
  r.nlh.nlmsg_len = sizeof(r);
  r.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  r.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  r.nlh.nlmsg_seq = ++seq_;
  r.req.sdiag_family = AF_INET;
  r.req.sdiag_protocol = IPPROTO_TCP;
  r.req.idiag_states = 1u << 1;  // TCP_ESTABLISHED
  // Bytecode: "local port == port" (the second op carries the port in its `no` field); a
  // match jumps to the end (accept), a miss jumps 4 bytes past it (reject).
  r.attr.nla_len = static_cast<uint16_t>(NLA_HDRLEN + sizeof(r.ops));
  r.attr.nla_type = INET_DIAG_REQ_BYTECODE;
  r.ops[0] = {INET_DIAG_BC_S_EQ, static_cast<uint8_t>(sizeof(r.ops)),
              static_cast<uint16_t>(sizeof(r.ops) + 4)};
  r.ops[1] = {0, 0, port};
  if (::send(fd_, &r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r))) return std::nullopt;
  Backlog b;
  buffer_.resize(1 << 16);
  for (;;) {
    const ssize_t n = ::recv(fd_, buffer_.data(), buffer_.size(), 0);
    if (n <= 0) return std::nullopt;
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer_.data()); NLMSG_OK(h, len);
         h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_seq != seq_) continue;
      if (h->nlmsg_type == NLMSG_DONE) return b;
      if (h->nlmsg_type == NLMSG_ERROR) return std::nullopt;
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (ntohs(m->id.idiag_sport) != port) continue;
      b.bytes += m->idiag_rqueue;
      b.sockets += 1;
    }
  }
}

}  // namespace hub_sim
