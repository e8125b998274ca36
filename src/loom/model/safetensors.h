// The safetensors format (Hugging Face, also used by MLX), read in place.  Layout:
//   u64 N (little-endian) | N bytes of JSON header | data section
// The header is one JSON object: "__metadata__" (optional) maps strings to strings; every other key
// names a tensor: {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, with the
// offsets in bytes relative to the start of the data section (byte 8 + N).  As the reference
// implementation requires, the tensors tile the data section exactly: no gaps, no overlaps, ending
// at the end of the file.  Writers pad the header with spaces so that the data section is aligned.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::model {

// Larger headers are refused (the reference implementation's limit).
inline constexpr int64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// Tensors of more dimensions are refused (no model has them; it bounds the work per entry).
inline constexpr int64_t kSafetensorsMaxRank = 8;

enum class StDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// "F32", "BF16", ... as the header spells them.
std::string_view StDTypeName(StDType type);
// Bytes per element.
int64_t StDTypeSize(StDType type);
// Null for names the format does not define (or that Loom does not know).
std::optional<StDType> ParseStDType(std::string_view name);

struct SafetensorsTensor {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;  // outermost first; [] is a scalar
  int64_t begin = 0;           // byte offsets in the data section: [begin, end)
  int64_t end = 0;
  int64_t file_offset = 0;          // absolute offset of the first byte in the file
  std::span<const std::byte> data;  // the tensor's bytes, inside the parsed buffer

  int64_t elements() const;
};

struct SafetensorsFile {
  int64_t header_bytes = 0;  // N
  int64_t data_offset = 0;   // 8 + N
  std::map<std::string, SafetensorsTensor, std::less<>> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"

  // Null when absent.
  const SafetensorsTensor* Find(std::string_view name) const;
};

// Parses and validates the header of a safetensors file held in `bytes` (usually a mapping), field
// by field: JSON syntax, types, known dtypes, shapes and offsets in 64-bit range, each tensor's
// byte count equal to its shape times its dtype size, and the tiling of the data section.
// `name` (the file) prefixes every error.  The result points into `bytes`.
StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes,
                                           const std::string& name);

}  // namespace loom::model
