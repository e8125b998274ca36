#include "loom/cluster/launch_plan.h"

#include "loom/comm/sha256.h"
#include "loom/comm/wire.h"

namespace loom::cluster {

namespace {

// The CPUs of the `index`-th of `count` local ranks under spec.bind: consecutive equal shares of
// spec.cpus, or one CPU each round-robin when there are more ranks than CPUs ("core" only).
std::vector<int> CpusOf(const LaunchSpec& spec, int index, int count) {
  const int n = static_cast<int>(spec.cpus.size());
  if (spec.bind == "none" || n == 0 || count < 1) return {};
  if (count > n) {
    if (spec.bind != "core") return {};
    return {spec.cpus[index % n]};
  }
  const int per = n / count;
  return std::vector<int>(spec.cpus.begin() + index * per, spec.cpus.begin() + (index + 1) * per);
}

}  // namespace

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out += "'";
  return out;
}

std::string RemoteScript(const std::string& cwd, const EnvList& env,
                         const std::vector<std::string>& command) {
  std::string s;
  if (!cwd.empty()) s += "cd " + ShellQuote(cwd) + " || exit 127; ";
  s += "IFS= read -r LOOM_GROUP_SECRET || exit 126; export LOOM_GROUP_SECRET; ";
  // A watchdog reads the rest of stdin: each line names a signal for the rank's process group
  // (sshd makes the session a group led by this shell, and $$ becomes the rank after exec; the
  // group id cannot be reused while the watchdog is in it), and the end of stdin (the launcher or
  // the connection is gone) stops the group.  It keeps no output open, so the session ends when
  // the rank exits.
  // (A background list gets /dev/null as stdin before its own redirections, hence fd 9.)
  s += "exec 9<&0; (trap '' INT QUIT HUP TERM USR1 USR2; while IFS= read -r loom_sig; do "
       "case \"$loom_sig\" in INT|TERM|HUP|QUIT|KILL|USR1|USR2) "
       "kill -s \"$loom_sig\" -- -$$;; esac; done; kill -s TERM -- -$$) "
       "<&9 9<&- >/dev/null 2>&1 & exec 9<&-; ";
  s += "exec env --";
  for (const auto& [k, v] : env) s += " " + ShellQuote(k + "=" + v);
  for (const std::string& a : command) s += " " + ShellQuote(a);
  s += " </dev/null";
  return s;
}

StatusOr<std::string> RandomHex(int bytes) {
  std::string out;
  while (static_cast<int>(out.size()) < 2 * bytes) {
    comm::Nonce n;
    LOOM_RETURN_IF_ERROR(comm::RandomNonce(&n));
    out += comm::DigestHex(n);
  }
  out.resize(static_cast<size_t>(2 * bytes));
  return out;
}

