#include "loom/cli/pod.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "loom/base/sysinfo.h"
#include "loom/base/thread_pool.h"
#include "loom/cli/common.h"
#include "loom/cluster/launcher.h"
#include "loom/comm/config.h"
#include "loom/model/model_file.h"

namespace loom::cli {

void AddPodFlags(CLI::App& app, PodFlags& f) {
  app.add_option("--tp", f.tp, "Tensor-parallel ranks (every layer split across them)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--ep", f.ep,
                 "Expert-parallel ranks (mixtures of experts: each layer's experts split across "
                 "them, attention heads as --tp; not with --tp)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--pp", f.pp, "Pipeline-parallel stages (consecutive layers per stage)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--backend", f.backend,
                 "Transport between the ranks this command starts itself: shm, tcp or mpi "
                 "(under `loom launch`, the launcher's choice applies)")
      ->capture_default_str()
      ->check(CLI::IsMember({"shm", "tcp", "mpi"}));
  app.add_option("--stage-layers", f.stage_layers,
                 "Layers per pipeline stage, comma-separated (default: even split)");
}

bool NeedsSelfLaunch(const PodFlags& flags) {
  return flags.distributed() && std::getenv("LOOM_RANK") == nullptr &&
         std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
}

namespace {

// This process's argv, from /proc (the CLI layer keeps no global copy of main's argv).
std::vector<std::string> OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t begin = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      args.push_back(all.substr(begin, i - begin));
      begin = i + 1;
    }
  }
  return args;
}

}  // namespace

int SelfLaunch(const PodFlags& flags, const char* command) {
  cluster::LaunchSpec spec;
  spec.num_ranks = flags.world_size();
  spec.backend = flags.backend;
  spec.self_exe = base::SelfExecutable();
  spec.command = OwnCommandLine();
  if (spec.command.empty()) {
    return Fail(command, InternalError("cannot read this process's command line"));
  }
  spec.command[0] = spec.self_exe;
  spec.as_root = ::geteuid() == 0;
  spec.local_cores = base::ThreadPool::AvailableCores();
  cluster::RunOptions options;
  options.forward_signals = true;
  auto result = cluster::Launch(spec, options);
  if (!result.ok()) return Fail(command, result.status());
  if (result->exit_code != 0 && !result->message.empty()) {
    std::fprintf(stderr, "loom %s: %s\n", command, result->message.c_str());
  }
  return result->exit_code;
}

parallel::PodRank PodSession::rank() const {
  return {world.get(), tp_group.get(), &plan, model.transformer.get()};
}

StatusOr<std::unique_ptr<PodSession>> JoinPod(const PodFlags& flags, engine::LoadOptions load) {
  auto s = std::make_unique<PodSession>();
  LOOM_ASSIGN_OR_RETURN(s->world, comm::CreateGroupFromEnvironment());
  if (flags.tp > 1 && flags.ep > 1) {
    return InvalidArgumentError("--tp and --ep cannot be combined: --ep splits attention heads as "
                                "--tp does, and experts besides");
  }
  if (s->world->size() != flags.world_size()) {
    return InvalidArgumentError("the group has ", s->world->size(), " ranks but --",
                                flags.ep > 1 ? "ep " : "tp ", flags.tp * flags.ep, " x --pp ",
                                flags.pp, " needs ", flags.world_size());
  }
  parallel::PlanRequest request;
  request.tp = flags.tp;
  request.ep = flags.ep;
  request.pp = flags.pp;
  request.context = load.context;
  request.n_slots = load.n_slots;
  if (!flags.stage_layers.empty()) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> layers, ParseIdList(flags.stage_layers));
    request.stage_layers.assign(layers.begin(), layers.end());
  }
  {
    LOOM_ASSIGN_OR_RETURN(auto file, model::OpenModel(load.model_path));
    LOOM_ASSIGN_OR_RETURN(s->plan, parallel::MakePlan(*file, request));
  }
  const int rank = s->world->rank();
  load.shard = s->plan.rank(rank).shard;
  load.load_tokenizer = rank == 0;
  if (load.threads == 0) {
    const char* local = std::getenv("LOOM_LOCAL_SIZE");
    const int local_ranks = local != nullptr ? std::max(1, std::atoi(local)) : 1;
    load.threads = std::max(1, base::ThreadPool::AvailableCores() / local_ranks);
  }
  LOOM_ASSIGN_OR_RETURN(s->model, engine::LoadModel(load));
  LOOM_ASSIGN_OR_RETURN(s->tp_group, parallel::MakeTensorParallelGroup(*s->world, s->plan));
  if (rank == 0) s->driver = std::make_unique<parallel::PodModel>(s->rank());
  return s;
}

}  // namespace loom::cli
