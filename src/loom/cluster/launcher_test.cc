#include "loom/cluster/launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace loom::cluster {
namespace {

RunOptions Capture(double timeout = 30) {
  RunOptions o;
  o.capture_output = true;
  o.timeout_seconds = timeout;
  o.grace_seconds = 2;
  return o;
}

LaunchSpec Shell(int n, const std::string& script, const std::string& backend = "tcp") {
  LaunchSpec spec;
  spec.num_ranks = n;
  spec.backend = backend;
  spec.command = {"sh", "-c", script};
  return spec;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(LauncherTest, RanksGetRankSizePeersAndAListeningSocket) {
  // fd 3 must be a listening socket bound to this rank's port in LOOM_PEERS.
  auto r = Launch(Shell(3,
                        "echo \"rank=$LOOM_RANK size=$LOOM_WORLD_SIZE local=$LOOM_LOCAL_RANK "
                        "peers=$LOOM_PEERS fd=$LOOM_LISTEN_FD\"; "
                        "test -n \"$LOOM_GROUP_SECRET\" && test -e /proc/self/fd/3"),
                  Capture());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << r->message;
  ASSERT_EQ(r->processes.size(), 3u);
  std::string peers;
  for (int k = 0; k < 3; ++k) {
    const std::string& out = r->processes[k].output;
    EXPECT_NE(out.find("rank=" + std::to_string(k) + " size=3 local=" + std::to_string(k)),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("fd=3"), std::string::npos);
    const size_t at = out.find("peers=");
    const std::string p = out.substr(at, out.find(' ', at) - at);
    if (k == 0) peers = p;
    EXPECT_EQ(p, peers);  // everyone sees the same peer list
    EXPECT_TRUE(r->processes[k].exited);
  }
  EXPECT_NE(peers.find("127.0.0.1:"), std::string::npos);
}

TEST(LauncherTest, FailingRankStopsTheOthersAndIsNamed) {
  const auto start = std::chrono::steady_clock::now();
  auto r = Launch(Shell(3, "if [ \"$LOOM_RANK\" = 1 ]; then echo bye; exit 3; fi; exec sleep 30"),
                  Capture());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(Seconds(start), 10);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->failed_rank, 1);
  EXPECT_NE(r->message.find("rank 1"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("exited with status 3"), std::string::npos) << r->message;
  for (int k : {0, 2}) {
    EXPECT_TRUE(r->processes[k].stopped);
    EXPECT_FALSE(r->processes[k].exited);
    EXPECT_EQ(r->processes[k].signal, SIGTERM);
  }
  EXPECT_EQ(r->processes[1].output, "bye\n");
}

TEST(LauncherTest, RankKilledByASignalIsReportedWithTheSignal) {
  auto r =
      Launch(Shell(2, "if [ \"$LOOM_RANK\" = 0 ]; then kill -9 $$; fi; exec sleep 30"), Capture());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->failed_rank, 0);
  EXPECT_EQ(r->exit_code, 128 + 9);
  EXPECT_NE(r->message.find("killed by signal 9"), std::string::npos) << r->message;
}

TEST(LauncherTest, StoppingKillsTheWholeProcessTreeOfARank) {
  // Rank 0 starts a grandchild that would outlive a plain kill of the shell.
  const auto start = std::chrono::steady_clock::now();
  auto r = Launch(Shell(2,
                        "if [ \"$LOOM_RANK\" = 1 ]; then sleep 0.3; exit 5; fi; "
                        "sleep 30; echo never"),
                  Capture());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 5);
  EXPECT_LT(Seconds(start), 10);  // the output pipe closed: the grandchild died too
  EXPECT_EQ(r->processes[0].output.find("never"), std::string::npos);
}

TEST(LauncherTest, TimeoutKillsEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  auto r = Launch(Shell(2, "exec sleep 30"), Capture(0.5));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, 124);
  EXPECT_LT(Seconds(start), 5);
}

TEST(LauncherTest, CommandThatCannotRunIsReported) {
  LaunchSpec spec;
  spec.num_ranks = 2;
  spec.command = {"/nonexistent/loom-program"};
  auto r = Launch(spec, Capture());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_NE(r->processes[0].output.find("cannot run '/nonexistent/loom-program'"),
            std::string::npos)
      << r->processes[0].output;
}

TEST(LauncherTest, RanksArePinnedToTheirOwnCores) {
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  LaunchSpec spec = Shell(2, "grep Cpus_allowed_list /proc/self/status");
  spec.cpus = {cpus[0], cpus[1]};
  auto r = Launch(spec, Capture());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->exit_code, 0) << r->message;
  for (int k = 0; k < 2; ++k) {
    EXPECT_NE(r->processes[k].output.find(":\t" + std::to_string(cpus[k]) + "\n"),
              std::string::npos)
        << r->processes[k].output;
  }
  spec.bind = "none";
  auto unbound = Launch(spec, Capture());
  ASSERT_TRUE(unbound.ok());
  EXPECT_EQ(unbound->processes[0].output, unbound->processes[1].output);
}

TEST(LauncherTest, ShmRanksGetNoPeers) {
  auto r =
      Launch(Shell(2, "test -z \"$LOOM_PEERS\" && test \"$LOOM_BACKEND\" = shm", "shm"), Capture());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->message;
}

