#include "loom/cluster/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "loom/comm/tcp/socket.h"

extern char** environ;

namespace loom::cluster {

namespace {

using comm::tcp::Fd;
using comm::tcp::NowNanos;

constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kMaxPartialLine = 64 << 10;
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "INT";
    case SIGTERM:
      return "TERM";
    case SIGHUP:
      return "HUP";
    case SIGQUIT:
      return "QUIT";
    case SIGKILL:
      return "KILL";
    default:
      return "TERM";
  }
}

void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n > 0) {
      s.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // stderr gone: nothing sensible left to do with the output
    }
  }
}

// Moves `fd` to a number >= 10 (so that dup2 onto 0..3 in the child cannot clobber it).
StatusOr<Fd> HighFd(int fd) {
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (high < 0) return UnavailableError("launch: fcntl(F_DUPFD) failed: ", std::strerror(errno));
  return Fd(high);
}

Status MakePipe(Fd* read_end, Fd* write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return ResourceExhaustedError("launch: pipe failed: ", std::strerror(errno));
  }
  Fd r(p[0]), w(p[1]);
  LOOM_ASSIGN_OR_RETURN(*read_end, HighFd(r.get()));
  LOOM_ASSIGN_OR_RETURN(*write_end, HighFd(w.get()));
  return OkStatus();
}

bool IsLauncherVariable(std::string_view entry) {
  static constexpr std::string_view kNames[] = {
      "LOOM_RANK=",       "LOOM_WORLD_SIZE=",   "LOOM_LOCAL_RANK=",
      "LOOM_LOCAL_SIZE=", "LOOM_PEERS=",        "LOOM_LISTEN_FD=",
      "LOOM_GROUP_ID=",   "LOOM_GROUP_SECRET=", "LOOM_BACKEND="};
  for (std::string_view n : kNames) {
    if (entry.substr(0, n.size()) == n) return true;
  }
  return false;
}

// The launcher's environment minus stale launcher variables, plus `env` (later entries win).
std::vector<std::string> ChildEnvironment(const EnvList& env) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (IsLauncherVariable(entry)) continue;
    bool overridden = false;
    for (const auto& [k, v] : env) {
      if (entry.size() > k.size() && entry.substr(0, k.size()) == k && entry[k.size()] == '=') {
        overridden = true;
        break;
      }
    }
    if (!overridden) out.emplace_back(entry);
  }
  for (size_t i = 0; i < env.size(); ++i) {
    bool later = false;
    for (size_t j = i + 1; j < env.size(); ++j) later |= env[j].first == env[i].first;
    if (!later) out.push_back(env[i].first + "=" + env[i].second);
  }
  return out;
}

struct Child {
  const ProcessPlan* plan = nullptr;
  pid_t pid = -1;
  Fd pidfd;
  Fd out;                  // merged stdout + stderr (prefix or capture), else inherited
  Fd in;                   // its stdin: rank 0's pump, or a remote rank's control line
  std::string in_pending;  // bytes still to write to `in`
  bool close_in_when_drained = false;
  std::string partial;  // prefix mode: an unfinished output line
  bool prefix = false;
  bool running = false;
  ProcessResult result;
};

class Supervisor {
 public:
  Supervisor(const LaunchPlan& plan, std::vector<Fd> listeners, const RunOptions& options)
      : plan_(plan), listeners_(std::move(listeners)), options_(options) {}

  StatusOr<RunResult> Run();

 private:
  Status Spawn(Child& c, bool terminal);
  void OnOutput(Child& c);
  void OnExit(Child& c);
  void Signal(Child& c, int sig);
  void StopOthers(int sig);
  void FlushPartial(Child& c);
  RunResult Finish();

  const LaunchPlan& plan_;
  std::vector<Fd> listeners_;
  const RunOptions& options_;
  std::vector<std::unique_ptr<Child>> children_;
  Child* stdin_target_ = nullptr;
  bool stdin_open_ = false;
  int failed_ = -1;  // index into children_
  int interrupted_by_ = 0;
  bool timed_out_ = false;
  int64_t kill_at_ = 0;  // SIGKILL whatever still runs at this time (0: not scheduled)
};

