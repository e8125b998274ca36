// A rank of a pod dying mid-generation: every other rank ends with a clear error, within a bounded
// time, instead of hanging.  The ranks are started here directly (no launcher, which would stop
// the survivors itself) with the environment a launcher would give them.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

const std::string kLoom = std::string(LOOM_BINARY_DIR) + "/src/loom/cli/loom";

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A child process with its stdout and stderr captured through one pipe.
struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = -1;
  bool exited = false;

  void Start(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out = fds[0];
  }
  // Reads what is available for up to `ms` milliseconds.
  void Pump(int ms) {
    if (out < 0) return;
    pollfd p{out, POLLIN, 0};
    if (::poll(&p, 1, ms) > 0) {
      char buf[4096];
      const ssize_t n = ::read(out, buf, sizeof(buf));
      if (n > 0) output.append(buf, static_cast<size_t>(n));
      if (n == 0) {
        ::close(out);
        out = -1;
      }
    }
  }
  bool Reap() {
    if (exited) return true;
    if (::waitpid(pid, &status, WNOHANG) == pid) exited = true;
    return exited;
  }
  ~Child() {
    if (pid > 0 && !exited) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    if (out >= 0) ::close(out);
  }
};

void KillOneRankMidGeneration(int tp, int pp, int victim) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("loom_fault_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/small.gguf";
  ASSERT_EQ(std::system((kLoom + " synth --shape small --type q8_0 -o " + model + " >/dev/null 2>&1").c_str()), 0);

  const int n = tp * pp;
  std::string peers;
  for (int r = 0; r < n; ++r) peers += (r ? "," : "") + std::string("127.0.0.1:") + std::to_string(FreePort());
  std::vector<Child> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ranks[r].Start({kLoom, "run", "-m", model, "-p", "hello", "-n", "4000", "--temp", "0", "--tp",
                    std::to_string(tp), "--pp", std::to_string(pp), "--threads", "1"},
                   {"LOOM_BACKEND=tcp", "LOOM_RANK=" + std::to_string(r),
                    "LOOM_WORLD_SIZE=" + std::to_string(n), "LOOM_PEERS=" + peers,
                    "LOOM_GROUP_ID=fault-test", "LOOM_GROUP_SECRET=s3cret",
                    "LOOM_COMM_TIMEOUT_S=20"});
  }
  // Wait until rank 0 streams generated text, then kill the victim.
  const auto start = std::chrono::steady_clock::now();
  while (ranks[0].output.size() < 40 && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    ranks[0].Pump(50);
    ASSERT_FALSE(ranks[0].Reap()) << "rank 0 ended before the fault: " << ranks[0].output;
  }
  ASSERT_GE(ranks[0].output.size(), 40u) << ranks[0].output;
  ::kill(ranks[victim].pid, SIGKILL);

  // Every survivor must exit non-zero, with an error message, well inside the comm deadline.
  const auto killed = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    while (!ranks[r].Reap() && std::chrono::steady_clock::now() - killed < std::chrono::seconds(25)) {
      ranks[r].Pump(20);
    }
    for (int i = 0; i < 10; ++i) ranks[r].Pump(10);
    ASSERT_TRUE(ranks[r].exited) << "rank " << r << " hangs after rank " << victim << " died";
    EXPECT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) != 0)
        << "rank " << r << " status " << ranks[r].status;
    EXPECT_NE(ranks[r].output.find("loom run: "), std::string::npos) << ranks[r].output;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 20.0);
  std::filesystem::remove_all(dir);
}

TEST(PodFaultTest, TensorParallelPeerDiesAndRankZeroReportsIt) { KillOneRankMidGeneration(2, 1, 1); }

TEST(PodFaultTest, MiddlePipelineStageDiesAndBothNeighboursReportIt) {
  KillOneRankMidGeneration(1, 3, 1);
}

}  // namespace
