// `loom convert`: any model Loom can open -> GGUF, a Hugging Face directory, or an MLX-quantized
// directory.  Tensors are streamed row by row (dequantized to f32, reordered, re-encoded), so a
// model larger than memory converts in a bounded buffer.
//
// Rotary layout: GGUF Llama/Mistral files rotate adjacent pairs of each head, Hugging Face and MLX
// files (and GGUF Qwen files) rotate its two halves.  When the source and target layouts differ,
// the rows of attn_q/attn_k (and the elements of their biases and q/k norms) are permuted within
// each head: Hugging Face index s * head_dim/2 + i  <->  GGUF index 2i + s (s = 0, 1), the inverse
// of the permutation llama.cpp's convert_hf_to_gguf.py applies.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/kernels/dtype.h"
#include "loom/model/mlx_model.h"
#include "loom/model/model_file.h"

namespace loom::model {

enum class ConvertFormat : uint8_t { kGguf, kHf, kMlx };

// "gguf", "hf", "mlx".
StatusOr<ConvertFormat> ParseConvertFormat(std::string_view text);
// A weight type by its name ("f32", "bf16", "q8_0", "q4_k", ...; any case), among the types the
// kernels can store (not MLX types: those come from --to mlx).
StatusOr<kernels::DType> ParseWeightType(std::string_view text);

struct ConvertOptions {
  ConvertFormat format = ConvertFormat::kGguf;
  // GGUF: the type of every matrix (f32 by default; vectors stay f32; a matrix whose rows are not
  // a whole number of blocks falls back to q8_0 for K-quants when it can, else to f16).
  // Hugging Face: the type of every tensor (f32, f16 or bf16; f32 by default).
  // MLX: the type of the tensors that are not quantized and of scales/biases (bf16 by default).
  std::optional<kernels::DType> type;
  MlxQuantParams mlx;  // MLX: bits and group size; a matrix whose rows do not divide into groups
                       // stays unquantized (as mlx-lm does)
  // GGUF output: the tokenizer to embed instead of the model's own (e.g. borrowed from a GGUF).
  const TokenizerSpec* tokenizer = nullptr;
  // Called as tensor data is written: (bytes so far, total bytes).
  std::function<void(int64_t done, int64_t total)> progress;
};

// Converts `in` into `out`: a .gguf file, or a directory (created if needed) receiving config.json
// and model.safetensors, plus the tokenizer files of a source directory.  Writes are atomic.
Status ConvertModel(const ModelFile& in, const std::string& out, const ConvertOptions& options);

// Row `row` of any tensor (a vector is one row) as f32: the dequantized values.
void ReadRowF32(const TensorInfo& t, int64_t row, float* out);

// Index, within one head of `head_dim` values, of the source element that lands at `i` when a q/k
// projection goes from the `from` rotary layout to the `to` one.
int64_t RopePermuteIndex(kernels::RopeStyle from, kernels::RopeStyle to, int64_t head_dim,
                         int64_t i);

}  // namespace loom::model