Status Supervisor::Spawn(Child& c, bool terminal) {
  const ProcessPlan& p = *c.plan;
  c.result.rank = p.rank;
  c.result.host = p.host;
  std::vector<std::string> env = ChildEnvironment(p.env);
  std::vector<char*> argv;
  for (const std::string& a : p.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  Fd out_r, out_w, in_r, in_w, status_r, status_w, listener;
  const bool pipe_out = options_.capture_output || !terminal;
  if (pipe_out) LOOM_RETURN_IF_ERROR(MakePipe(&out_r, &out_w));
  const bool pipe_in = p.remote || (terminal && options_.forward_stdin);
  if (pipe_in) {
    LOOM_RETURN_IF_ERROR(MakePipe(&in_r, &in_w));
  } else {
    Fd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!null.valid()) return UnavailableError("launch: cannot open /dev/null");
    LOOM_ASSIGN_OR_RETURN(in_r, HighFd(null.get()));
  }
  LOOM_RETURN_IF_ERROR(MakePipe(&status_r, &status_w));
  if (p.listener >= 0) {
    LOOM_ASSIGN_OR_RETURN(listener, HighFd(listeners_[p.listener].get()));
  }
  const char* cwd = p.cwd.empty() ? nullptr : p.cwd.c_str();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : p.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }
  const bool bind = !p.cpus.empty();
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) return ResourceExhaustedError("launch: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls from here on.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTTIN, SIGTTOU, SIGCHLD}) {
      ::sigaction(s, &dfl, nullptr);
    }
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);
    ::dup2(in_r.get(), 0);
    if (pipe_out) {
      ::dup2(out_w.get(), 1);
      ::dup2(out_w.get(), 2);
    }
    if (listener.valid()) ::dup2(listener.get(), 3);
    if (bind) ::sched_setaffinity(0, sizeof(cpus), &cpus);
    int err = 0;
    if (cwd != nullptr && ::chdir(cwd) != 0) {
      err = errno;
    } else {
      ::execvpe(argv[0], argv.data(), envp.data());
      err = errno;
    }
    (void)!::write(status_w.get(), &err, sizeof(err));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that signals to the group work at once
  c.pid = pid;
  c.running = true;
  status_w.Reset();
  out_w.Reset();
  in_r.Reset();
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(status_r.get(), &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  c.pidfd = Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  c.out = std::move(out_r);
  c.prefix = pipe_out && !options_.capture_output;
  if (pipe_in) {
    c.in = std::move(in_w);
    ::fcntl(c.in.get(), F_SETFL, ::fcntl(c.in.get(), F_GETFL) | O_NONBLOCK);
    c.in_pending = p.stdin_preamble;
  }
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    const std::string msg =
        StrCat("loom launch: rank ", p.rank, ": cannot run '", p.argv[0], "'",
               p.cwd.empty() ? "" : StrCat(" in ", p.cwd), ": ", std::strerror(exec_errno), "\n");
    if (options_.capture_output) {
      c.result.output += msg;
    } else {
      WriteAll(2, msg);
    }
  }
  return OkStatus();
}

void Supervisor::FlushPartial(Child& c) {
  if (c.partial.empty()) return;
  WriteAll(2, StrCat("[rank ", c.plan->rank, "] ", c.partial, "\n"));
  c.partial.clear();
}

void Supervisor::OnOutput(Child& c) {
  char buf[kReadChunk];
  const ssize_t n = ::read(c.out.get(), buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    if (c.prefix) FlushPartial(c);
    c.out.Reset();
    return;
  }
  const std::string_view data(buf, static_cast<size_t>(n));
  if (!c.prefix) {
    c.result.output.append(data);
    return;
  }
  c.partial.append(data);
  std::string lines;
  size_t start = 0;
  for (size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines += StrCat("[rank ", c.plan->rank, "] ");
    lines.append(c.partial, start, nl + 1 - start);
  }
  c.partial.erase(0, start);
  if (!lines.empty()) WriteAll(2, lines);
  if (c.partial.size() > kMaxPartialLine) FlushPartial(c);
}

