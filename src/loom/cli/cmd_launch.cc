// `loom launch -n N [--hostfile FILE] [--backend tcp|shm|mpi] -- COMMAND ...`: starts a group of
// ranks (local processes, ssh for the remote hosts of a hostfile, or mpirun) and supervises them.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <climits>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "loom/base/sysinfo.h"
#include "loom/base/thread_pool.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/comm/hostfile.h"
#include "loom/cluster/launcher.h"

namespace loom::cli {

namespace {

struct LaunchFlags {
  int ranks = 0;
  std::string hostfile;
  std::string backend = "tcp";
  std::string bind = "auto";
  double grace = 5;
  double timeout = 0;
  bool rank_wrapper = false;
  std::vector<std::string> command;
};

int RunLaunch(const LaunchFlags& f) {
  if (f.rank_wrapper) return cluster::RunRankWrapper(f.command);
  cluster::LaunchSpec spec;
  spec.num_ranks = f.ranks;
  spec.backend = f.backend;
  spec.bind = f.bind;
  spec.command = f.command;
  spec.self_exe = base::SelfExecutable();
  spec.as_root = ::geteuid() == 0;
  spec.local_cores = base::ThreadPool::AvailableCores();
  if (!f.hostfile.empty()) {
    auto hf = comm::LoadHostfile(f.hostfile);
    if (!hf.ok()) return Fail("launch", hf.status());
    spec.hostfile = std::move(*hf);
  } else if (f.ranks < 1) {
    return Fail("launch", InvalidArgumentError("give the number of ranks with -n N"));
  }
  cluster::RunOptions options;
  options.forward_signals = true;
  options.forward_stdin = true;
  options.grace_seconds = f.grace;
  options.timeout_seconds = f.timeout;
  auto result = cluster::Launch(spec, options);
  if (!result.ok()) return Fail("launch", result.status());
  if (!result->message.empty()) std::fprintf(stderr, "%s\n", result->message.c_str());
  return result->exit_code;
}

}  // namespace

void AddLaunchCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand(
      "launch",
      "start a group of ranks: local processes, ssh for the remote hosts of a hostfile, or "
      "mpirun.  Rank 0's output passes through unchanged; other ranks' lines go to stderr as "
      "\"[rank K] ...\".  If a rank fails the others are stopped and the exit status names it.");
  auto f = std::make_shared<LaunchFlags>();
  sub->add_option("-n,--ranks", f->ranks, "number of ranks (default with --hostfile: every slot)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--hostfile", f->hostfile,
                  "JSON list of hosts: [{\"ssh\": \"user@host\", \"ips\": [\"10.0.0.2\"], "
                  "\"slots\": 1, \"env\": {}, \"cwd\": \"\", \"port\": 29500}]");
  sub->add_option("--backend", f->backend, "tcp (default), shm (one host) or mpi (mpirun)")
      ->check(CLI::IsMember({"tcp", "shm", "mpi"}));
  sub->add_option("--bind", f->bind,
                  "pin local ranks to cores: auto (when they fit, default), core, or none")
      ->check(CLI::IsMember({"auto", "core", "none"}));
  sub->add_option("--grace", f->grace, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_option("--timeout", f->timeout, "kill every rank after this many seconds (0: never)")
      ->check(CLI::Range(0.0, 1e7));
  sub->add_flag("--rank-wrapper", f->rank_wrapper, "internal: what mpirun starts per rank")
      ->group("");
  sub->add_option("command", f->command, "the command every rank runs, after --")->required();
  sub->callback([f, action] { *action = [f] { return RunLaunch(*f); }; });
}

}  // namespace loom::cli
