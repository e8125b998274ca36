// Multi-process tests of every backend with 2, 3 and 4 ranks on this host: each test starts
// comm_worker ranks through the launcher library (tcp, shm) or mpirun (mpi), with a hard time
// limit, and checks every rank's exit status and output.  The launcher kills every process it
// started when a test ends, also on failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/cluster/launcher.h"
#include "loom/comm/config.h"

namespace loom {
namespace {

constexpr int kExpectedFailure = 3;

std::string WorkerPath() { return LOOM_COMM_WORKER; }

std::string Describe(const cluster::RunResult& r) {
  std::string s = StrCat("exit ", r.exit_code, " ", r.message, "\n");
  for (const auto& p : r.processes) {
    s += StrCat("--- rank ", p.rank, ": ", cluster::DescribeExit(p), "\n", p.output);
  }
  return s;
}

cluster::RunResult RunRanks(const std::string& backend, int ranks, std::vector<std::string> args,
                            cluster::EnvList env = {}, double timeout = 90) {
  std::vector<std::string> command = {WorkerPath()};
  command.insert(command.end(), args.begin(), args.end());
  cluster::RunOptions options;
  options.capture_output = true;
  options.stop_on_failure = false;  // every rank must notice a fault by itself
  options.timeout_seconds = timeout;
  env.emplace_back("LOOM_COMM_SPIN_US", "200");  // 2 cores, up to 4 ranks: spin less
  StatusOr<cluster::RunResult> result = InternalError("not run");
  if (backend == "mpi") {
    cluster::LaunchPlan plan;
    cluster::ProcessPlan p;
    p.rank = -1;
    p.host = "mpirun";
    p.argv = {"mpirun", "-n", std::to_string(ranks), "--oversubscribe"};
    if (::geteuid() == 0) p.argv.push_back("--allow-run-as-root");
    env.emplace_back("LOOM_BACKEND", "mpi");
    env.emplace_back("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    for (const auto& kv : env) p.argv.insert(p.argv.end(), {"-x", kv.first});
    p.argv.insert(p.argv.end(), command.begin(), command.end());
    p.env = env;
    plan.processes.push_back(p);
    result = cluster::RunPlan(plan, options);
  } else {
    cluster::LaunchSpec spec;
    spec.num_ranks = ranks;
    spec.backend = backend;
    spec.command = command;
    spec.extra_env = env;
    result = cluster::Launch(spec, options);
  }
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? *result : cluster::RunResult{};
}

bool HaveMpirun() {
  if (!comm::BackendAvailable("mpi")) return false;
  return std::system("command -v mpirun >/dev/null 2>&1") == 0;
}

struct Case {
  std::string backend;
  int ranks;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.backend << " x" << c.ranks; }

class CommGroupTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().backend == "mpi" && !HaveMpirun()) {
      GTEST_SKIP() << "mpirun or the mpi backend is not available in this build; MPI tests "
                      "skipped";
    }
  }
};

