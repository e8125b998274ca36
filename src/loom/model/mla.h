// Multi-head latent attention (DeepSeek-V2/V3, GGUF "deepseek2"), with the compressed KV cache.
//
// Per token x (normalised, dim):
//   q        = wq_b · rmsnorm(wq_a · x)  (or attn_q · x)      n_heads heads of nope + rope values
//   [c, kr]  = wkv_a · x                                      latent c (kv_lora_rank), key rope kr
//   c        = rmsnorm(c);  q's rope parts and kr are rotated (the model's rope_dim pairs)
// Head h's key and value are k_h = [Wk_h · c, kr] and v_h = Wv_h · c, with Wk_h (nope, rank) and
// Wv_h (v_head_dim, rank) the two halves of head h's rows of attn_kv_b (or attn_k_b / attn_v_b).
// The cache holds, per position and layer, only [c, kr]: kv_lora_rank + rope_dim values instead
// of n_heads * (head_dim + v_head_dim).  Attention runs in the absorbed form for prompts and
// decode alike: q_h · k_h = (Wk_h^T q_nope_h) · c + q_rope_h · kr, so the query is folded through
// Wk_h once per token, every head attends over the cached latents, and the output
// Wv_h · (sum_p a_p c_p) is applied after the weighted sum.  Scores are scaled by
// YaRN's mscale^2 / sqrt(head_dim), as llama.cpp does.
#pragma once

#include <cstdint>

#include "loom/base/aligned_buffer.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/matmul.h"
#include "loom/model/forward_pass.h"
#include "loom/model/kv_cache.h"
#include "loom/model/model_file.h"

namespace loom::model {

struct LayerWeights;  // transformer.h

// Scratch, allocated once for batches of up to max_batch tokens (n below).
struct MlaScratch {
  // Throws std::bad_alloc.
  void Allocate(const HParams& hp, int64_t max_batch, int threads, int64_t ctx);

  base::AlignedBuffer<float> qa;      // (n, q_lora_rank) query bottleneck
  base::AlignedBuffer<float> q;       // (n, n_heads * head_dim) query heads: nope then rope part
  base::AlignedBuffer<float> kva;     // (n, kv_lora_rank + rope_dim) latent, then rope key
  base::AlignedBuffer<float> qnope;   // (n_heads, n, nope) no-rope query parts, head by head
  base::AlignedBuffer<float> qabs;    // (n_heads, n, kv_lora_rank + rope_dim) absorbed queries
  base::AlignedBuffer<float> outs;    // (n_heads, n, kv_lora_rank + rope_dim) attention outputs
  base::AlignedBuffer<float> lat;     // (n_heads, n, kv_lora_rank) their latent parts
  base::AlignedBuffer<float> vout;    // (n_heads, n, v_head_dim) values per head
  base::AlignedBuffer<float> rows;    // (threads, kv_lora_rank) dequantized rows of attn_kv_b
  base::AlignedBuffer<float> scores;  // (threads, ctx)
};

// The factor attention scores are multiplied by: YaRN's mscale^2 / sqrt(head_dim).
float MlaScoreScale(const HParams& hp);

// att(n, heads * v_head_dim) = layer `layer`'s attention heads (before attn_output) for the
// batch's tokens, whose normalised inputs are x(n, dim); stores each token's latent and rope key
// in cache row (layer, slot, position).  cos_sin: token i's rotation at cos_sin + i * cs_stride
// (rope_dim values).  `heads` (<= n_heads) are the query heads L holds (a tensor-parallel
// rank's, expert parallelism: L's query, decompression and output matrices are those heads'
// rows); every rank computes the whole latent and rope key and caches them.
void MlaForward(const HParams& hp, const LayerWeights& L, int64_t heads, const Batch& batch,
                const float* x,
                const float* cos_sin, int64_t cs_stride, KvCache& cache, int64_t layer, float* att,
                MlaScratch& s, kernels::Workspace& ws, base::ThreadPool& pool);

}  // namespace loom::model