void Supervisor::Signal(Child& c, int sig) {
  if (!c.running) return;
  if (c.plan->remote && c.in.valid() && sig != SIGKILL) {
    c.in_pending += StrCat(SignalName(sig), "\n");  // delivered to the remote rank by its script
    return;
  }
  ::kill(-c.pid, sig);  // the whole process group of the rank
  ::kill(c.pid, sig);   // in case it left its group
}

void Supervisor::StopOthers(int sig) {
  for (auto& c : children_) {
    if (!c->running) continue;
    c->result.stopped = true;
    Signal(*c, sig);
    if (sig != SIGKILL && c->plan->remote) ::kill(-c->pid, sig);  // and its ssh client
  }
}

void Supervisor::OnExit(Child& c) {
  int status = 0;
  const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
  if (r == 0) return;
  c.running = false;
  c.pidfd.Reset();
  if (c.in_pending.empty()) {
    c.in.Reset();
  } else {
    c.close_in_when_drained = true;
  }
  if (r < 0) {
    c.result.exited = false;
    c.result.signal = SIGKILL;
  } else if (WIFEXITED(status)) {
    c.result.exited = true;
    c.result.exit_code = WEXITSTATUS(status);
  } else {
    c.result.exited = false;
    c.result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  }
  const bool failed = !c.result.exited || c.result.exit_code != 0;
  if (failed && failed_ < 0 && !c.result.stopped && interrupted_by_ == 0 && !timed_out_) {
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].get() == &c) failed_ = static_cast<int>(i);
    }
    if (options_.stop_on_failure) {
      StopOthers(SIGTERM);
      kill_at_ = NowNanos() + static_cast<int64_t>(options_.grace_seconds * 1e9);
    }
  }
}