// Runs Launch in a forked child (signals sent to a launcher must not hit the test process),
// with the child's stdin and stdout on the given descriptors.  Returns the child's pid; its exit
// status is the launcher's exit code.
pid_t ForkLauncher(const LaunchSpec& spec, RunOptions options, int in_fd, int out_fd,
                   std::vector<int> close_in_child = {}) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (in_fd >= 0) ::dup2(in_fd, 0);
  if (out_fd >= 0) ::dup2(out_fd, 1);
  for (int fd : close_in_child) ::close(fd);
  auto r = Launch(spec, options);
  ::_exit(r.ok() ? r->exit_code : 99);
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits (bounded) until every rank has created its file in `dir`.
bool AwaitFiles(const std::string& dir, int n) {
  for (int i = 0; i < 200; ++i) {
    int found = 0;
    for (int k = 0; k < n; ++k)
      found += ::access((dir + "/ready-" + std::to_string(k)).c_str(), F_OK) == 0;
    if (found == n) return true;
    ::usleep(50'000);
  }
  return false;
}

TEST(LauncherTest, SignalsSentToTheLauncherReachEveryRank) {
  const std::string dir = ::testing::TempDir() + "launcher_signal_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  // Each rank reports the signal in a file (its output is captured by the launcher).
  LaunchSpec spec = Shell(2, "trap 'echo got > " + dir + "/int-$LOOM_RANK; exit 7' INT; touch " +
                                 dir + "/ready-$LOOM_RANK; sleep 30 & wait");
  RunOptions o = Capture();
  o.forward_signals = true;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ForkLauncher(spec, o, -1, -1);
  ASSERT_TRUE(AwaitFiles(dir, 2));
  ::kill(pid, SIGINT);
  EXPECT_EQ(WaitExit(pid), 128 + SIGINT);  // interrupted, not a rank failure
  EXPECT_LT(Seconds(start), 10);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(::access((dir + "/int-" + std::to_string(k)).c_str(), F_OK), 0) << "rank " << k;
  }
}

TEST(LauncherTest, RanksThatIgnoreSigtermAreKilledAfterTheGrace) {
  const std::string dir = ::testing::TempDir() + "launcher_grace_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  LaunchSpec spec =
      Shell(2, "trap '' TERM; touch " + dir + "/ready-$LOOM_RANK; while :; do sleep 1; done");
  RunOptions o = Capture();
  o.forward_signals = true;
  o.grace_seconds = 0.5;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ForkLauncher(spec, o, -1, -1);
  ASSERT_TRUE(AwaitFiles(dir, 2));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 128 + SIGTERM);
  EXPECT_LT(Seconds(start), 10);
}

TEST(LauncherTest, LauncherStdinReachesRankZero) {
  int in[2], out[2];
  ASSERT_EQ(::pipe(in), 0);
  ASSERT_EQ(::pipe(out), 0);
  RunOptions o;
  o.forward_stdin = true;
  o.timeout_seconds = 30;
  const pid_t pid = ForkLauncher(Shell(2, "if [ \"$LOOM_RANK\" = 0 ]; then cat; fi"), o, in[0],
                                 out[1], {in[0], in[1], out[0], out[1]});
  ::close(in[0]);
  ::close(out[1]);
  const std::string text = "line one\nno newline at the end";
  ASSERT_EQ(::write(in[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(in[1]);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;)
    got.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  EXPECT_EQ(WaitExit(pid), 0);
  EXPECT_EQ(got, text);
}

// Terminal mode writes to this process's stdout and stderr: redirect both to files meanwhile.
class Redirect {
 public:
  Redirect() {
    std::fflush(stdout);
    std::fflush(stderr);
    for (int fd : {1, 2}) {
      saved_[fd - 1] = ::dup(fd);
      paths_[fd - 1] = ::testing::TempDir() + "launcher_fd" + std::to_string(fd);
      const int f = ::open(paths_[fd - 1].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      ::dup2(f, fd);
      ::close(f);
    }
  }
  ~Redirect() { Restore(); }
  void Restore() {
    for (int fd : {1, 2}) {
      if (saved_[fd - 1] < 0) continue;
      ::dup2(saved_[fd - 1], fd);
      ::close(saved_[fd - 1]);
      saved_[fd - 1] = -1;
    }
  }
  std::string Read(int fd) {
    std::ifstream in(paths_[fd - 1], std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  int saved_[2] = {-1, -1};
  std::string paths_[2];
};

TEST(LauncherTest, RankZeroOutputIsUnchangedAndOtherRanksArePrefixed) {
  // Rank 0 writes bytes without a final newline (streamed text); the others write lines on both
  // streams and an unfinished last line.
  const std::string script =
      "if [ \"$LOOM_RANK\" = 0 ]; then printf '{\"a\": 1}\\n  tok'; printf 'en' >&2; "
      "else echo \"hello from $LOOM_RANK\"; echo \"warn $LOOM_RANK\" >&2; printf 'tail'; fi";
  RunOptions o;
  o.timeout_seconds = 30;
  StatusOr<RunResult> r = InternalError("not run");
  std::string out, err;
  {
    Redirect redirect;
    r = Launch(Shell(3, script), o);
    redirect.Restore();
    out = redirect.Read(1);
    err = redirect.Read(2);
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(out, "{\"a\": 1}\n  tok");  // byte for byte, nothing else on stdout
  for (int k : {1, 2}) {
    const std::string k_s = std::to_string(k);
    EXPECT_NE(err.find("[rank " + k_s + "] hello from " + k_s + "\n"), std::string::npos) << err;
    EXPECT_NE(err.find("[rank " + k_s + "] warn " + k_s + "\n"), std::string::npos) << err;
    EXPECT_NE(err.find("[rank " + k_s + "] tail\n"), std::string::npos) << err;
  }
  EXPECT_NE(err.find("en"), std::string::npos);
  EXPECT_EQ(err.find("[rank 0]"), std::string::npos);
}

}  // namespace
}  // namespace loom::cluster
