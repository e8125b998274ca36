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