StatusOr<LaunchPlan> MakeLaunchPlan(const LaunchSpec& spec, const ListenerBinder& bind,
                                    std::string group_id, std::string secret) {
  if (spec.command.empty()) {
    return InvalidArgumentError("launch: no command (usage: loom launch -n N -- COMMAND ...)");
  }
  if (spec.bind != "auto" && spec.bind != "core" && spec.bind != "none") {
    return InvalidArgumentError("launch: --bind '", spec.bind, "' is not auto, core or none");
  }
  if (spec.backend != "tcp" && spec.backend != "shm" && spec.backend != "mpi") {
    return InvalidArgumentError("launch: backend '", spec.backend, "' is not tcp, shm or mpi");
  }
  int n = spec.num_ranks;
  if (spec.hostfile) {
    const int slots = spec.hostfile->total_slots();
    if (n == 0) n = slots;
    if (n > slots) {
      return InvalidArgumentError("launch: -n ", n, " ranks but the hostfile has ", slots,
                                  " slots");
    }
  }
  if (n < 1 || n > 4096) return InvalidArgumentError("launch: -n ", n, " is not 1..4096");

  // Ranks fill the hosts in order.
  HostEntry localhost;
  std::vector<const HostEntry*> host_of(static_cast<size_t>(n));
  std::vector<int> local_index(static_cast<size_t>(n));
  std::vector<int> local_size(static_cast<size_t>(n));
  {
    int r = 0;
    if (spec.hostfile) {
      for (const HostEntry& h : spec.hostfile->hosts) {
        const int first = r;
        for (int i = 0; i < h.slots && r < n; ++i, ++r) {
          host_of[r] = &h;
          local_index[r] = i;
        }
        for (int q = first; q < r; ++q) local_size[q] = r - first;
      }
    } else {
      for (; r < n; ++r) {
        host_of[r] = &localhost;
        local_index[r] = r;
        local_size[r] = n;
      }
    }
  }

  LaunchPlan plan;
  plan.world_size = n;
  plan.backend = spec.backend;
  plan.group_id = std::move(group_id);
  plan.secret = std::move(secret);

  if (spec.backend == "mpi") {
    ProcessPlan p;
    p.rank = -1;
    p.host = "mpirun";
    p.argv = {"mpirun", "-n", std::to_string(n)};
    if (spec.as_root) p.argv.push_back("--allow-run-as-root");
    if (spec.hostfile) {
      std::string hosts;
      for (const HostEntry& h : spec.hostfile->hosts) {
        std::string name = h.local() ? "localhost" : h.ssh;
        if (const size_t at = name.find('@'); at != std::string::npos) name = name.substr(at + 1);
        hosts += StrCat(hosts.empty() ? "" : ",", name, ":", h.slots);
      }
      p.argv.insert(p.argv.end(), {"--host", hosts});
    }
    if (!spec.hostfile && (spec.local_cores <= 0 || n > spec.local_cores)) {
      p.argv.push_back("--oversubscribe");
    }
    p.env = {{"LOOM_BACKEND", "mpi"},
             {"LOOM_WORLD_SIZE", std::to_string(n)},
             {"LOOM_GROUP_ID", plan.group_id},
             {"LOOM_GROUP_SECRET", plan.secret}};
    for (const auto& kv : spec.extra_env) p.env.push_back(kv);
    for (const auto& [k, v] : p.env) p.argv.insert(p.argv.end(), {"-x", k});
    if (spec.self_exe.empty())
      return InvalidArgumentError("launch: mpi needs the loom binary path");
    p.argv.insert(p.argv.end(), {spec.self_exe, "launch", "--rank-wrapper", "--"});
    p.argv.insert(p.argv.end(), spec.command.begin(), spec.command.end());
    plan.processes.push_back(std::move(p));
    return plan;
  }

  std::string peers;
  std::vector<int> listener(static_cast<size_t>(n), -1);
  if (spec.backend == "tcp") {
    for (int r = 0; r < n; ++r) {
      const HostEntry& h = *host_of[r];
      int port = 0;
      if (h.local() && h.port == 0) {
        LOOM_ASSIGN_OR_RETURN(listener[r], bind(h.address(), &port));
      } else {
        port = h.PortOf(local_index[r]);
      }
      peers += (r == 0 ? "" : ",") + comm::FormatHostPort(h.address(), port);
    }
  } else {  // shm
    for (int r = 0; r < n; ++r) {
      if (!host_of[r]->local()) {
        return InvalidArgumentError(
            "launch: the shm backend runs every rank on this machine, but "
            "rank ",
            r, " is on ", host_of[r]->name(), " (use --backend tcp)");
      }
    }
  }

  for (int r = 0; r < n; ++r) {
    const HostEntry& h = *host_of[r];
    ProcessPlan p;
    p.rank = r;
    p.host = h.name();
    EnvList env = {{"LOOM_RANK", std::to_string(r)},
                   {"LOOM_WORLD_SIZE", std::to_string(n)},
                   {"LOOM_LOCAL_RANK", std::to_string(local_index[r])},
                   {"LOOM_LOCAL_SIZE", std::to_string(local_size[r])},
                   {"LOOM_BACKEND", spec.backend},
                   {"LOOM_GROUP_ID", plan.group_id}};
    if (spec.backend == "tcp") env.emplace_back("LOOM_PEERS", peers);
    if (listener[r] >= 0) env.emplace_back("LOOM_LISTEN_FD", "3");
    for (const auto& kv : h.env) env.push_back(kv);
    for (const auto& kv : spec.extra_env) env.push_back(kv);
    if (h.local()) {
      env.emplace_back("LOOM_GROUP_SECRET", plan.secret);
      p.cpus = CpusOf(spec, local_index[r], local_size[r]);
      p.argv = spec.command;
      p.env = std::move(env);
      p.cwd = h.cwd;
      p.listener = listener[r];
    } else {
      p.remote = true;
      p.stdin_preamble = plan.secret + "\n";
      p.argv = {"ssh", "-T",
                "-o",  "BatchMode=yes",
                h.ssh, "exec sh -c " + ShellQuote(RemoteScript(h.cwd, env, spec.command))};
    }
    plan.processes.push_back(std::move(p));
  }
  return plan;
}

}  // namespace loom::cluster