TEST_P(CommGroupTest, CollectivesSendRecvSplitsAndCheckedBenchmarkMatchTheSerialReference) {
  const Case c = GetParam();
  const cluster::RunResult r = RunRanks(c.backend, c.ranks, {"all"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  int ok = 0;
  for (const auto& p : r.processes) {
    for (size_t at = p.output.find("all ok"); at != std::string::npos;
         at = p.output.find("all ok", at + 1)) {
      ++ok;
    }
  }
  EXPECT_EQ(ok, c.ranks) << Describe(r);
}

INSTANTIATE_TEST_SUITE_P(Backends, CommGroupTest,
                         ::testing::Values(Case{"tcp", 2}, Case{"tcp", 3}, Case{"tcp", 4},
                                           Case{"shm", 2}, Case{"shm", 3}, Case{"shm", 4},
                                           Case{"mpi", 2}, Case{"mpi", 3}, Case{"mpi", 4}),
                         [](const auto& info) {
                           return info.param.backend + std::to_string(info.param.ranks);
                         });

// Faults: every surviving rank must report an error (exit 3), promptly, naming what went wrong.
class CommFaultTest : public ::testing::TestWithParam<Case> {};

// Every rank but `except_rank` failed as the scenario expects (exit 3) within `max_seconds`, and
// at least one of them names the cause (`needle`; the others may instead report that a rank which
// already failed closed its connections).
void ExpectAllFailed(const cluster::RunResult& r, int except_rank, const std::string& needle,
                     double max_seconds) {
  bool named = needle.empty();
  for (const auto& p : r.processes) {
    if (p.rank == except_rank) continue;
    ASSERT_TRUE(p.exited && p.exit_code == kExpectedFailure)
        << "rank " << p.rank << " " << cluster::DescribeExit(p) << "\n"
        << Describe(r);
    named |= p.output.find(needle) != std::string::npos;
    const size_t at = p.output.find("failed as expected after ");
    ASSERT_NE(at, std::string::npos);
    EXPECT_LT(std::atof(p.output.c_str() + at + 25), max_seconds) << Describe(r);
  }
  EXPECT_TRUE(named) << "no rank mentions '" << needle << "'\n" << Describe(r);
}

TEST_P(CommFaultTest, RankThatDiesIsReportedToEveryOtherRankPromptly) {
  const Case c = GetParam();
  const cluster::RunResult r =
      RunRanks(c.backend, c.ranks, {"die", "1"}, {{"LOOM_COMM_TIMEOUT_S", "30"}});
  ASSERT_FALSE(r.timed_out) << Describe(r);
  const auto& victim = r.processes[1];
  EXPECT_TRUE(victim.exited && victim.exit_code == 9) << Describe(r);
  // Detection is by EOF or process exit, far below the 30 s deadline.
  ExpectAllFailed(r, 1, c.backend == "tcp" ? "closed the connection" : "rank 1", 10);
}

TEST_P(CommFaultTest, RankThatStopsTalkingHitsTheDeadline) {
  const Case c = GetParam();
  const cluster::RunResult r =
      RunRanks(c.backend, c.ranks, {"hang", "1"}, {{"LOOM_COMM_TIMEOUT_S", "1"}});
  ASSERT_FALSE(r.timed_out) << Describe(r);
  EXPECT_EQ(r.processes[1].exit_code, 0) << Describe(r);
  // Some rank's own deadline fires first; the others may instead see that rank give up.
  ExpectAllFailed(r, 1, "DEADLINE_EXCEEDED", 2.4);
}

TEST_P(CommFaultTest, MessageOfTheWrongSizeIsAnErrorOnEveryRank) {
  const Case c = GetParam();
  const cluster::RunResult r =
      RunRanks(c.backend, c.ranks, {"wrong_size"}, {{"LOOM_COMM_TIMEOUT_S", "20"}});
  ASSERT_FALSE(r.timed_out) << Describe(r);
  ExpectAllFailed(r, -1, c.backend == "tcp" ? "different sizes" : "different arguments", 10);
}

TEST_P(CommFaultTest, CollectivesCalledInDifferentOrdersAreAnError) {
  const Case c = GetParam();
  const cluster::RunResult r =
      RunRanks(c.backend, c.ranks, {"mismatch_op"}, {{"LOOM_COMM_TIMEOUT_S", "20"}});
  ASSERT_FALSE(r.timed_out) << Describe(r);
  ExpectAllFailed(r, -1, "different orders", 10);
}

TEST_P(CommFaultTest, PeerThatNeverJoinsIsNamedAfterTheConnectTimeout) {
  const Case c = GetParam();
  const cluster::RunResult r =
      RunRanks(c.backend, c.ranks, {"absent", "1"}, {{"LOOM_COMM_TIMEOUT_S", "1"}});
  ASSERT_FALSE(r.timed_out) << Describe(r);
  ExpectAllFailed(r, 1, c.backend == "tcp" ? "rank 1" : "attached", 3.5);
}

TEST_P(CommFaultTest, RankWithTheWrongSecretIsRefused) {
  const Case c = GetParam();
  const cluster::RunResult r =
      RunRanks(c.backend, c.ranks, {"wrong_secret", "1"}, {{"LOOM_COMM_TIMEOUT_S", "1.5"}});
  ASSERT_FALSE(r.timed_out) << Describe(r);
  // Nobody gets in: the impostor is refused (tcp) or finds no segment (shm); the others time out
  // waiting for the real rank 1.
  ExpectAllFailed(r, -1, "", 4);
  if (c.backend == "tcp") {
    EXPECT_NE(r.processes[1].output.find("wrong group secret"), std::string::npos) << Describe(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CommFaultTest,
                         ::testing::Values(Case{"tcp", 3}, Case{"shm", 3}, Case{"tcp", 2},
                                           Case{"shm", 4}),
                         [](const auto& info) {
                           return info.param.backend + std::to_string(info.param.ranks);
                         });

TEST(CommMpiFaultTest, RankThatDiesUnderMpirunFailsTheJob) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun or the mpi backend is not available; skipped";
  const cluster::RunResult r = RunRanks("mpi", 3, {"die", "1"}, {{"LOOM_COMM_TIMEOUT_S", "30"}});
  ASSERT_FALSE(r.timed_out) << Describe(r);
  EXPECT_NE(r.exit_code, 0) << Describe(r);
}

}  // namespace
}  // namespace loom
