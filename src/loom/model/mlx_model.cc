#include "loom/model/mlx_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "loom/base/half.h"

namespace loom::model {

namespace {

using Json = nlohmann::json;

StatusOr<int64_t> ParamInt(const Json& obj, const char* key, int64_t fallback,
                           const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) {
    return InvalidArgumentError(where, " \"", key, "\" is ", it->dump(), ", expected an integer");
  }
  return it->get<int64_t>();
}

StatusOr<MlxQuantParams> ParseParams(const Json& obj, const MlxQuantParams& fallback,
                                     const std::string& where) {
  MlxQuantParams p;
  LOOM_ASSIGN_OR_RETURN(const int64_t bits, ParamInt(obj, "bits", fallback.bits, where));
  LOOM_ASSIGN_OR_RETURN(p.group_size, ParamInt(obj, "group_size", fallback.group_size, where));
  if (!MlxBitsSupported(bits)) {
    return UnimplementedError(where, " bits is ", bits, " (supported: 2, 3, 4, 5, 6, 8)");
  }
  if (!MlxGroupSizeSupported(p.group_size)) {
    return UnimplementedError(where, " group_size is ", p.group_size, " (supported: 32, 64, 128)");
  }
  p.bits = static_cast<int>(bits);
  if (const auto mode = obj.find("mode"); mode != obj.end() && !mode->is_null()) {
    if (!mode->is_string() || mode->get<std::string>() != "affine") {
      return UnimplementedError(where, " mode is ", mode->dump(),
                                " (only \"affine\" is supported)");
    }
  }
  return p;
}

// Reads the `bits`-bit value at index k of a packed row.
uint32_t Unpack(const std::byte* row, int bits, int64_t k) {
  const int64_t bit = k * bits;
  const int64_t byte = bit / 8;
  const int shift = static_cast<int>(bit % 8);
  uint32_t v = static_cast<uint32_t>(row[byte]) >> shift;
  if (shift + bits > 8) v |= static_cast<uint32_t>(row[byte + 1]) << (8 - shift);
  return v & ((1u << bits) - 1u);
}

// ORs the `bits`-bit value q into index k of a zeroed packed row.
void Pack(std::byte* row, int bits, int64_t k, uint32_t q) {
  const int64_t bit = k * bits;
  const int64_t byte = bit / 8;
  const int shift = static_cast<int>(bit % 8);
  row[byte] |= static_cast<std::byte>((q << shift) & 0xFFu);
  if (shift + bits > 8) row[byte + 1] |= static_cast<std::byte>((q >> (8 - shift)) & 0xFFu);
}

bool IsFloatType(StDType t) {
  return t == StDType::kF32 || t == StDType::kF16 || t == StDType::kBF16;
}

kernels::DType ToKernelFloat(StDType t) {
  switch (t) {
    case StDType::kF16:
      return kernels::DType::kF16;
    case StDType::kBF16:
      return kernels::DType::kBF16;
    default:
      return kernels::DType::kF32;
  }
}

std::string Shape2(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

bool MlxBitsSupported(int64_t bits) {
  return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

bool MlxGroupSizeSupported(int64_t g) { return g == 32 || g == 64 || g == 128; }

std::optional<MlxQuantParams> MlxQuantConfig::For(const std::string& module) const {
  auto it = overrides.find(module);
  if (it != overrides.end()) return it->second;
  return defaults;
}

StatusOr<MlxQuantConfig> ParseMlxQuantization(const Json& q, const std::string& where) {
  if (!q.is_object()) {
    return InvalidArgumentError(where, ": \"quantization\" is a JSON ", q.type_name(),
                                ", expected an object");
  }
  MlxQuantConfig c;
  if (q.find("bits") == q.end() || q.find("group_size") == q.end()) {
    return InvalidArgumentError(where, ": \"quantization\" lacks \"bits\" or \"group_size\"");
  }
  LOOM_ASSIGN_OR_RETURN(c.defaults, ParseParams(q, MlxQuantParams{}, where + ": quantization"));
  for (const auto& [key, value] : q.items()) {
    const std::string w = StrCat(where, ": quantization override '", key, "'");
    if (value.is_object()) {
      LOOM_ASSIGN_OR_RETURN(MlxQuantParams p, ParseParams(value, c.defaults, w));
      c.overrides[key] = p;
    } else if (value.is_boolean()) {
      c.overrides[key] =
          value.get<bool>() ? std::optional<MlxQuantParams>(c.defaults) : std::nullopt;
    }
    // Scalars (bits, group_size, mode, ...) are the defaults read above or informational.
  }
  return c;
}

// The kernels' MLX type of a bit width.
std::optional<kernels::DType> MlxEnum(int64_t bits) {
  using D = kernels::DType;
  switch (bits) {
    case 2:
      return D::kMlx2;
    case 3:
      return D::kMlx3;
    case 4:
      return D::kMlx4;
    case 5:
      return D::kMlx5;
    case 6:
      return D::kMlx6;
    case 8:
      return D::kMlx8;
  }
  return std::nullopt;
}

StatusOr<kernels::DType> MlxDType(int64_t bits) {
  if (!MlxBitsSupported(bits)) {
    return UnimplementedError("MLX: ", bits, "-bit quantization is not supported");
  }
  const std::optional<kernels::DType> t = MlxEnum(bits);
  if (!t) return UnimplementedError("MLX: the kernels have no MLX matrix types in this build");
  return *t;
}

int MlxBits(kernels::DType type) {
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    if (MlxEnum(bits) == type) return bits;
  }
  return 0;
}

Status MlxTensorFromParts(const SafetensorsTensor& weight, const SafetensorsTensor& scales,
                          const SafetensorsTensor& biases, const MlxQuantParams& p,
                          const std::string& where, TensorInfo* out) {
  // A matrix (rows, ...) or a stack of them (n, rows, ...), as MLX stores mixtures' experts.
  const size_t dims = weight.shape.size();
  if (weight.dtype != StDType::kU32 || (dims != 2 && dims != 3)) {
    return DataLossError(where, ": quantized weight is ", StDTypeName(weight.dtype), " ",
                         Shape2(weight.shape), ", expected U32 ([n,] rows, packed words)");
  }
  if (!IsFloatType(scales.dtype) || scales.shape.size() != dims) {
    return DataLossError(where, ": scales are ", StDTypeName(scales.dtype), " ",
                         Shape2(scales.shape), ", expected F32, F16 or BF16 ([n,] rows, groups)");
  }
  if (biases.dtype != scales.dtype || biases.shape != scales.shape) {
    return DataLossError(where, ": biases are ", StDTypeName(biases.dtype), " ",
                         Shape2(biases.shape), " but scales are ", StDTypeName(scales.dtype), " ",
                         Shape2(scales.shape));
  }
  const int64_t stack = dims == 3 ? weight.shape[0] : 1;
  const int64_t rows = weight.shape[dims - 2];
  const int64_t words = weight.shape[dims - 1];
  const int64_t groups = scales.shape[dims - 1];
  if (scales.shape[dims - 2] != rows || (dims == 3 && scales.shape[0] != stack)) {
    return DataLossError(where, ": scales have ", scales.shape[dims - 2], " rows",
                         dims == 3 ? StrCat(" in ", scales.shape[0], " stacked matrices") : "",
                         " but the weight has ", rows, dims == 3 ? StrCat(" in ", stack) : "");
  }
  // Sizes are bounded by the file size, so these products cannot overflow.
  const int64_t cols = groups * p.group_size;
  if (stack <= 0 || rows <= 0 || groups <= 0 || words * 32 != cols * p.bits) {
    return DataLossError(where, ": ", words, " packed words per row do not hold ", groups,
                         " groups of ", p.group_size, " values at ", p.bits, " bits (expected ",
                         cols * p.bits / 32, " words)");
  }
  const StatusOr<kernels::DType> type = MlxDType(p.bits);
  if (!type.ok()) return Status(type.status().code(), StrCat(where, ": ", type.status().message()));
  out->type = *type;
  out->shape = dims == 3 ? std::vector<int64_t>{stack, rows, cols} : std::vector<int64_t>{rows, cols};
  out->data = weight.data.data();
  out->size_bytes = static_cast<int64_t>(weight.data.size());
  out->file_offset = weight.file_offset;
  out->scales = scales.data.data();
  out->biases = biases.data.data();
  out->scale_type = ToKernelFloat(scales.dtype);
  out->group_size = p.group_size;
  out->scales_bytes = static_cast<int64_t>(scales.data.size());
  return OkStatus();
}

int64_t MlxPackedRowBytes(int bits, int64_t n) { return n * bits / 8; }

float LoadFloat(kernels::DType type, const std::byte* p) {
  switch (type) {
    case kernels::DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return base::F16ToF32(h);
    }
    case kernels::DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return base::Bf16ToF32(h);
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

void StoreFloat(kernels::DType type, float v, std::byte* p) {
  switch (type) {
    case kernels::DType::kF16: {
      const uint16_t h = base::F32ToF16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case kernels::DType::kBF16: {
      const uint16_t h = base::F32ToBf16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    default:
      std::memcpy(p, &v, 4);
      return;
  }
}

void MlxQuantizeRow(const float* x, int64_t n, const MlxQuantParams& p, kernels::DType scale_type,
                    std::byte* packed, std::byte* scales, std::byte* biases) {
  const int64_t g = p.group_size;
  const float n_bins = static_cast<float>((1 << p.bits) - 1);
  const int64_t scale_bytes = kernels::Traits(scale_type).block_bytes;
  std::memset(packed, 0, static_cast<size_t>(MlxPackedRowBytes(p.bits, n)));
  for (int64_t k = 0; k < n / g; ++k) {
    const float* w = x + k * g;
    float w_min = w[0], w_max = w[0];
    for (int64_t i = 1; i < g; ++i) {
      w_min = std::min(w_min, w[i]);
      w_max = std::max(w_max, w[i]);
    }
    // mlx/ops.cpp affine_quantize: scale the edge of larger magnitude to an exact multiple.
    const bool min_edge = std::fabs(w_min) > std::fabs(w_max);
    float scale = std::max((w_max - w_min) / n_bins, 1e-7f);
    if (!min_edge) scale = -scale;
    const float edge = min_edge ? w_min : w_max;
    const float q0 = std::nearbyint(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
      scale = edge / q0;
      bias = edge;
    }
    StoreFloat(scale_type, scale, scales + k * scale_bytes);
    StoreFloat(scale_type, bias, biases + k * scale_bytes);
    const float s = LoadFloat(scale_type, scales + k * scale_bytes);
    const float b = LoadFloat(scale_type, biases + k * scale_bytes);
    for (int64_t i = 0; i < g; ++i) {
      float q = s != 0.0f ? std::nearbyint((w[i] - b) / s) : 0.0f;
      if (!(q >= 0.0f)) q = 0.0f;  // also NaN
      q = std::min(q, n_bins);
      Pack(packed, p.bits, k * g + i, static_cast<uint32_t>(q));
    }
  }
}

void MlxDequantizeRow(const std::byte* packed, const std::byte* scales, const std::byte* biases,
                      kernels::DType scale_type, const MlxQuantParams& p, int64_t n, float* out) {
  const int64_t scale_bytes = kernels::Traits(scale_type).block_bytes;
  for (int64_t k = 0; k < n / p.group_size; ++k) {
    const float s = LoadFloat(scale_type, scales + k * scale_bytes);
    const float b = LoadFloat(scale_type, biases + k * scale_bytes);
    for (int64_t i = k * p.group_size; i < (k + 1) * p.group_size; ++i) {
      out[i] = s * static_cast<float>(Unpack(packed, p.bits, i)) + b;
    }
  }
}

void MlxDequantizeTensorRow(const TensorInfo& t, int64_t row, float* out) {
  const MlxQuantParams p{MlxBits(t.type), t.group_size};
  const int64_t cols = t.shape.back();
  const int64_t groups = cols / t.group_size;
  const int64_t scale_bytes = kernels::Traits(t.scale_type).block_bytes;
  MlxDequantizeRow(t.data + row * MlxPackedRowBytes(p.bits, cols),
                   t.scales + row * groups * scale_bytes, t.biases + row * groups * scale_bytes,
                   t.scale_type, p, cols, out);
}

}  // namespace loom::model
