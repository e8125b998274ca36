// The decoder-only transformer forward pass shared by the Llama family (Llama 2/3, Mistral, Qwen):
// RMSNorm, rotary attention with grouped key/value heads, SwiGLU feed-forward.  Architecture files
// (arch_*.cc) bind a model's tensors into TransformerWeights; the forward pass reads only those.
//
// The pass takes a batch of tokens that may belong to different sequences (KV-cache slots) at
// different positions, so prompt processing is matrix-matrix work and a server can batch decode
// steps of many requests.  It is split into Embed / Layers / Logits so that a pipeline stage can
// run a range of layers on hidden states it received, and it calls an optional Collective after the
// attention and feed-forward output projections, where tensor-parallel ranks sum partial results.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/matmul.h"
#include "loom/model/forward_pass.h"
#include "loom/model/kv_cache.h"
#include "loom/model/mla.h"
#include "loom/model/model_file.h"
#include "loom/model/moe.h"
#include "loom/model/rope.h"

namespace loom::model {

// The part of a model one rank holds: a range of layers (pipeline parallelism) and, inside each
// layer, a range of query heads and feed-forward columns (tensor parallelism).  The default is the
// whole model.  Key/value heads follow from the query heads (a KV head is held by every rank that
// holds one of its query heads, so it is replicated when there are more ranks than KV heads).
struct ShardSpec {
  int64_t layer_begin = 0;
  int64_t layer_end = -1;  // -1: n_layers
  int64_t head_begin = 0;
  int64_t n_heads = -1;  // -1: all query heads
  int64_t ffn_begin = 0;
  int64_t ffn_dim = -1;      // -1: all feed-forward columns
  int64_t expert_begin = 0;  // mixture of experts: the routed experts held (expert parallelism)
  int64_t n_experts = -1;    // -1: all of them
  // Or every expert, each split into expert_parts row parts of which this shard holds part
  // expert_part: rows [p * f / P, (p + 1) * f / P) of its gate and up (f = expert_ffn_dim) and
  // rows [p * dim / P, (p + 1) * dim / P) of its down (moe.h: one all-reduce between them).
  int64_t expert_part = 0;
  int64_t expert_parts = 1;
  int64_t shared_begin = 0;  // and the shared experts' columns held (of hp.shared_ffn())
  int64_t shared_dim = -1;   // -1: all of them
  bool embed = true;         // holds the token embedding (first stage)
  bool head = true;          // holds the final norm and output head (last stage)
  int64_t vocab_begin = 0;   // with head: the output head's rows (vocabulary entries) held
  int64_t vocab_count = -1;  // -1: all of them
};

// Sizes of the shard as the forward pass sees them.
struct LocalDims {
  int64_t layer_begin = 0;
  int64_t layer_end = 0;
  int64_t head_dim = 0;
  int64_t head_begin = 0;     // global index of the first query head held
  int64_t n_heads = 0;        // query heads held
  int64_t kv_head_begin = 0;  // global index of the first key/value head held
  int64_t n_kv_heads = 0;     // key/value heads held
  int64_t ffn_begin = 0;      // first feed-forward column held
  int64_t ffn_dim = 0;        // feed-forward columns held
  int64_t expert_begin = 0;   // first routed expert held (mixture of experts)
  int64_t n_experts = 0;      // routed experts held
  int64_t expert_part = 0;    // the row part of each held expert (ShardSpec)
  int64_t expert_parts = 1;
  int64_t shared_begin = 0;   // first shared-expert column held
  int64_t shared_dim = 0;     // shared-expert columns held (0: the model has none)
  bool embed = true;
  bool head = true;
  int64_t vocab_begin = 0;  // output head rows held (Logits computes these vocabulary entries)
  int64_t vocab_count = 0;
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t n_layers() const { return layer_end - layer_begin; }
};

// The rows of every routed expert a shard holds (LocalDims::expert_part of expert_parts): its gate
// and up rows [ffn_begin, +ffn) of expert_ffn_dim, its down rows [dim_begin, +dim) of dim.
struct ExpertRows {
  int64_t ffn_begin = 0, ffn = 0;
  int64_t dim_begin = 0, dim = 0;
};
ExpertRows ExpertRowsOf(const HParams& hp, const LocalDims& d);

struct LayerWeights {
  const float* attn_norm = nullptr;  // (dim)
  kernels::MatrixView wq;            // (n_heads * head_dim, dim)
  kernels::MatrixView wk;            // (n_kv_heads * head_dim, dim)
  kernels::MatrixView wv;            // (n_kv_heads * head_dim, dim)
  kernels::MatrixView wo;            // (dim, n_heads * head_dim)
  const float* bq = nullptr;         // (n_heads * head_dim) or null (Qwen2 biases)
  const float* bk = nullptr;         // (n_kv_heads * head_dim) or null
  const float* bv = nullptr;         // (n_kv_heads * head_dim) or null
  const float* q_norm = nullptr;     // (head_dim) or null (Qwen3 per-head RMSNorm)
  const float* k_norm = nullptr;     // (head_dim) or null
  const float* ffn_norm = nullptr;   // (dim)
  kernels::MatrixView w_gate;        // (ffn_dim, dim)
  kernels::MatrixView w_up;          // (ffn_dim, dim)
  kernels::MatrixView w_down;        // (dim, ffn_dim)
  // Mixture of experts (hp.is_moe(); then w_gate, w_up and w_down are empty).  experts[e] holds
  // expert e's SwiGLU matrices, in place: row ranges of GGUF's and MLX's stacked 3-D tensors, or
  // one tensor each (Hugging Face files).  An expert-parallel rank binds only its own experts; the
  // others' views are empty (data null).
  struct Expert {
    kernels::MatrixView gate;  // (expert_ffn_dim, dim)
    kernels::MatrixView up;    // (expert_ffn_dim, dim)
    kernels::MatrixView down;  // (dim, expert_ffn_dim)
  };
  kernels::MatrixView router;   // (n_experts, dim)
  std::vector<Expert> experts;  // (n_experts)
  // DeepSeek-V3's additions: the choice bias (exp_probs_b) and the shared experts, one SwiGLU of
  // s = hp.shared_ffn() columns; empty / null when absent.  Leading dense layers
  // (hp.n_dense_layers) have w_gate / w_up / w_down and no router.  Qwen2-MoE's shared expert is
  // gated: its output times sigmoid(shexp_gate_inp . x) (ffn_gate_inp_shexp), when not null.
  const float* expert_bias = nullptr;     // (n_experts)
  kernels::MatrixView shexp_gate;         // (s, dim)
  kernels::MatrixView shexp_up;           // (s, dim)
  kernels::MatrixView shexp_down;         // (dim, s)
  const float* shexp_gate_inp = nullptr;  // (dim)
  // Multi-head latent attention (hp.is_mla(), mla.h; then wk and wv are empty and wq is attn_q
  // or empty).  nope = head_dim - rope_dim, rank = kv_lora_rank.
  kernels::MatrixView wq_a;          // (q_lora_rank, dim) or empty
  const float* q_a_norm = nullptr;   // (q_lora_rank)
  kernels::MatrixView wq_b;          // (n_heads * head_dim, q_lora_rank)
  kernels::MatrixView wkv_a;         // (rank + rope_dim, dim)
  const float* kv_a_norm = nullptr;  // (rank)
  kernels::MatrixView wkv_b;         // (n_heads * (nope + v_head_dim), rank), or empty when
  kernels::MatrixView wk_b;          // (n_heads * rank, nope) and
  kernels::MatrixView wv_b;          // (n_heads * v_head_dim, rank) are given (newer files)
};

// Views of a model's weights (into its ModelFile's mappings) plus f32 copies of small vectors that
// were stored in other types.  The ModelFile must outlive it.
struct TransformerWeights {
  HParams hp;                                               // the whole model's hyperparameters
  LocalDims local;                                          // what this shard holds
  kernels::MatrixView token_embd;                           // (vocab, dim)
  std::vector<LayerWeights> layers;                         // (local.layer_end - local.layer_begin)
  const float* output_norm = nullptr;                       // (dim)
  kernels::MatrixView output;                               // (vocab, dim); the embedding when tied
  std::vector<std::unique_ptr<float[]>> owned;              // storage behind converted vectors
  std::vector<base::AlignedBuffer<std::byte>> owned_bytes;  // packed column slices (BindCols)
};

// Binds the tensors of a model whose architecture is registered (see arch.h), for the whole model
// or one shard of it.  Errors when the shard does not fit the model (ranges outside it, head or
// column ranges that cut a quantized block).
StatusOr<TransformerWeights> BindWeights(const ModelFile& file, const ShardSpec& shard = {});

// Tensor-parallel ranks sum partial outputs here; null for a single process.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual Status AllReduceSum(float* data, int64_t n) = 0;
};

