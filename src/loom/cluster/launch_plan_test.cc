#include "loom/cluster/launch_plan.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

extern char** environ;

namespace loom::cluster {
namespace {

std::map<std::string, std::string> EnvMap(const EnvList& env) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : env) m[k] = v;
  return m;
}

// A binder that hands out ports 40000, 40001, ... and records the addresses.
struct FakeBinder {
  std::vector<std::string> addresses;
  ListenerBinder fn() {
    return [this](const std::string& address, int* port) -> StatusOr<int> {
      *port = 40000 + static_cast<int>(addresses.size());
      addresses.push_back(address);
      return static_cast<int>(addresses.size()) - 1;
    };
  }
};

TEST(LaunchPlanTest, LocalTcpRanksGetTheirRankPeersAndListener) {
  LaunchSpec spec;
  spec.num_ranks = 3;
  spec.command = {"loom", "comm-bench", "--check"};
  spec.extra_env = {{"LOOM_LINK_DELAY_US", "50"}};
  FakeBinder binder;
  auto plan = MakeLaunchPlan(spec, binder.fn(), "job-1", "s3cret");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->processes.size(), 3u);
  EXPECT_EQ(binder.addresses, (std::vector<std::string>{"127.0.0.1", "127.0.0.1", "127.0.0.1"}));
  for (int r = 0; r < 3; ++r) {
    const ProcessPlan& p = plan->processes[r];
    EXPECT_EQ(p.rank, r);
    EXPECT_FALSE(p.remote);
    EXPECT_EQ(p.argv, spec.command);
    EXPECT_EQ(p.listener, r);
    auto env = EnvMap(p.env);
    EXPECT_EQ(env["LOOM_RANK"], std::to_string(r));
    EXPECT_EQ(env["LOOM_WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOOM_LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["LOOM_BACKEND"], "tcp");
    EXPECT_EQ(env["LOOM_PEERS"], "127.0.0.1:40000,127.0.0.1:40001,127.0.0.1:40002");
    EXPECT_EQ(env["LOOM_LISTEN_FD"], "3");
    EXPECT_EQ(env["LOOM_GROUP_ID"], "job-1");
    EXPECT_EQ(env["LOOM_GROUP_SECRET"], "s3cret");
    EXPECT_EQ(env["LOOM_LINK_DELAY_US"], "50");
  }
}

TEST(LaunchPlanTest, ShmRanksNeedNoPeersAndMustBeLocal) {
  LaunchSpec spec;
  spec.num_ranks = 2;
  spec.backend = "shm";
  spec.command = {"prog"};
  FakeBinder binder;
  auto plan = MakeLaunchPlan(spec, binder.fn(), "g", "s");
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(binder.addresses.empty());
  auto env = EnvMap(plan->processes[1].env);
  EXPECT_EQ(env.count("LOOM_PEERS"), 0u);
  EXPECT_EQ(env["LOOM_BACKEND"], "shm");

  spec.hostfile = *ParseHostfile(R"([{"ssh": "far", "ips": ["10.1.1.1"], "slots": 2}])", "h");
  auto remote = MakeLaunchPlan(spec, binder.fn(), "g", "s");
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("rank 0 is on far"), std::string::npos);
}

TEST(LaunchPlanTest, RemoteRanksStartOverSshWithoutTheSecretOnTheCommandLine) {
  LaunchSpec spec;
  spec.backend = "tcp";
  spec.command = {"loom", "run", "it's a prompt"};
  spec.hostfile = *ParseHostfile(R"([
    {"ips": ["10.0.0.1"]},
    {"ssh": "me@mac", "ips": ["10.0.0.2"], "slots": 2, "port": 30000,
     "env": {"X": "1"}, "cwd": "/opt/my loom"}
  ])",
                                 "h");
  FakeBinder binder;
  auto plan = MakeLaunchPlan(spec, binder.fn(), "job", "TOPSECRET");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->world_size, 3);
  EXPECT_EQ(binder.addresses, (std::vector<std::string>{"10.0.0.1"}));
  const ProcessPlan& local = plan->processes[0];
  EXPECT_FALSE(local.remote);
  EXPECT_EQ(EnvMap(local.env)["LOOM_PEERS"], "10.0.0.1:40000,10.0.0.2:30000,10.0.0.2:30001");
  for (int r = 1; r < 3; ++r) {
    const ProcessPlan& p = plan->processes[r];
    EXPECT_TRUE(p.remote);
    ASSERT_EQ(p.argv.size(), 6u);
    EXPECT_EQ(p.argv[0], "ssh");
    EXPECT_EQ(p.argv[4], "me@mac");
    const std::string& cmd = p.argv[5];
    EXPECT_EQ(cmd.rfind("exec sh -c '", 0), 0u) << cmd;
    EXPECT_NE(cmd.find("LOOM_RANK=" + std::to_string(r)), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("LOOM_LOCAL_RANK=" + std::to_string(r - 1)), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("X=1"), std::string::npos);
    EXPECT_NE(cmd.find("/opt/my loom"), std::string::npos);
    EXPECT_EQ(cmd.find("LOOM_LISTEN_FD"), std::string::npos);
    for (const std::string& a : p.argv) EXPECT_EQ(a.find("TOPSECRET"), std::string::npos);
    EXPECT_EQ(p.stdin_preamble, "TOPSECRET\n");
  }
}

