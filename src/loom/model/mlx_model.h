// MLX affine quantization, as mlx-community publishes models: config.json "quantization" (bits,
// group_size, per-module overrides) and, for every quantized linear or embedding module,
//   <module>.weight  U32 (rows, cols * bits / 32)  values packed LSB-first along each row
//   <module>.scales  (rows, cols / group_size)      F32, F16 or BF16 (usually BF16)
//   <module>.biases  (rows, cols / group_size)      same dtype as the scales
// with value = scale * q + bias per group.  A module is quantized exactly when its .scales exists.
// Also a scalar quantizer and dequantizer (the converter and the tests' reference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "loom/base/status.h"
#include "loom/kernels/dtype.h"
#include "loom/model/model_file.h"
#include "loom/model/safetensors.h"

namespace loom::model {

struct MlxQuantParams {
  int bits = 4;             // 2, 3, 4, 5, 6 or 8
  int64_t group_size = 64;  // 32, 64 or 128
};

bool MlxBitsSupported(int64_t bits);
bool MlxGroupSizeSupported(int64_t group_size);

// config.json "quantization": the defaults and per-module overrides (keyed by module path, e.g.
// "model.layers.0.mlp.down_proj"; an override of `false` keeps the module in floating point).
struct MlxQuantConfig {
  MlxQuantParams defaults;
  std::map<std::string, std::optional<MlxQuantParams>> overrides;

  // The parameters for `module`; nullopt when the config says it is not quantized.
  std::optional<MlxQuantParams> For(const std::string& module) const;
};

// Parses the value of config.json's "quantization" object; `where` (the file) prefixes errors.
StatusOr<MlxQuantConfig> ParseMlxQuantization(const nlohmann::json& q, const std::string& where);

// The kernel type of `bits`-bit MLX matrices, and back (0 for other types).
StatusOr<kernels::DType> MlxDType(int64_t bits);
int MlxBits(kernels::DType type);

// Builds the TensorInfo of a quantized module from its three tensors, checking their dtypes and
// shapes against each other and against `p`.  `where` (file and module) prefixes errors.
Status MlxTensorFromParts(const SafetensorsTensor& weight, const SafetensorsTensor& scales,
                          const SafetensorsTensor& biases, const MlxQuantParams& p,
                          const std::string& where, TensorInfo* out);

// Scalar reference code.  A row of n values (n a multiple of the group size) packs into
// n * bits / 8 bytes; its scales and biases are n / group_size values of `scale_type`.
int64_t MlxPackedRowBytes(int bits, int64_t n);

// Quantizes x(n) as mlx.core.quantize does in affine mode, per group: the edge value of larger
// magnitude is made exactly representable (so is zero), scale = (max - min) / (2^bits - 1) adjusted
// to that, bias = that edge, q = clamp(round((x - bias) / scale), 0, 2^bits - 1) computed with the
// scale and bias as stored (rounded to `scale_type`).
void MlxQuantizeRow(const float* x, int64_t n, const MlxQuantParams& p, kernels::DType scale_type,
                    std::byte* packed, std::byte* scales, std::byte* biases);

// out(n) = scale * q + bias.
void MlxDequantizeRow(const std::byte* packed, const std::byte* scales, const std::byte* biases,
                      kernels::DType scale_type, const MlxQuantParams& p, int64_t n, float* out);

// Row `row` of an MLX-quantized TensorInfo, dequantized into out(cols).
void MlxDequantizeTensorRow(const TensorInfo& t, int64_t row, float* out);

// A float of `type` (F32, F16 or BF16) at p, and back.
float LoadFloat(kernels::DType type, const std::byte* p);
void StoreFloat(kernels::DType type, float v, std::byte* p);

}  // namespace loom::model
