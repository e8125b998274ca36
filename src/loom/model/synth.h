// Synthetic Llama models: GGUF files of a real model's shape with deterministic pseudo-random
// weights and a working SentencePiece-style vocabulary, for tests and benchmarks without downloads.
// The files are also loadable by llama.cpp (they carry the keys its llama loader requires).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/kernels/dtype.h"
#include "loom/model/model_file.h"
#include "loom/model/quant_mix.h"

namespace loom::model {

struct SynthShape {
  std::string_view name;  // "tiny", "tinyllama-1.1b", "llama2-7b", "qwen3-30b-a3b"
  int64_t dim;
  int64_t ffn_dim;
  int64_t n_layers;
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t vocab_size;
  int64_t context_length;
  float rms_eps;
  float rope_theta;
  int64_t head_dim = 0;  // 0: dim / n_heads (qwen3moe may differ: Qwen3-30B-A3B 128 of dim 2048)
  // The real model's mixture of experts, used by `loom synth` when --experts / --experts-used /
  // --expert-ffn are not given (0: none; the generic defaults apply).
  int64_t experts = 0;
  int64_t experts_used = 0;
  int64_t expert_ffn = 0;
};

// The shape's attention head size.
inline int64_t HeadDim(const SynthShape& s) {
  return s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads;
}

// The known shapes, smallest first.
std::span<const SynthShape> SynthShapes();
// Null when there is no shape of that name.
const SynthShape* FindSynthShape(std::string_view name);

// What a synthetic model's layers are.  Mixtures of experts replace every layer's feed-forward
// block by `n_experts` experts (ffn_{gate,up,down}_exps) and a router (ffn_gate_inp, always f32 as
// llama.cpp's quantizer keeps it):
//   kLlama     dense Llama ("llama")
//   kMixtral   Mixtral as llama.cpp writes it: "llama" with llama.expert_count, experts of the
//              shape's ffn_dim
//   kQwen2Moe  "qwen2moe": Qwen2 attention (q/k/v biases), experts of expert_ffn_dim columns whose
//              top-k softmax weights are not renormalised, and one shared expert of 2 *
//              expert_ffn_dim columns gated by sigmoid(ffn_gate_inp_shexp . x)
//   kQwen3Moe  "qwen3moe": Qwen3 attention (q/k norms) and experts of expert_ffn_dim columns
//   kDeepseek2 "deepseek2", DeepSeek-V3-shaped (the older attn_kv_b layout): latent attention with
//              q_lora_rank = kv_lora_rank = dim / 2, key heads of 2h + h (no-rope + rope part) and
//              value heads of 2h values (h = dim / n_heads), YaRN (factor 4 over a quarter of the
//              context, yarn_log_multiplier 0.1); one leading dense layer, then layers of experts
//              of expert_ffn_dim columns with one shared expert, sigmoid routing with a choice bias
//              (exp_probs_b), 2 expert groups of which 1 is used, weights renormalised and scaled
//              by 2.5
enum class SynthArch : uint8_t { kLlama, kMixtral, kQwen2Moe, kQwen3Moe, kDeepseek2 };

// Parses "llama", "mixtral", "qwen2moe", "qwen3moe", "deepseek2".
StatusOr<SynthArch> ParseSynthArch(std::string_view text);

struct SynthOptions {
  SynthShape shape;
  kernels::DType type = kernels::DType::kF32;  // of every matrix (norm vectors are always f32)
  // A llama.cpp mix instead (quant_mix.h): each matrix gets the type `llama-quantize` would give
  // it; `type` must then be the mix's base type (Q4_K_M: Q4_K), whose blocks the rows must fill.
  std::optional<QuantMix> mix;
  SynthArch arch = SynthArch::kLlama;
  int64_t n_experts = 8;  // mixtures of experts only
  int64_t n_experts_used = 2;
  int64_t expert_ffn_dim =
      0;  // qwen2moe, qwen3moe, deepseek2; 0: the shape's ffn_dim / n_experts_used
  // Weights scaled for comparisons with other implementations: matrices of standard deviation
  // kPeakedGain / sqrt(cols) (attention and experts then move the residual stream about as much as
  // the embedding, so the routing and every expert decide the tokens, while
  // rounding differences are not amplified from layer to layer as at gain 1), a router of
  // kPeakedRouterGain (decisive routing) and an output head of kPeakedHeadGain (logits of standard
  // deviation about 6: a peaked next-token distribution, so near-ties are rare); the embedding's
  // values are about kPeakedGain.  Off: every matrix has standard deviation 0.02.
  bool peaked = false;
  // YaRN RoPE scaling by this factor over a quarter of the shape's context (rope.scaling.* keys,
  // no log multiplier); 0: none.  deepseek2 always has its own (factor 4, log multiplier 0.1).
  float yarn_factor = 0.0f;
  // deepseek2: the newer layout llama.cpp's converter writes, attn_kv_b split into attn_k_b
  // (n_heads, kv_lora_rank, nope) and attn_v_b (n_heads, v, kv_lora_rank), with key_length_mla /
  // value_length_mla (key_length / value_length then describe the latent, head_count_kv 1).
  bool mla_split = false;
  uint64_t seed = 1;
  int threads = 0;  // 0: one per available core
  // Called after each piece of tensor data is written with (bytes so far, total bytes).
  std::function<void(int64_t done, int64_t total)> progress;
};

// Gains of peaked models (SynthOptions::peaked): matrices, the output head, the router.
inline constexpr float kPeakedGain = 0.5f;
inline constexpr float kPeakedHeadGain = 6.0f;
inline constexpr float kPeakedRouterGain = 2.0f;

// Parses "f32", "f16", "bf16", "q8_0", "q4_0" (any case).
StatusOr<kernels::DType> ParseDType(std::string_view text);

// The synthetic vocabulary of `vocab_size` (>= 259) tokens: <unk>=0, <s>=1, </s>=2, the byte tokens
// <0x00>..<0xFF> (type 6), then unique pieces (characters, '▁'-prefixed pieces, frequent English
// letter groups, each the concatenation of two earlier pieces) with scores decreasing by id.
StatusOr<TokenizerSpec> SynthVocab(int64_t vocab_size);

// Writes a synthetic model to `path` atomically (path.tmp, then a rename).
Status WriteSynthModel(const std::string& path, const SynthOptions& options);
// The same into memory (small shapes in tests).
Status WriteSynthModelToMemory(const SynthOptions& options, std::vector<std::byte>* out);

}  // namespace loom::model
