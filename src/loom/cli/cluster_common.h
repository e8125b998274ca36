// Shared by `loom cluster status` and `loom cluster run` (cmd_cluster.cc, cmd_cluster_run.cc).
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

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

// The cost model's predictions for `model` on the view's members: equal ranks at the slowest
// member's speed and memory (members on one host share it), joined by the slowest of the fastest
// links.  {model, ranks, rank, link, plans: [...], pick: {tp, pp, decode_tokens_per_s, ...}}.
StatusOr<nlohmann::json> PlanFor(const std::string& model, const nlohmann::json& view,
                                 const PlanSpeeds& speeds, bool quiet);

void AddClusterRunCommand(CLI::App& cluster, std::function<int()>* action);

}  // namespace loom::cli
