// The mixture-of-experts feed-forward block (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3): a router
// picks, for each token, k experts (Routing below: softmax or sigmoid, DeepSeek-V3's choice bias
// and group-limited choice); the token's output is the sum of those experts' SwiGLU outputs
// weighted by their (renormalised, scaled) probabilities, plus the shared experts' output if any
// (scaled by a per-token sigmoid gate in Qwen2-MoE).
//
// Only the chosen experts are computed, each on views of its slice of the stacked 3-D tensors (in
// place, quantized or not, with the ordinary matrix kernels).  A batch is grouped by expert: every
// expert that any token chose runs once, as one matrix-matrix product over its tokens, so a prompt
// reads each expert's weights at most once per layer.  The gate and up products of all chosen
// experts run as one pass over the thread pool (threads split their rows together, weighted by
// each expert's tokens), the down products as a second: a decode step of Qwen3-MoE's 8 experts is
// two pool round trips, not 16.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/matmul.h"
#include "loom/model/model_file.h"

namespace loom::model {

struct LayerWeights;  // transformer.h
struct ExpertRows;    // transformer.h
class Collective;     // transformer.h

// How a token's experts are chosen and weighted, as llama.cpp's build_moe_ffn does:
//   p = softmax(logits) or sigmoid(logits)           (n_experts)
//   s = p + bias                                     (the choice scores; bias may be null)
//   groups (n_groups > 1): experts in n_groups equal consecutive groups, each scored by the sum
//     of its two largest s; s outside the n_groups_used best groups is set to -infinity
//   experts = the k largest s, best first (ties: the lower index)
//   weights = p of those; divided by their sum when `norm` (the sum at least 2^-14); times scale.
struct Routing {
  int64_t n_experts = 0;
  int64_t k = 0;
  HParams::Gating gating = HParams::Gating::kSoftmax;
  const float* bias = nullptr;  // (n_experts) or null
  int64_t n_groups = 1;
  int64_t n_groups_used = 1;
  bool norm = true;
  float scale = 1.0f;
};
// The model's routing for a layer whose choice bias is `bias` (null when none).
Routing RoutingOf(const HParams& hp, const float* bias);

// Routes one token: experts(k) and weights(k) from the router's logits(n_experts).  probs and
// select (n_experts each) are scratch; probs may be logits.
void Route(const Routing& r, const float* logits, float* probs, float* select, int32_t* experts,
           float* weights);

// Softmax routing renormalised over the k (Mixtral, Qwen3-MoE): Route with the defaults.
void RouteTopK(const float* logits, int64_t n_experts, int64_t k, float* probs, int32_t* experts,
               float* weights);

// Qwen2-MoE's shared-expert gate: out(n, dim) row i times sigmoid(gate_inp(dim) . x row i).
void ScaleBySharedGate(const float* gate_inp, const float* x, int64_t n, int64_t dim, float* out);

// Scratch of the block, allocated once for batches of up to max_batch tokens (m = max_batch * k
// rows of expert work).
struct MoeScratch {
  // Throws std::bad_alloc.
  void Allocate(const HParams& hp, int64_t max_batch);

  base::AlignedBuffer<float> logits;  // (max_batch, n_experts) router logits, then probabilities
  base::AlignedBuffer<float> select;  // (n_experts) one token's choice scores
  std::vector<int32_t> chosen;        // (max_batch, k) token i's j-th expert
  std::vector<float> weight;          // (max_batch, k) its weight
  std::vector<int64_t> group_begin;   // (n_experts + 1) each expert's first row of grouped work
  std::vector<int64_t> row_of;        // (max_batch, k) grouped row of token i's j-th choice
  base::AlignedBuffer<float> xg;      // (m, dim) the inputs, grouped by expert
  base::AlignedBuffer<float> gate;    // (m, expert_ffn_dim) gate, then silu(gate) * up
  base::AlignedBuffer<float> up;      // (m, expert_ffn_dim); by row parts, the gathered gate
  base::AlignedBuffer<float> yg;      // (m, dim) each expert's output, grouped
  // The grouped products of one pass (kernels::MatMulGrouped), at most 2 * n_experts.
  std::vector<int32_t> held;                 // experts with tokens that this process holds
  std::vector<kernels::MatrixView> w_list;   // their matrices
  std::vector<int64_t> x_rows, n_list;       // each product's first input row and row count
  std::vector<float*> y_list;                // its output
  // Shared experts (hp.n_shared_experts > 0), s = hp.shared_ffn().
  base::AlignedBuffer<float> sh_gate;  // (max_batch, s) gate, then silu(gate) * up
  base::AlignedBuffer<float> sh_up;    // (max_batch, s)
  base::AlignedBuffer<float> sh_out;   // (max_batch, dim)
};

// y(n, dim) = layer L's mixture of experts applied to each row of x(n, dim), plus its shared
// experts' output when it has them (times sigmoid(L.shexp_gate_inp . x) when the layer has that
// gate, as Qwen2-MoE); n <= the scratch's max_batch.  y may be x (x is read only
// before y is written).
//
// `rows` null, or whole: L holds its experts whole.  Otherwise L's experts are those rows of every
// expert (expert parallelism by row parts, ShardSpec::expert_parts): this rank computes its rows
// of each chosen expert's silu(gate x) * up x, the group's ranks gather the whole activations with
// one all-reduce through `collective` (each rank's rows, zeros elsewhere: the sum is exact), and
// the rank computes its rows of the down products and of y, zeros elsewhere; the all-reduce after
// the block (the caller's) completes y.  Every value is computed whole by one rank, so y is one
// process's bit for bit.
Status MoeForward(const HParams& hp, const LayerWeights& L, const float* x, int64_t n, float* y,
                  MoeScratch& s, kernels::Workspace& ws, base::ThreadPool& pool,
                  const ExpertRows* rows = nullptr, Collective* collective = nullptr);

}  // namespace loom::model
