// Shared by `loom cluster status` and `loom cluster run` (cmd_cluster.cc, cmd_cluster_run.cc).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/base/fd.h"
#include "loom/base/status.h"

namespace CLI {
class App;
}

namespace loom::cli {

// Rank speeds given instead of measured (both > 0: nothing is measured).
struct PlanSpeeds {
  double decode_gbs = 0;
  double prompt_gflops = 0;
};

// Whether every pair of the view's members has a measured link and no probe is pending.
bool Settled(const nlohmann::json& view);

// The daemon's view, after waiting (up to wait_s) for `wait_members` members with measured links
// (0: no waiting).
StatusOr<nlohmann::json> WaitForView(const std::string& control_path, int wait_members,
                                     double wait_s);

// The view's members in the order they take ranks: this one (rank 0), then the others, the fastest
// link from this one first.
std::vector<nlohmann::json> MembersInRankOrder(const nlohmann::json& view);

// The cost model's predictions for `model` on the view's members (in rank order): ranks at the
// slowest member's speed, each with its member's memory (members on one host share it; pipeline
// stages get layers in proportion to it), joined by the slowest of the fastest links.
// {model, ranks, members, rank, link, plans: [...],
//  pick: {tp, pp, members: [ids by rank], stage_layers: [...], decode_tokens_per_s, ...}}.
StatusOr<nlohmann::json> PlanFor(const std::string& model, const nlohmann::json& view,
                                 const PlanSpeeds& speeds, bool quiet);

// The daemon's view once every member's links are measured (waiting up to wait_s for the daemon,
// then for its probes).
StatusOr<nlohmann::json> WaitForSettledView(const std::string& control_path, double wait_s);

// Which split a pod gets and which members hold its ranks: `tp` x `pp` as given (0 for both:
// the cost model's pick; a split given in part is completed with 1, as `loom run` does), the
// members in rank order (MembersInRankOrder, or the pick's).
struct PodChoice {
  int tp = 1, ep = 1, pp = 1;  // ep > 1: an expert-parallel group of ep ranks (then tp is 1)
  int ranks() const { return tp * ep * pp; }
  std::string Describe() const;      // "tp 2 x pp 1", "ep 2 x pp 1"
  std::vector<std::string> members;  // ids, by rank
  std::string names;                 // "a, b", for people
  std::string stage_layers;          // the pick's layers per stage, "5,3"; "" = an even split
  double predicted = 0;              // the pick's generation tokens/s; 0 for a split given
  PlanSpeeds measured;               // the rank speeds the pick used (to plan again quickly)
  // "--tp T --pp P [--stage-layers ...]" (or --ep E) for the ranks' command line.
  std::vector<std::string> SplitArgs() const;
};
// tp, ep and pp as given on the command line (0: the plan's pick; ep > 0 asks for experts split).
StatusOr<PodChoice> ChoosePod(const std::string& model, const nlohmann::json& view, int tp,
                              int ep, int pp, const PlanSpeeds& speeds);

// A pod launched through the daemon for a rank 0 that runs here: the environment of rank 0
// (LOOM_* of its group, LOOM_LISTEN_FD=3) and the listener to hand it as fd 3.
struct PodLaunch {
  std::vector<std::string> env;
  base::Fd listener;
};
StatusOr<PodLaunch> LaunchPod(const std::string& control_path,
                              const std::vector<std::string>& members,
                              const std::vector<std::string>& args);

// Starts rank 0 of `loom serve` (args: "serve" and its options, with --port 0) on a pod of
// `members` (one: no pod) and waits until it listens.
struct ServeRankZero {
  int pid = -1;   // leads a process group of its own
  int port = 0;   // on 127.0.0.1
};
StatusOr<ServeRankZero> StartServeRankZero(const std::string& control_path,
                                           const std::vector<std::string>& members,
                                           const std::vector<std::string>& args);

void AddClusterRunCommand(CLI::App& cluster, std::function<int()>* action);
void AddClusterServeCommand(CLI::App& cluster, std::function<int()>* action);

}  // namespace loom::cli
