// One description of a model, whatever file format it came from: hyperparameters, a table of named
// tensors that point into memory-mapped files, and the tokenizer data stored with the model.
//
// Tensor names follow GGUF's llama convention whatever the source format:
//   token_embd.weight (vocab, dim)     output_norm.weight (dim)     output.weight (vocab, dim)
//   blk.N.attn_norm.weight (dim)       blk.N.ffn_norm.weight (dim)
//   blk.N.attn_q.weight (n_heads*head_dim, dim)
//   blk.N.attn_k.weight / attn_v.weight (n_kv_heads*head_dim, dim)
//   blk.N.attn_output.weight (dim, n_heads*head_dim)
//   blk.N.ffn_gate.weight / ffn_up.weight (ffn_dim, dim)   blk.N.ffn_down.weight (dim, ffn_dim)
//   Qwen2: blk.N.attn_q.bias (n_heads*head_dim), attn_k.bias / attn_v.bias (n_kv_heads*head_dim)
//   Qwen3: blk.N.attn_q_norm.weight / attn_k_norm.weight (head_dim)
//   Mixture of experts (Mixtral as "llama", "qwen3moe"), instead of ffn_gate/up/down:
//     blk.N.ffn_gate_inp.weight (n_experts, dim)   the router
//     blk.N.ffn_gate_exps.weight / ffn_up_exps.weight (n_experts, expert_ffn_dim, dim)
//     blk.N.ffn_down_exps.weight (n_experts, dim, expert_ffn_dim)
//     or one tensor per expert E: blk.N.ffn_{gate,up}.E.weight (expert_ffn_dim, dim) and
//     blk.N.ffn_down.E.weight (dim, expert_ffn_dim) (Hugging Face files)
//   DeepSeek-V2/V3 ("deepseek2"): latent attention and shared experts, see arch_deepseek2.cc.
// Shapes here are written outermost first (rows, cols), unlike GGUF's ne[] order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/base/status.h"
#include "loom/kernels/matrix.h"
#include "loom/kernels/ops.h"

namespace loom::model {

enum class RopeScalingType : uint8_t { kNone, kLinear, kLlama3, kYarn };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_context = 0;   // llama3, yarn: original_max_position_embeddings
  // YaRN (llama.cpp's rope.scaling.* keys): the ramp between beta_fast and beta_slow rotations per
  // original context, and the magnitude correction.  yarn_log_mul is HF's mscale_all_dim
  // (GGUF rope.scaling.yarn_log_multiplier / 0.1, as llama.cpp reads it); attn_factor is
  // rope.scaling.attn_factor.
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float yarn_log_mul = 0.0f;
  float attn_factor = 1.0f;
  // (head_dim / 2) divisors of each rotated pair's frequency, applied after the scaling above;
  // empty when none.  Llama 3.1+ GGUF files carry them as the tensor rope_freqs.weight.
  std::vector<float> freq_factors;
};

inline constexpr int64_t kMaxExpertGroups = 64;  // HParams::n_expert_groups

struct HParams {
  std::string arch = "llama";  // architecture name as GGUF spells it (general.architecture)
  int64_t dim = 0;             // model (embedding) width
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // usually dim / n_heads
  int64_t ffn_dim = 0;   // hidden width of the feed-forward block
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // trained context
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kInterleaved;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // output head reuses token_embd.weight
  // Mixture of experts: every layer's feed-forward block is n_experts SwiGLU experts of
  // expert_ffn_dim columns and a router; each token runs the n_experts_used experts of highest
  // softmax probability, weighted by those probabilities renormalised to sum to one (llama.cpp's
  // routing for Mixtral and Qwen3-MoE, see docs/moe.md).  0 experts: a dense model.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_ffn_dim = 0;
  // Routing options (DeepSeek-V3 sets them; the defaults are Mixtral's and Qwen3-MoE's): gating by
  // softmax or sigmoid, a per-expert bias added for choosing only (blk.N.exp_probs_b.bias),
  // group-limited choice (the n_expert_groups_used groups of largest top-2 sum, then the top k
  // inside them), weights renormalised over the k or not, then scaled.
  enum class Gating : uint8_t { kSoftmax, kSigmoid };
  Gating gating = Gating::kSoftmax;
  bool expert_weights_norm = true;
  float expert_weights_scale = 1.0f;
  int64_t n_expert_groups = 1;
  int64_t n_expert_groups_used = 1;
  int64_t n_shared_experts = 0;  // always-on experts (one SwiGLU of shared_ffn() columns)
  // The shared experts' total width when it is not n_shared_experts * expert_ffn_dim (Qwen2-MoE's
  // expert_shared_feed_forward_length); 0: that product.
  int64_t shared_ffn_dim = 0;
  int64_t n_dense_layers = 0;  // leading layers whose feed-forward block is dense (ffn_dim)
  // Multi-head latent attention (DeepSeek-V2/V3, mla.h), when kv_lora_rank > 0: queries from a
  // rank-q_lora_rank bottleneck (0: attn_q directly), keys and values from a shared latent of
  // kv_lora_rank values; head_dim = the key head (no-rope part + rope_dim), v_head_dim the value
  // head, rope_dim the rotated part of each key head.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t rope_dim = 0;
  int64_t v_head_dim = 0;
  bool is_moe() const { return n_experts > 0; }
  int64_t shared_ffn() const {
    return shared_ffn_dim > 0 ? shared_ffn_dim : n_shared_experts * expert_ffn_dim;
  }
  bool is_mla() const { return kv_lora_rank > 0; }
  bool is_moe_layer(int64_t layer) const { return is_moe() && layer >= n_dense_layers; }
  // Values the KV cache holds per token and layer: the latent and the rope key (MLA), else a key
  // and a value per KV head.
  int64_t kv_values_per_token_layer() const {
    return is_mla() ? kv_lora_rank + rope_dim : 2 * n_kv_heads * head_dim;
  }
};

