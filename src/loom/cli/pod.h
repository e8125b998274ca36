// Running a command as a pod: `--tp T --pp P` (or `--ep E --pp P` for mixtures of experts) on
// `loom run` (and `loom serve`).  Under `loom launch`
// (LOOM_RANK in the environment) each process joins the group the launcher made; started without
// it, the command starts its T x P local ranks itself by running its own command line under the
// launcher, and rank 0's output comes through unchanged.
#pragma once

#include <memory>
#include <string>

#include "loom/base/status.h"
#include "loom/comm/group.h"
#include "loom/engine/loaded_model.h"
#include "loom/parallel/plan.h"
#include "loom/parallel/pod_model.h"

namespace CLI {
class App;
}

namespace loom::cli {

struct PodFlags {
  int tp = 1;
  int ep = 1;  // expert-parallel ranks per stage (a group of ep ranks instead of tp)
  int pp = 1;
  std::string backend = "shm";  // for ranks this command starts itself
  std::string stage_layers;     // "11,11": layers per pipeline stage ("" = split evenly)
  int world_size() const { return tp * ep * pp; }
  bool distributed() const { return world_size() > 1; }
  // "tp 2 x pp 1", or "ep 2 x pp 1" with experts split.
  std::string Describe() const {
    return (ep > 1 ? "ep " + std::to_string(ep) : "tp " + std::to_string(tp)) + " x pp " +
           std::to_string(pp);
  }
};
void AddPodFlags(CLI::App& app, PodFlags& flags);

// Whether this process must start the pod's ranks itself (a pod was asked for and this process is
// not one of a launched group's ranks).
bool NeedsSelfLaunch(const PodFlags& flags);

// Runs this process's own command line as world_size() local ranks and waits for them.  Returns the exit
// code (non-zero with a message naming the failing rank).
int SelfLaunch(const PodFlags& flags, const char* command);

// One rank of a running pod: its groups, the plan, its shard of the model and, on rank 0, the
// PodModel that drives the others.
struct PodSession {
  std::unique_ptr<comm::Group> world;
  std::unique_ptr<comm::Group> tp_group;
  parallel::ParallelPlan plan;
  engine::LoadedModel model;
  std::unique_ptr<parallel::PodModel> driver;  // rank 0 only
  parallel::PodRank rank() const;
  bool is_driver() const { return world->rank() == 0; }
};

// Joins the group from the environment, plans (checking the group size), and loads this rank's
// shard (`load` names the model; its shard field is filled in here; the tokenizer is loaded on
// rank 0 only).  Threads default to this host's cores divided among its ranks.
StatusOr<std::unique_ptr<PodSession>> JoinPod(const PodFlags& flags, engine::LoadOptions load);

}  // namespace loom::cli
