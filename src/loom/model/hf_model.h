// Hugging Face model directories, and MLX ones (the same layout with quantized tensors):
//   config.json                       hyperparameters (model_type, hidden_size, ...), special ids,
//                                     MLX "quantization"
//   model.safetensors                 the weights, or
//   model.safetensors.index.json      {"weight_map": {tensor: shard file}} and the shard files
//   tokenizer.json, tokenizer_config.json   read by the text layer (text/tokenizer_json.h)
// Tensors are renamed to the GGUF convention of model_file.h; q/k weights keep Hugging Face's
// layout, whose rotary embedding rotates the two halves of each head (RopeStyle::kHalves).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/mlx_model.h"
#include "loom/model/model_file.h"

namespace loom::model {

// The architectures a directory may hold: config.json model_type -> HParams::arch (GGUF's
// spelling) and the class name written into "architectures".  Mixtures of experts: "mixtral"
// (arch "llama" with experts, as llama.cpp writes Mixtral), "qwen2_moe", "qwen3_moe",
// "deepseek_v3" and "deepseek_v2" (arch "deepseek2"), see docs/moe.md.
struct HfArchName {
  std::string_view model_type;  // "llama"
  std::string_view class_name;  // "LlamaForCausalLM"
  std::string_view arch;        // HParams::arch: "llama"
};
// Null when the model_type is not supported.
const HfArchName* FindHfArch(std::string_view model_type);
// The config.json form of a model with these hyperparameters (Mixtral for "llama" with experts;
// deepseek_v2 for a deepseek2 model with softmax routing); null when there is none.
const HfArchName* HfArchFor(const HParams& hp);
// The rotary layout of the family's Hugging Face q/k weights: rotate-halves, except DeepSeek's,
// whose modeling code reorders q_pe/k_pe to pairs at run time (so the weights are in GGUF's
// interleaved layout and llama.cpp's converter does not permute them).
kernels::RopeStyle HfRopeStyle(std::string_view arch);

// What config.json says.
struct HfConfig {
  HParams hp;              // rope_style kHalves
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", ...
  std::vector<std::string> architectures;
  bool tie_given = false;  // tie_word_embeddings was present
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;  // eos_token_id (an int or a list); empty when absent
  std::string torch_dtype;
  int64_t sliding_window = 0;                  // Mistral; 0 when none
  std::optional<MlxQuantConfig> quantization;  // MLX models
};

// Parses config.json text; `name` (the file) prefixes errors, which name the key.
StatusOr<HfConfig> ParseHfConfig(std::string_view json_text, const std::string& name);

// config.json text for a model with these hyperparameters (the converter's output), with MLX's
// "quantization" block (defaults and per-module overrides) when `quant` is given.
std::string HfConfigJson(const HParams& hp, const TokenizerSpec& tokenizer,
                         const MlxQuantConfig* quant, std::string_view torch_dtype);

// Tensor names.  A module is a name without its ".weight"/".bias" suffix:
// "model.layers.3.self_attn.q_proj" <-> "blk.3.attn_q".  nullopt for names with no counterpart.
// Mixtures of experts (Hugging Face <-> GGUF):
//   {mlp|block_sparse_moe}.gate                  <-> ffn_gate_inp (router)
//   mlp.experts.E.{gate,up,down}_proj            <-> ffn_{gate,up,down}.E (one expert each, as
//   block_sparse_moe.experts.E.{w1,w3,w2}             early llama.cpp files named them)
//   {mlp|block_sparse_moe}.switch_mlp.X_proj     <-> ffn_X_exps (MLX: the experts stacked)
//   mlp.shared_expert.X_proj (Qwen2-MoE), mlp.shared_experts.X_proj (DeepSeek) <-> ffn_X_shexp
//   mlp.shared_expert_gate                       <-> ffn_gate_inp_shexp
//   self_attn.{q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj}
//     <-> attn_{q_a, q_a_norm, q_b, kv_a_mqa, kv_a_norm, kv_b}; MLX's self_attn.embed_q /
//     unembed_out <-> attn_k_b / attn_v_b
// `arch` (HParams::arch) picks the spelling where there are two: block_sparse_moe and w1/w3/w2
// for "llama" (Mixtral), shared_expert for "qwen2moe", shared_experts otherwise.
std::optional<std::string> HfModuleToGguf(std::string_view hf_module);
std::optional<std::string> GgufModuleToHf(std::string_view gguf_module, std::string_view arch = {});
// Whole tensor names: the above plus DeepSeek's mlp.gate.e_score_correction_bias <->
// blk.N.exp_probs_b.bias.
std::optional<std::string> HfTensorToGguf(std::string_view hf_tensor);
std::optional<std::string> GgufTensorToHf(std::string_view gguf_tensor, std::string_view arch);

// True when `dir` is a directory holding a config.json.
bool IsModelDirectory(const std::string& dir);

// Opens a model directory: maps every safetensors file and builds the ModelFile (format "hf", or
// "mlx" when config.json has a quantization block).  The tokenizer is left to the text layer
// (tokenizer.model = ""; bos/eos ids from config.json).  The result has passed ValidateModel.
StatusOr<std::unique_ptr<ModelFile>> OpenModelDirectory(const std::string& dir);

}  // namespace loom::model
