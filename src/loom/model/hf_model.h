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

// The architectures a directory may hold: config.json model_type -> HParams::arch and the class
// name written into "architectures".
struct HfArchName {
  std::string_view model_type;  // "llama"
  std::string_view class_name;  // "LlamaForCausalLM"
};
// Null when the model_type is not supported.
const HfArchName* FindHfArch(std::string_view model_type);

// What config.json says.
struct HfConfig {
  HParams hp;              // rope_style kHalves
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3"
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
// "quantization" block when `quant` is given.
std::string HfConfigJson(const HParams& hp, const TokenizerSpec& tokenizer,
                         const MlxQuantParams* quant, std::string_view torch_dtype);

// Tensor names.  A module is a name without its ".weight"/".bias" suffix:
// "model.layers.3.self_attn.q_proj" <-> "blk.3.attn_q".  nullopt for names with no counterpart.
std::optional<std::string> HfModuleToGguf(std::string_view hf_module);
std::optional<std::string> GgufModuleToHf(std::string_view gguf_module);

// True when `dir` is a directory holding a config.json.
bool IsModelDirectory(const std::string& dir);

// Opens a model directory: maps every safetensors file and builds the ModelFile (format "hf", or
// "mlx" when config.json has a quantization block).  The tokenizer is left to the text layer
// (tokenizer.model = ""; bos/eos ids from config.json).  The result has passed ValidateModel.
StatusOr<std::unique_ptr<ModelFile>> OpenModelDirectory(const std::string& dir);

}  // namespace loom::model