struct TransformerOptions {
  int64_t max_batch = 256;        // tokens per Forward call (prompts are run in chunks of this)
  int64_t context = 0;            // positions per sequence; 0 = the model's trained context
  int64_t n_slots = 1;            // sequences held in the KV cache at once
  KvType kv_type = KvType::kF32;  // rows of the KV cache (kQ8_0: not for latent attention)
};

class Transformer : public ForwardPass {
 public:
  // `weights` must outlive the transformer; `pool` too.
  static StatusOr<std::unique_ptr<Transformer>> Create(const TransformerWeights& weights,
                                                       const TransformerOptions& options,
                                                       base::ThreadPool& pool);

  const HParams& hparams() const override { return w_.hp; }
  const LocalDims& local() const { return w_.local; }
  int64_t context() const override { return ctx_; }
  int64_t max_batch() const override { return max_batch_; }
  int64_t n_slots() const override { return cache_.n_slots(); }
  const KvCache& cache() const { return cache_; }
  void set_collective(Collective* collective) { collective_ = collective; }

  // Runs the whole model: logits(batch.logit_rows.size(), vocab).
  Status Forward(const Batch& batch, float* logits) override;

  // The parts of Forward, for pipeline stages.  x(n, dim) is hidden_state().  Layers runs the
  // shard's layers; Embed and Logits need a shard with the embedding / the output head.
  Status Embed(std::span<const int32_t> tokens);
  Status Layers(const Batch& batch);
  // Logits writes (rows.size(), local().vocab_count): the shard's slice of the vocabulary.
  Status Logits(std::span<const int32_t> rows, float* logits);
  float* hidden_state() { return x_.data(); }  // (max_batch, dim)