TEST(LaunchPlanTest, MpiRunsOneMpirunWithTheRankWrapper) {
  LaunchSpec spec;
  spec.num_ranks = 4;
  spec.backend = "mpi";
  spec.command = {"loom", "comm-bench"};
  spec.self_exe = "/usr/bin/loom";
  spec.as_root = true;
  spec.local_cores = 2;
  FakeBinder binder;
  auto plan = MakeLaunchPlan(spec, binder.fn(), "g", "s");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->processes.size(), 1u);
  const auto& argv = plan->processes[0].argv;
  ASSERT_GE(argv.size(), 8u);
  EXPECT_EQ(argv[0], "mpirun");
  EXPECT_EQ(argv[2], "4");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--allow-run-as-root"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--oversubscribe"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "LOOM_BACKEND"), argv.end());
  const std::vector<std::string> tail(argv.end() - 6, argv.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"/usr/bin/loom", "launch", "--rank-wrapper", "--",
                                            "loom", "comm-bench"}));
}

TEST(LaunchPlanTest, RejectsImpossibleRequests) {
  FakeBinder binder;
  LaunchSpec spec;
  spec.num_ranks = 2;
  EXPECT_FALSE(MakeLaunchPlan(spec, binder.fn(), "g", "s").ok());  // no command
  spec.command = {"x"};
  spec.backend = "carrier-pigeon";
  EXPECT_FALSE(MakeLaunchPlan(spec, binder.fn(), "g", "s").ok());
  spec.backend = "tcp";
  spec.num_ranks = 5;
  spec.hostfile = *ParseHostfile(R"([{"slots": 4}])", "h");
  auto too_many = MakeLaunchPlan(spec, binder.fn(), "g", "s");
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("4 slots"), std::string::npos);
  spec.num_ranks = 0;  // every slot
  auto all = MakeLaunchPlan(spec, binder.fn(), "g", "s");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->world_size, 4);
}

TEST(LaunchPlanTest, LocalRanksGetDisjointCoresWhenTheyFit) {
  FakeBinder binder;
  LaunchSpec spec;
  spec.command = {"x"};
  spec.cpus = {0, 1, 2, 3};
  auto cpus_of = [&](int n, const std::string& bind) {
    spec.num_ranks = n;
    spec.bind = bind;
    std::vector<std::vector<int>> out;
    auto plan = MakeLaunchPlan(spec, binder.fn(), "g", "s");
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    for (const auto& p : plan->processes) out.push_back(p.cpus);
    return out;
  };
  using V = std::vector<std::vector<int>>;
  EXPECT_EQ(cpus_of(2, "auto"), (V{{0, 1}, {2, 3}}));
  EXPECT_EQ(cpus_of(3, "auto"), (V{{0}, {1}, {2}}));
  EXPECT_EQ(cpus_of(6, "auto"), (V{{}, {}, {}, {}, {}, {}}));  // more ranks than cores
  EXPECT_EQ(cpus_of(6, "core"), (V{{0}, {1}, {2}, {3}, {0}, {1}}));
  EXPECT_EQ(cpus_of(2, "none"), (V{{}, {}}));
  spec.bind = "sometimes";
  EXPECT_FALSE(MakeLaunchPlan(spec, binder.fn(), "g", "s").ok());
}

TEST(LaunchPlanTest, ShellQuotingSurvivesAShell) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  auto hex = RandomHex(16);
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(hex->size(), 32u);
}

// Runs the remote script under the local sh, as a remote host would: stdin pipe, output pipe.
struct ScriptRun {
  pid_t pid = -1;
  int in = -1;
  int out = -1;
};

ScriptRun StartScript(const std::string& script) {
  int in[2], out[2];
  EXPECT_EQ(::pipe(in), 0);
  EXPECT_EQ(::pipe(out), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&fa, fd);
  const std::string c = "exec sh -c " + ShellQuote(script);
  const char* argv[] = {"sh", "-c", c.c_str(), nullptr};
  // Like sshd, start the session in its own process group.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  ScriptRun r;
  EXPECT_EQ(posix_spawnp(&r.pid, "sh", &fa, &attr, const_cast<char**>(argv), environ), 0);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  r.in = in[1];
  r.out = out[0];
  return r;
}

std::string ReadAllFrom(int fd) {
  std::string s;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

TEST(LaunchPlanTest, RemoteScriptReadsTheSecretFromStdinAndRunsTheCommand) {
  const std::string script =
      RemoteScript("/tmp", {{"GREETING", "it's me"}},
                   {"sh", "-c", "echo \"$GREETING|$LOOM_GROUP_SECRET|$(pwd)\""});
  ScriptRun r = StartScript(script);
  ASSERT_EQ(::write(r.in, "abc123\n", 7), 7);
  const std::string out = ReadAllFrom(r.out);
  ::close(r.in);
  int status = 0;
  ASSERT_EQ(::waitpid(r.pid, &status, 0), r.pid);
  EXPECT_EQ(out, "it's me|abc123|/tmp\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(LaunchPlanTest, RemoteScriptDeliversSignalLinesAndStopsAtEndOfInput) {
  for (const bool close_input : {false, true}) {
    ScriptRun r = StartScript(RemoteScript("", {}, {"sleep", "30"}));
    ASSERT_EQ(::write(r.in, "s\n", 2), 2);
    ::usleep(200'000);  // let it reach the exec
    if (close_input) {
      ::close(r.in);  // the launcher went away
    } else {
      ASSERT_EQ(::write(r.in, "INT\n", 4), 4);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(r.pid, &status, 0), r.pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_EQ(WTERMSIG(status), close_input ? SIGTERM : SIGINT);
    if (!close_input) ::close(r.in);
    ::close(r.out);
  }
}

}  // namespace
}  // namespace loom::cluster