StatusOr<RunResult> Supervisor::Run() {
  // Signals: forwarded ones arrive on a signalfd; SIGPIPE and SIGTTIN are ignored meanwhile.
  sigset_t forwarded, old_mask;
  sigemptyset(&forwarded);
  for (int s : kForwardedSignals) sigaddset(&forwarded, s);
  Fd sigfd;
  if (options_.forward_signals) {
    ::sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
    sigfd = Fd(::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  struct sigaction ignore {
  }, old_pipe{}, old_ttin{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe);
  ::sigaction(SIGTTIN, &ignore, &old_ttin);
  auto restore = [&] {
    ::sigaction(SIGPIPE, &old_pipe, nullptr);
    ::sigaction(SIGTTIN, &old_ttin, nullptr);
    if (options_.forward_signals) ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  };

  const int64_t start = NowNanos();
  for (size_t i = 0; i < plan_.processes.size(); ++i) {
    auto c = std::make_unique<Child>();
    c->plan = &plan_.processes[i];
    // The process that owns the terminal: rank 0, or mpirun (which speaks for every rank).
    const bool terminal = i == 0 && options_.first_owns_terminal;
    Status s = Spawn(*c, terminal);
    children_.push_back(std::move(c));
    if (!s.ok()) {
      StopOthers(SIGKILL);
      for (auto& ch : children_) {
        if (ch->pid > 0) ::waitpid(ch->pid, nullptr, 0);
      }
      restore();
      return s;
    }
    if (terminal && options_.forward_stdin && !children_.back()->plan->remote &&
        children_.back()->in.valid()) {
      stdin_target_ = children_.back().get();
      stdin_open_ = true;
    }
  }
  listeners_.clear();  // the ranks own them now

  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, int>> what;  // per pollfd: child (or null) and kind
  enum { kSig, kStdin, kOut, kExit, kIn };
  int64_t drain_until = 0;
  for (;;) {
    bool any_running = false;
    bool any_output = false;
    for (auto& c : children_) {
      any_running |= c->running;
      any_output |= c->out.valid();
    }
    const int64_t now = NowNanos();
    if (!any_running) {
      if (drain_until == 0) drain_until = now + 2'000'000'000;
      if (!any_output || now >= drain_until) break;
    }
    if (options_.timeout_seconds > 0 && any_running && !timed_out_ &&
        now - start >= static_cast<int64_t>(options_.timeout_seconds * 1e9)) {
      timed_out_ = true;
      StopOthers(SIGKILL);
    }
    if (kill_at_ != 0 && now >= kill_at_) {
      StopOthers(SIGKILL);
      kill_at_ = 0;
    }
    fds.clear();
    what.clear();
    if (sigfd.valid()) {
      fds.push_back({sigfd.get(), POLLIN, 0});
      what.emplace_back(nullptr, kSig);
    }
    if (stdin_open_ && stdin_target_ != nullptr && stdin_target_->in.valid() &&
        stdin_target_->in_pending.size() < kReadChunk) {
      fds.push_back({0, POLLIN, 0});
      what.emplace_back(nullptr, kStdin);
    }
    for (auto& c : children_) {
      if (c->out.valid()) {
        fds.push_back({c->out.get(), POLLIN, 0});
        what.emplace_back(c.get(), kOut);
      }
      if (c->running && c->pidfd.valid()) {
        fds.push_back({c->pidfd.get(), POLLIN, 0});
        what.emplace_back(c.get(), kExit);
      }
      if (c->in.valid() && !c->in_pending.empty()) {
        fds.push_back({c->in.get(), POLLOUT, 0});
        what.emplace_back(c.get(), kIn);
      }
    }
    int64_t wake = any_running ? now + 100'000'000 : drain_until;  // 100 ms: also reaps strays
    if (kill_at_ != 0) wake = std::min(wake, kill_at_);
    const int timeout_ms = static_cast<int>(std::max<int64_t>(0, (wake - now) / 1'000'000) + 1);
    const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      restore();
      return UnavailableError("launch: poll failed: ", std::strerror(errno));
    }
    for (size_t i = 0; i < fds.size() && rc > 0; ++i) {
      if (fds[i].revents == 0) continue;
      Child* c = what[i].first;
      switch (what[i].second) {
        case kSig: {
          signalfd_siginfo info{};
          while (::read(sigfd.get(), &info, sizeof(info)) == sizeof(info)) {
            const int sig = static_cast<int>(info.ssi_signo);
            if (interrupted_by_ == 0) interrupted_by_ = sig;
            for (auto& ch : children_) Signal(*ch, sig);
            if (kill_at_ == 0)
              kill_at_ = NowNanos() + static_cast<int64_t>(options_.grace_seconds * 1e9);
          }
          break;
        }
        case kStdin: {
          char buf[kReadChunk];
          const ssize_t n = ::read(0, buf, sizeof(buf));
          if (n > 0) {
            stdin_target_->in_pending.append(buf, static_cast<size_t>(n));
          } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            stdin_open_ = false;
            if (stdin_target_->in_pending.empty()) {
              stdin_target_->in.Reset();
            } else {
              stdin_target_->close_in_when_drained = true;
            }
          }
          break;
        }
        case kOut:
          OnOutput(*c);
          break;
        case kExit:
          OnExit(*c);
          break;
        case kIn: {
          const ssize_t n = ::write(c->in.get(), c->in_pending.data(), c->in_pending.size());
          if (n > 0) {
            c->in_pending.erase(0, static_cast<size_t>(n));
          } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            c->in_pending.clear();
            c->in.Reset();
            if (c == stdin_target_) stdin_open_ = false;
          }
          if (c->in_pending.empty() && c->close_in_when_drained) c->in.Reset();
          break;
        }
      }
    }
    // Reap anything whose pidfd could not be opened or was missed.
    for (auto& c : children_) {
      if (c->running && !c->pidfd.valid()) OnExit(*c);
    }
  }
  for (auto& c : children_) {
    if (c->prefix) FlushPartial(*c);
  }
  restore();
  return Finish();
}