// Tokenizer data as stored with a model; the text layer builds a tokenizer from it.
struct TokenizerSpec {
  std::string model;                 // "llama" (SentencePiece scores BPE), "gpt2" (byte-level BPE),
                                     // "" when the model file carries no tokenizer
  std::vector<std::string> tokens;   // piece text by id
  std::vector<float> scores;         // merge priority by id (llama); may be empty
  std::vector<int32_t> token_types;  // GGUF token types: 1 normal, 2 unknown, 3 control,
                                     // 4 user-defined, 5 unused, 6 byte; may be empty
  std::vector<std::string> merges;   // "a b" pairs by rank (gpt2)
  std::string pre;                   // pre-tokenizer name (gpt2), e.g. "llama-bpe", "qwen2"
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // SentencePiece dummy prefix
  bool stop_at_bos = false;      // llama2.c models: sampling BOS ends generation
  std::string chat_template;     // Jinja source, empty when none
};

// One tensor in place.
struct TensorInfo {
  std::string name;
  kernels::DType type = kernels::DType::kF32;
  std::vector<int64_t> shape;       // outermost first: (rows, cols) for matrices, (n) for vectors
  const std::byte* data = nullptr;  // inside one of ModelFile's mappings
  int64_t size_bytes = 0;
  int64_t file_offset = 0;  // absolute offset in its file (for loaders of shards)
  // MLX affine-quantized matrices (types kMlx2..kMlx8): `data` holds the packed values (a
  // little-endian, LSB-first bit stream per row); every group of `group_size` values of a row has
  // a scale and a bias, value = scale * q + bias.  Null / 0 for other types.
  const std::byte* scales = nullptr;                  // (rows, cols / group_size) of scale_type
  const std::byte* biases = nullptr;                  // same shape and type
  kernels::DType scale_type = kernels::DType::kBF16;  // kF32, kF16 or kBF16
  int64_t group_size = 0;
  int64_t scales_bytes = 0;  // bytes of `scales` (and of `biases`)

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // The tensor as a matrix (a vector is one row).
  kernels::MatrixView matrix() const;
};

// A loaded model: owns its mappings; tensors point into them.
struct ModelFile {
  std::string path;    // what the user gave
  std::string format;  // "gguf", "llama2c", "hf" (safetensors directory), "mlx" (quantized one)
  HParams hparams;
  TokenizerSpec tokenizer;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // printable key -> value summary (for `loom info`)
  std::vector<base::MappedFile> mappings;

  // Finds a tensor and checks its type is usable as a matrix/vector of the given shape.
  StatusOr<const TensorInfo*> Find(const std::string& name) const;
  StatusOr<const TensorInfo*> Find(const std::string& name,
                                   const std::vector<int64_t>& expected_shape) const;
  int64_t total_tensor_bytes() const;
};

// How much of a model there is and how much one token uses.  Mixtures of experts: a token runs
// n_experts_used of every layer's n_experts experts, so the expert tensors count that fraction.
struct ParameterCounts {
  int64_t total = 0;   // values in every tensor
  int64_t active = 0;  // values a token computes with (dense models: total)
  // Bytes a decode step reads: the active tensors' bytes, of the embedding only one row (all of
  // it when it is also the output head).
  int64_t active_bytes_per_token = 0;
};
ParameterCounts CountParameters(const ModelFile& model);

// Whether a tensor holds routed experts' matrices: stacked (blk.N.ffn_gate_exps.weight) or one
// expert's (blk.N.ffn_gate.E.weight, as Hugging Face files give them).
bool IsExpertTensor(const std::string& name);

// Opens a model by sniffing its format (GGUF magic, llama2.c "ak42" magic, else a plausible legacy
// llama2.c header).  Errors name the file and the problem.  A llama2.c checkpoint carries no
// tokenizer (tokenizer.model stays empty, the special ids are set); the caller loads one from a
// separate file.  A directory is a Hugging Face / MLX model directory (hf_model.h): its tokenizer
// is not read here (tokenizer.model stays empty, `path` is the directory that holds
// tokenizer.json).  The result has passed ValidateModel.
StatusOr<std::unique_ptr<ModelFile>> OpenModel(const std::string& path);

// The same over bytes in memory (tests, fuzzing): `bytes` must outlive the result, whose tensors
// point into them; `name` stands for the path in errors.  No mapping is made.
StatusOr<std::unique_ptr<ModelFile>> OpenModelFromBytes(std::span<const std::byte> bytes,
                                                        const std::string& name);

// Checks the hyperparameters for absurd values and against each other, the tokenizer ids against
// the vocabulary, and, for architectures with the Llama tensor layout, that every tensor the
// forward pass needs is present with the right shape.  Errors name the file and the key.
Status ValidateModel(const ModelFile& model);

}  // namespace loom::model
