// Shard plans as data: for a pod of tp x pp ranks, which layers (pipeline stage), which query heads
// and which feed-forward columns (tensor-parallel slice) each rank holds.  Rank r is stage r / tp,
// tensor-parallel rank r % tp.  Plans are validated against the model: heads must divide among the
// tensor-parallel ranks (key/value heads are replicated when there are fewer of them than ranks),
// column slices must not cut a quantized block, every layer belongs to exactly one stage, and
// every rank's share must fit in its memory.
//
// Expert parallelism (mixtures of experts, `--ep N`): the tensor-parallel group of N ranks splits
// each layer's attention heads as TP does, and each mixture-of-experts layer's routed experts
// either by rows (the default: every rank holds 1/N of the rows of every expert, so a token's k
// experts are N even shares of work; one more all-reduce per layer gathers the experts'
// activations between their gate/up and down products, model/moe.h) or into N consecutive ranges
// of whole experts (every rank computes the chosen experts it holds: the busiest rank of a token
// computes more than k / N of them); every rank routes every token; shared experts and dense
// layers split by columns.  One all-reduce after each block, as TP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/model/transformer.h"

namespace loom::parallel {

struct RankPlan {
  int rank = 0;
  int stage = 0;    // pipeline position
  int tp_rank = 0;  // position inside the stage's tensor-parallel group
  model::ShardSpec shard;
  int64_t weight_bytes = 0;  // bytes of weights this rank holds
  int64_t kv_bytes = 0;      // its KV cache
};

struct ParallelPlan {
  int tp = 1;  // ranks per stage (the tensor-parallel, or expert-parallel, group)
  int pp = 1;
  bool ep = false;  // the group splits experts (expert parallelism), not feed-forward columns
  std::vector<RankPlan> ranks;  // (tp * pp), by rank
  int world_size() const { return tp * pp; }
  const RankPlan& rank(int r) const { return ranks[static_cast<size_t>(r)]; }
  // "pp=2 tp=2: stage 0 layers [0, 11) ranks 0-1, ..." for logs.
  std::string Describe() const;
};

struct PlanRequest {
  int tp = 1;
  int pp = 1;
  int ep = 1;  // expert-parallel ranks per stage (mixtures of experts); tp must then be 1
  bool ep_whole_experts = false;  // ep: ranges of whole experts instead of rows of every expert
  // Explicit layer counts per stage (pp values summing to n_layers); empty = split by weight.
  std::vector<int64_t> stage_layers;
  // Relative capacity of each stage (e.g. its free memory) for the automatic layer split; empty =
  // equal.  Ignored when stage_layers is given.
  std::vector<double> stage_weights;
  // Memory available to each rank in bytes (tp * pp values, or one value for all); empty = unchecked.
  std::vector<int64_t> rank_memory;
  int64_t context = 0;  // KV-cache positions per sequence (0 = the model's)
  int64_t n_slots = 1;  // sequences held at once
};

StatusOr<ParallelPlan> MakePlan(const model::ModelFile& file, const PlanRequest& request);

// The layer of a "blk.N." tensor name, -1 for tensors outside the layers.
int64_t TensorLayer(const std::string& name);

// Bytes of the tensors a shard needs (the memory a rank must hold for weights).
int64_t ShardWeightBytes(const model::ModelFile& file, const model::ShardSpec& shard);

}  // namespace loom::parallel
