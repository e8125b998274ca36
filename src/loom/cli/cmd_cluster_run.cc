// `loom cluster run -m MODEL [--tp T --pp P] [loom run options...]`: picks the plan the cost
// model predicts fastest for the cluster's members and measured links (or the one given), asks
// this machine's daemon to start the other ranks on the other members (no ssh), and runs rank 0
// here: the output is `loom run --tp T --pp P`'s, unchanged.  After the run it prints the
// measured generation speed next to the prediction (stderr).
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include <string>
#include <vector>

#include "loom/base/sysinfo.h"
#include "loom/cli/cluster_common.h"
#include "loom/cli/common.h"
#include "loom/base/fd.h"
#include "loom/cluster/daemon.h"
#include "loom/cluster/rank_env.h"
#include "loom/comm/tcp/socket.h"

extern char** environ;

namespace loom::cli {
namespace {

using json = nlohmann::json;

constexpr int kListenFd = 3;

struct RunClusterOptions {
  std::string model;
  std::string control;
  int tp = 0, ep = 0, pp = 0;  // 0: the plan's pick
  double wait_s = 30;
  PlanSpeeds speeds;
  std::vector<std::string> run_args;  // everything else, for `loom run`
};

// Runs rank 0 with `env`; stdout is the terminal's, stderr is passed through line by line and
// the generation speed `loom run` reports is picked out of it.  Returns the exit code.
int RunRankZero(const std::vector<std::string>& args, const std::vector<std::string>& env,
                int listener, double* measured) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return 1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  if (listener >= 0) posix_spawn_file_actions_adddup2(&actions, listener, kListenFd);
  std::vector<std::string> argv = {base::SelfExecutable()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv, cenv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> envs = env;
  for (std::string& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargv.data(),
                                cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_pipe[1]);
  if (err != 0) {
    ::close(err_pipe[0]);
    std::fprintf(stderr, "loom cluster run: cannot start rank 0: %s\n", std::strerror(err));
    return 1;
  }
  // Interrupts reach rank 0 (same process group); this process only waits.
  ::signal(SIGINT, SIG_IGN);
  const std::regex speed("generation [0-9]+ tokens, ([0-9.]+) tokens/s");
  std::string partial;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(err_pipe[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      const std::string line = partial.substr(0, nl + 1);
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::smatch m;
      if (std::regex_search(line, m, speed)) *measured = std::stod(m[1].str());
      partial.erase(0, nl + 1);
    }
  }
  if (!partial.empty()) std::fwrite(partial.data(), 1, partial.size(), stderr);
  ::close(err_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Asks the daemon to start ranks 1.. on the other members and runs rank 0 here.
int RunPod(const std::string& path, const std::vector<std::string>& members,
           const std::vector<std::string>& args, double* measured) {
  auto pod = LaunchPod(path, members, args);
  if (!pod.ok()) return Fail("cluster run", pod.status());
  return RunRankZero(args, pod->env, pod->listener.get(), measured);
}

std::vector<std::string> OwnEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

int RunCluster(const RunClusterOptions& o) {
  const std::string path = o.control.empty() ? cluster::DefaultControlPath() : o.control;
  auto view = WaitForSettledView(path, o.wait_s);
  if (!view.ok()) return Fail("cluster run", view.status());
  auto pod = ChoosePod(o.model, *view, o.tp, o.ep, o.pp, o.speeds);
  if (!pod.ok()) return Fail("cluster run", pod.status());
  const int ranks = pod->ranks();
  const double predicted = pod->predicted;
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), o.run_args.begin(), o.run_args.end());
  args.insert(args.end(), {"-m", o.model});
  for (std::string& a : pod->SplitArgs()) args.push_back(std::move(a));
  if (predicted > 0) {
    std::fprintf(stderr, "loom cluster run: %s on %s%s; predicted %.1f tokens/s\n",
                 pod->Describe().c_str(), pod->names.c_str(),
                 pod->pp > 1 ? (" (layers " + pod->stage_layers + ")").c_str() : "", predicted);
  } else {
    std::fprintf(stderr, "loom cluster run: %s on %s\n", pod->Describe().c_str(),
                 pod->names.c_str());
  }
  double measured = 0;
  const int code = ranks == 1 ? RunRankZero(args, OwnEnvironment(), -1, &measured)
                              : RunPod(path, pod->members, args, &measured);
  if (code == 0 && measured > 0) {
    if (predicted > 0) {
      std::fprintf(stderr, "loom cluster run: measured %.1f tokens/s, predicted %.1f (%.0f%%)\n",
                   measured, predicted, 100.0 * measured / predicted);
    } else {
      std::fprintf(stderr, "loom cluster run: measured %.1f tokens/s\n", measured);
    }
  }
  return code;
}

}  // namespace
StatusOr<PodLaunch> LaunchPod(const std::string& path, const std::vector<std::string>& members,
                              const std::vector<std::string>& args) {
  PodLaunch out;
  int port = 0;
  LOOM_ASSIGN_OR_RETURN(out.listener, comm::tcp::Listen("0.0.0.0", 0, &port));
  LOOM_ASSIGN_OR_RETURN(json group, cluster::RequestLaunch(path, members, args, port, 30));
  std::vector<std::string> peers;
  for (const json& p : group["peers"]) peers.push_back(p);
  out.env = cluster::RankEnvironment({0, peers, group["group_id"], group["secret"], kListenFd});
  return out;
}

StatusOr<ServeRankZero> StartServeRankZero(const std::string& path,
                                           const std::vector<std::string>& members,
                                           const std::vector<std::string>& args) {
  PodLaunch pod;
  if (members.size() > 1) {
    LOOM_ASSIGN_OR_RETURN(pod, LaunchPod(path, members, args));
  } else {
    pod.env = OwnEnvironment();
  }
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return InternalError("pipe: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  if (pod.listener.valid()) {
    posix_spawn_file_actions_adddup2(&actions, pod.listener.get(), kListenFd);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> argv = {base::SelfExecutable()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv, cenv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (std::string& e : pod.env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t pid = -1;
  const int err =
      ::posix_spawn(&pid, argv[0].c_str(), &actions, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  if (err != 0) {
    ::close(out_pipe[0]);
    return InternalError("cannot start rank 0: ", std::strerror(err));
  }
  // `loom serve` prints its URL on stdout once it listens; after that its stdout goes to ours.
  static const std::regex kUrl(R"(http://127\.0\.0\.1:(\d+)/)");
  std::string out;
  char buf[4096];
  int port = 0;
  while (port == 0) {
    const ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    std::smatch m;
    if (std::regex_search(out, m, kUrl)) port = std::stoi(m[1].str());
  }
  if (port == 0) {
    ::close(out_pipe[0]);
    int status = 0;
    ::kill(-pid, SIGTERM);
    ::waitpid(pid, &status, 0);
    return UnavailableError("rank 0 (loom serve) exited before it listened; see its messages");
  }
  const int fd = out_pipe[0];
  std::thread([fd] {
    char b[4096];
    ssize_t n;
    while ((n = ::read(fd, b, sizeof(b))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) std::fwrite(b, 1, static_cast<size_t>(n), stderr);
    }
    ::close(fd);
  }).detach();
  return ServeRankZero{pid, port};
}

void AddClusterRunCommand(CLI::App& cluster, std::function<int()>* action) {
  auto o = std::make_shared<RunClusterOptions>();
  CLI::App* run = cluster.add_subcommand(
      "run",
      "Run a model split over the cluster's members as the cost model predicts fastest (every "
      "option not listed here goes to `loom run`; the model must be at the same path, or pulled "
      "under the same name, on every member)");
  run->add_option("-m,--model", o->model, "Model file, directory or pulled name")->required();
  auto* tp = run->add_option("--tp", o->tp, "Tensor-parallel ranks (default: the plan's)")
                 ->check(CLI::Range(1, 64));
  run->add_option("--ep", o->ep,
                  "Expert-parallel ranks, mixtures of experts (default: the plan's)")
      ->check(CLI::Range(1, 64))
      ->excludes(tp);
  run->add_option("--pp", o->pp, "Pipeline stages (default: the plan's)")->check(CLI::Range(1, 64));
  run->add_option("--control", o->control, "The daemon's Unix socket (as for join)");
  run->add_option("--wait", o->wait_s, "Seconds to wait for the daemon and its link measurements")
      ->capture_default_str();
  run->add_option("--decode-gbs", o->speeds.decode_gbs,
                  "Weight GB/s of one rank's decode for the plan (default: measured here)");
  run->add_option("--prompt-gflops", o->speeds.prompt_gflops,
                  "GFLOP/s of one rank's batched products for the plan (default: measured here)");
  run->allow_extras();
  run->callback([o, run, action] {
    o->run_args = run->remaining();
    *action = [o] { return RunCluster(*o); };
  });
}

}  // namespace loom::cli
