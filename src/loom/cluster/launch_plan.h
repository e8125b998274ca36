// What `loom launch` starts, as data: for each process its argv, environment and stdin preamble.
// Building the plan is pure (no processes, no sockets except through the binder callback), so the
// ssh and mpirun command lines are unit-tested here even where neither can run.
//
// Every rank gets LOOM_RANK, LOOM_WORLD_SIZE, LOOM_LOCAL_RANK, LOOM_LOCAL_SIZE, LOOM_BACKEND,
// LOOM_GROUP_ID and LOOM_GROUP_SECRET; tcp ranks also LOOM_PEERS and, when the launcher bound their
// listening socket itself (local ranks), LOOM_LISTEN_FD=3.  Remote ranks start through
//   ssh -T -o BatchMode=yes TARGET 'exec sh -c '\''SCRIPT'\'''
// where SCRIPT reads the secret from the first line of stdin (so it never appears on a command
// line), then treats each further stdin line as a signal name to deliver to the rank's process
// group, and end of stdin (the launcher went away) as SIGTERM.  The remote login shell must be
// POSIX-like (sh, bash, dash, zsh).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/comm/hostfile.h"

namespace loom::cluster {

using comm::HostEntry;
using comm::Hostfile;
using comm::kDefaultPort;
using comm::ParseHostfile;

using EnvList = std::vector<std::pair<std::string, std::string>>;

struct LaunchSpec {
  int num_ranks = 0;            // 0 with a hostfile: every slot
  std::string backend = "tcp";  // tcp | shm | mpi
  std::optional<Hostfile> hostfile;
  std::vector<std::string> command;
  std::string self_exe;  // the loom binary (mpi: mpirun starts its rank wrapper)
  EnvList extra_env;     // added to every rank
  bool as_root = false;  // mpi: mpirun needs --allow-run-as-root
  int local_cores = 0;   // mpi: add --oversubscribe when ranks exceed this
  // CPU binding of local ranks: "auto" (bind when the ranks of this host fit its cores), "core"
  // (always; ranks share cores round-robin when there are more ranks than cores) or "none".
  // Ranks that spin while waiting must not share a core, and the scheduler tends to put a rank it
  // wakes next to the rank that woke it.
  std::string bind = "auto";
  std::vector<int> cpus;  // the CPUs local ranks may use (the launcher's affinity)
};

// One process the launcher starts (a rank, the ssh client of a remote rank, or mpirun).
struct ProcessPlan {
  int rank = 0;      // the rank it runs; -1 for mpirun (all ranks)
  std::string host;  // for messages
  std::vector<std::string> argv;
  EnvList env;                 // set on top of the launcher's environment
  std::string cwd;             // local processes: chdir here first ("" = stay)
  bool remote = false;         // ssh: stdin is the secret line, then signal names
  std::string stdin_preamble;  // written to its stdin first
  int listener = -1;           // index of a pre-bound listening socket passed as fd 3
  std::vector<int> cpus;       // local processes: bind to these CPUs (empty: no binding)
};

struct LaunchPlan {
  int world_size = 0;
  std::string backend;
  std::string group_id;
  std::string secret;
  std::vector<ProcessPlan> processes;
};

// Binds a listening socket on `address` (port 0) for a local rank; returns its index and port.
using ListenerBinder = std::function<StatusOr<int>(const std::string& address, int* port)>;

StatusOr<LaunchPlan> MakeLaunchPlan(const LaunchSpec& spec, const ListenerBinder& bind,
                                    std::string group_id, std::string secret);

// Quotes for a POSIX shell: 'it'\''s'.
std::string ShellQuote(std::string_view s);

// The script a remote host's sh runs (see the file comment); exposed for tests, which run it with
// a local sh.
std::string RemoteScript(const std::string& cwd, const EnvList& env,
                         const std::vector<std::string>& command);

// Random hex for group ids and secrets (`bytes` random bytes).
StatusOr<std::string> RandomHex(int bytes);

}  // namespace loom::cluster