 private:
  Transformer(const TransformerWeights& weights, base::ThreadPool& pool)
      : w_(weights), pool_(pool) {}
  Status Validate(const Batch& batch) const;
  // Layer l's grouped-query attention (not latent): q/k/v projections, RoPE, the cache, heads.
  void AttentionBlock(const Batch& batch, int64_t layer);
  void Attention(const Batch& batch, int64_t layer);

  const TransformerWeights& w_;
  base::ThreadPool& pool_;
  Collective* collective_ = nullptr;
  int64_t max_batch_ = 0;
  int64_t ctx_ = 0;
  RopeTable rope_;
  KvCache cache_;
  kernels::Workspace ws_;

  // Scratch, allocated once; n = max_batch.
  base::AlignedBuffer<float> x_;        // (n, dim) residual stream
  base::AlignedBuffer<float> xb_;       // (n, dim) normalized input / projection output
  base::AlignedBuffer<float> q_;        // (n, local q_dim)
  base::AlignedBuffer<float> k_;        // (n, local kv_dim)
  base::AlignedBuffer<float> v_;        // (n, local kv_dim)
  base::AlignedBuffer<float> att_;      // (n, local q_dim) attention output
  base::AlignedBuffer<float> hb_;       // (n, local ffn_dim) gate, then silu(gate) * up
  base::AlignedBuffer<float> hb2_;      // (n, local ffn_dim) up
  base::AlignedBuffer<float> cos_sin_;  // (n, head_dim) rotation of each token's position
  // Attention (kernels::AttendMany): per thread, the queries of one call (up to kAttendTile rows
  // x the query heads of a kv head) and its scratch; tile_begin_ (n + 1) the batch's row runs.
  std::vector<kernels::AttendQuery> attend_queries_;  // (threads, kAttendTile * group)
  base::AlignedBuffer<float> attend_scratch_;         // (threads, AttendScratchFloats(...))
  std::vector<int32_t> tile_begin_;
  MoeScratch moe_;  // mixture-of-experts models only
  MlaScratch mla_;  // latent-attention models only
};

}  // namespace loom::model
