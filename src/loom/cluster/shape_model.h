// Models described by shape only, for planning: `loom plan` needs the tensors' names, shapes,
// types and byte sizes, never their values, so it can plan for a model whose weights are not here.
// The result is a model::ModelFile whose tensors have no data (TensorInfo::data is null); it has
// not passed model::ValidateModel (which insists on data) and must never reach the forward pass:
// only the planner and the cost model take it.  Files that are run still go through OpenModel.
//
// Two sources:
// - a GGUF file cut after its tensor infos (or a whole one): the header is parsed by the GGUF
//   reader as usual; the data section need not be there.
// - a Hugging Face config.json (any *.json file, or a directory holding a config.json; no
//   safetensors needed): the tensors
//   are laid out from the config as a converter would name them (llama.cpp's names: attention,
//   or DeepSeek-V3's multi-head latent attention when kv_lora_rank is set; dense, mixture-of-
//   experts and shared-expert feed-forward blocks) and sized for a storage type.
#pragma once

#include <memory>
#include <string>

#include "loom/base/status.h"
#include "loom/model/model_file.h"

namespace loom::cluster {

// Storage types a config-only model can be sized for: "f32", "f16", "bf16", "q8_0", "q4_0",
// "mlx4", "mlx8" (MLX affine, groups of 64 with bf16 scales and biases; a config's own
// "quantization" {"bits", "group_size"} is used when type is empty).  Empty: the config's
// quantization, else bf16.
StatusOr<std::unique_ptr<model::ModelFile>> OpenShapeOnly(const std::string& path,
                                                          const std::string& type);

// The same from a config's JSON text; `name` stands for the path in errors.
StatusOr<std::unique_ptr<model::ModelFile>> ShapeFromConfig(const std::string& json,
                                                            const std::string& name,
                                                            const std::string& type);

}  // namespace loom::cluster