RunResult Supervisor::Finish() {
  RunResult r;
  for (auto& c : children_) r.processes.push_back(c->result);
  r.timed_out = timed_out_;
  r.interrupted_by = interrupted_by_;
  if (timed_out_) {
    r.exit_code = 124;
    r.message =
        StrCat("loom launch: timed out after ", options_.timeout_seconds, " s; killed every rank");
  } else if (failed_ >= 0) {
    const ProcessResult& p = children_[failed_]->result;
    r.failed_rank = p.rank;
    r.exit_code = p.exited ? p.exit_code : 128 + p.signal;
    if (r.exit_code == 0) r.exit_code = 1;
    const std::string who =
        p.rank < 0 ? std::string("mpirun") : StrCat("rank ", p.rank, " (", p.host, ")");
    r.message =
        StrCat("loom launch: ", who, " ", DescribeExit(p),
               options_.stop_on_failure && children_.size() > 1 ? "; stopped the other ranks" : "");
  } else if (interrupted_by_ != 0 &&
             !std::all_of(children_.begin(), children_.end(), [](const auto& c) {
               return c->result.exited && c->result.exit_code == 0;
             })) {
    // (Every rank shutting down cleanly on the forwarded signal, as `loom serve` does, is success.)
    r.exit_code = 128 + interrupted_by_;
    r.message = StrCat("loom launch: interrupted by SIG", SignalName(interrupted_by_),
                       " (forwarded to every rank)");
  }
  return r;
}

}  // namespace

std::string DescribeExit(const ProcessResult& p) {
  if (p.exited) return StrCat("exited with status ", p.exit_code);
  return StrCat("was killed by signal ", p.signal, " (", strsignal(p.signal), ")");
}

StatusOr<RunResult> RunPlan(const LaunchPlan& plan, const RunOptions& options) {
  Supervisor supervisor(plan, {}, options);
  return supervisor.Run();
}

int RunRankWrapper(const std::vector<std::string>& command) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr || command.empty()) {
    std::fprintf(stderr, "loom launch --rank-wrapper: runs under mpirun, with a command\n");
    return 2;
  }
  ::setenv("LOOM_RANK", rank, 1);
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    ::setenv("LOOM_LOCAL_RANK", local, 1);
  }
  if (std::string_view(rank) == "0") {
    // Rank 0 writes straight to mpirun's output, byte for byte.
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "loom launch: rank 0: cannot run '%s': %s\n", argv[0],
                 std::strerror(errno));
    return 127;
  }
  LaunchPlan plan;
  ProcessPlan p;
  p.rank = std::atoi(rank);
  p.host = "mpi";
  p.argv = command;
  for (const char* name : {"LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_LOCAL_RANK", "LOOM_BACKEND",
                           "LOOM_GROUP_ID", "LOOM_GROUP_SECRET"}) {
    if (const char* v = std::getenv(name)) p.env.emplace_back(name, v);
  }
  plan.processes.push_back(std::move(p));
  RunOptions options;
  options.first_owns_terminal = false;
  options.forward_signals = true;
  auto result = RunPlan(plan, options);
  if (!result.ok()) {
    std::fprintf(stderr, "loom launch: rank %s: %s\n", rank, result.status().ToString().c_str());
    return 1;
  }
  const ProcessResult& r = result->processes.front();
  if (r.exited && r.exit_code == 0) return 0;
  std::fprintf(stderr, "loom launch: rank %s %s\n", rank, DescribeExit(r).c_str());
  return r.exited ? r.exit_code : 128 + r.signal;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

StatusOr<RunResult> Launch(const LaunchSpec& spec_in, const RunOptions& options) {
  LaunchSpec spec = spec_in;
  if (spec.cpus.empty()) spec.cpus = AllowedCpus();
  LOOM_ASSIGN_OR_RETURN(std::string id, RandomHex(8));
  LOOM_ASSIGN_OR_RETURN(std::string secret, RandomHex(16));
  std::vector<Fd> listeners;
  auto bind = [&](const std::string& address, int* port) -> StatusOr<int> {
    auto l = comm::tcp::Listen(address, 0, port);
    if (!l.ok()) return l.status().WithContext("launch");
    listeners.push_back(std::move(*l));
    return static_cast<int>(listeners.size()) - 1;
  };
  LOOM_ASSIGN_OR_RETURN(LaunchPlan plan, MakeLaunchPlan(spec, bind, "loom-" + id, secret));
  Supervisor supervisor(plan, std::move(listeners), options);
  return supervisor.Run();
}

}  // namespace loom::cluster
