// The mixture-of-experts feed-forward block (Mixtral, Qwen3-MoE): a router picks, for each token,
// the k experts of highest softmax probability; the token's output is the sum of those experts'
// SwiGLU outputs weighted by their probabilities renormalised over the k (llama.cpp's order:
// softmax over all experts, top-k, divide by the sum of the k).
//
// Only the chosen experts are computed, each on views of its slice of the stacked 3-D tensors (in
// place, quantized or not, with the ordinary matrix kernels).  A batch is grouped by expert: every
// expert that any token chose runs once, as one matrix-matrix product over its tokens, so a prompt
// reads each expert's weights at most once per layer.  Threads split each product's rows, as in the
// dense block.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/matmul.h"
#include "loom/model/model_file.h"

namespace loom::model {

struct LayerWeights;  // transformer.h

// Routing of one token: experts(k), best first, and their weights(k) summing to one, from the
// router's logits(n_experts).  `probs`(n_experts) is scratch (left holding the softmax).  Ties go
// to the lower expert index.
void RouteTopK(const float* logits, int64_t n_experts, int64_t k, float* probs, int32_t* experts,
               float* weights);

// Scratch of the block, allocated once for batches of up to max_batch tokens (m = max_batch * k
// rows of expert work).
struct MoeScratch {
  // Throws std::bad_alloc.
  void Allocate(const HParams& hp, int64_t max_batch);

  base::AlignedBuffer<float> logits;  // (max_batch, n_experts) router logits, then probabilities
  std::vector<int32_t> chosen;        // (max_batch, k) token i's j-th expert
  std::vector<float> weight;          // (max_batch, k) its weight
  std::vector<int64_t> group_begin;   // (n_experts + 1) each expert's first row of grouped work
  std::vector<int64_t> row_of;        // (max_batch, k) grouped row of token i's j-th choice
  base::AlignedBuffer<float> xg;      // (m, dim) the inputs, grouped by expert
  base::AlignedBuffer<float> gate;    // (m, expert_ffn_dim) gate, then silu(gate) * up
  base::AlignedBuffer<float> up;      // (m, expert_ffn_dim)
  base::AlignedBuffer<float> yg;      // (m, dim) each expert's output, grouped
};

// y(n, dim) = layer L's mixture of experts applied to each row of x(n, dim); n <= the scratch's
// max_batch.  y may be x (x is read only before y is written).
void MoeForward(const HParams& hp, const LayerWeights& L, const float* x, int64_t n, float* y,
                MoeScratch& s, kernels::Workspace& ws, base::ThreadPool& pool);

}  // namespace loom::model
