// Starts the processes of a LaunchPlan and supervises them until all have exited:
//  - output: in terminal mode rank 0 (or mpirun) writes to the launcher's own stdout and stderr,
//    byte for byte; every other rank's stdout and stderr go, line by line, to the launcher's stderr
//    prefixed with "[rank K] ".  In capture mode (tests) each process's output is kept instead.
//  - failure: when a rank exits non-zero or is killed by a signal, the others get SIGTERM (their
//    whole process group), and SIGKILL after `grace_seconds`; the result names the first failure.
//  - signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the launcher are forwarded to every rank
//    (over the stdin control line for remote ranks).
//  - a launcher that dies takes its local ranks with it (PR_SET_PDEATHSIG), and remote ranks see
//    their ssh stdin close.
#pragma once

#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/cluster/launch_plan.h"

namespace loom::cluster {

struct RunOptions {
  bool capture_output = false;      // keep each process's output (stdout and stderr merged)
  bool stop_on_failure = true;      // stop the other ranks when one fails
  double grace_seconds = 5;         // between SIGTERM and SIGKILL
  double timeout_seconds = 0;       // > 0: kill everything after this long (tests)
  bool forward_signals = false;     // catch and forward SIGINT/SIGTERM/SIGHUP/SIGQUIT
  bool forward_stdin = false;       // pump the launcher's stdin to rank 0 (else /dev/null)
  bool first_owns_terminal = true;  // the first process writes to the terminal directly
};

struct ProcessResult {
  int rank = 0;  // -1: mpirun
  std::string host;
  bool exited = false;  // exited normally (exit_code valid); else killed by `signal`
  int exit_code = 0;
  int signal = 0;
  bool stopped = false;  // the launcher sent it SIGTERM/SIGKILL after another failure or timeout
  std::string output;    // capture mode only
};

struct RunResult {
  std::vector<ProcessResult> processes;  // plan order
  int exit_code = 0;     // 0; the first failure's status (128 + signal if killed); 124 timeout
  int failed_rank = -2;  // the first rank that failed (-1: mpirun), -2 when none failed
  std::string message;   // what went wrong, naming the rank ("" when all succeeded)
  bool timed_out = false;
  int interrupted_by = 0;  // a signal the launcher received and forwarded
};

// Binds listeners for local tcp ranks, builds the plan and runs it.  The group id and secret are
// fresh random values; spec.cpus defaults to this process's CPU affinity.
StatusOr<RunResult> Launch(const LaunchSpec& spec, const RunOptions& options);

// Runs an already built plan (no pre-bound listeners).
StatusOr<RunResult> RunPlan(const LaunchPlan& plan, const RunOptions& options);

// `loom launch --rank-wrapper -- COMMAND`: what mpirun starts for each rank under --backend mpi.
// Sets LOOM_RANK from Open MPI's environment; rank 0 becomes COMMAND (its output unchanged), the
// others run it with "[rank K] " before each output line on stderr.  Returns the exit code.
int RunRankWrapper(const std::vector<std::string>& command);

// The CPUs this process may run on.
std::vector<int> AllowedCpus();

// "exited with status 3" / "was killed by signal 9 (Killed)".
std::string DescribeExit(const ProcessResult& p);

}  // namespace loom::cluster
