// The cost model and planner: for a model and a set of equal ranks joined by links of a given
// latency and bandwidth, predicts prompt and generation tokens/s of every feasible plan (pipeline,
// tensor, hybrid) and picks the best.  DESIGN.md states the model:
//   decode time per token = weights read per rank / memory bandwidth
//                         + TP: 2 x layers x (link latency + message / link bandwidth)
//                         + PP: (stages - 1) x (hop latency + hidden / link bandwidth)
// Here the stages of a decode step run one after another (a token passes through all of them), the
// ranks of a stage run at once, and the logits travel back to rank 0 once per step.  Prompts are
// compute-bound: chunks of a prompt flow through the stages pipelined.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/parallel/plan.h"

namespace loom::cluster {

// What one rank can do, measured (Calibrate) or given.
struct RankFacts {
  int64_t memory_bytes = 0;              // available for weights and KV cache; 0 = unchecked
  double decode_bytes_per_s = 0;         // weight bytes/s of matrix-vector products, rank alone
  double decode_bytes_per_s_shared = 0;  // the same while every rank of its host runs (0 = alone)
  double prompt_flops = 0;               // FLOP/s of batched matrix products (prompt processing)
};

struct LinkFacts {
  double latency_s = 0;    // one-way, per message
  double bytes_per_s = 0;  // per direction; 0 = unlimited
};

struct CostInputs {
  int ranks = 1;  // plans use 1..ranks of them
  RankFacts rank;
  LinkFacts link;
  int64_t prompt_tokens = 512;  // prompt length for the prompt-speed prediction
  int64_t chunk = 256;          // prompt tokens per forward pass (pipelined chunks)
  int64_t context = 0;          // KV positions (memory check); 0 = the model's
  // Ranks that differ in memory (members of a self-forming pod), in rank order: each rank's
  // memory for the fit check, and each pipeline stage's layers in proportion to the least memory
  // among its ranks.  Empty: every rank has rank.memory_bytes and stages split evenly.
  std::vector<int64_t> rank_memory;
};

struct Prediction {
  int tp = 1;
  int ep = 1;  // mixtures of experts split their groups by experts (tp stays 1)
  int pp = 1;
  int group() const { return tp * ep; }  // ranks per stage
  int ranks() const { return tp * ep * pp; }
  std::string Name() const;  // "tp2 pp1", "ep2 pp1"
  bool feasible = false;
  std::string why_not;  // when not feasible
  double decode_tokens_per_s = 0;
  double prompt_tokens_per_s = 0;
  double decode_compute_s = 0;  // per token: reading weights
  double decode_link_s = 0;     // per token: collectives and hops
  parallel::ParallelPlan plan;
};

// Expected number of experts the busiest rank of an expert-parallel group computes for one token
// in one layer: k experts out of n chosen at random (uniformly, without replacement), rank r
// holding group[r] of them (n = their sum); exact.  Real routers are trained to balance their
// experts' load over many tokens, not to spread one token's choices, so uniform choice is the
// cost model's assumption (docs/parallel.md).  One group: k.
double ExpectedBusiestExperts(const std::vector<int64_t>& group, int64_t k);

// "tp2 pp1", or "ep2 pp1" for an expert-parallel group (ep > 1).
std::string SplitName(int tp, int ep, int pp);

// Every (group, pp) with group * pp <= ranks, feasible or not (with the reason); the group is tp
// ranks, or ep for mixtures of experts.
std::vector<Prediction> PredictAll(const model::ModelFile& file, const CostInputs& in);

// The feasible plan with the highest generation speed (ties: fewer ranks); null when none.
const Prediction* PickBest(const std::vector<Prediction>& predictions);

// Measures this machine with the model's own kernels: decode steps of the real forward pass over
// a share of the model's layers, one thread each (decode bytes/s alone, and the slowest of
// `ranks_on_host` copies running at once on different layers), and a batched product (prompt
// FLOP/s).
StatusOr<RankFacts> Calibrate(const model::ModelFile& file, int ranks_on_host);

}  // namespace loom::cluster
