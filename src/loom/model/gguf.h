// The GGUF file format (versions 2 and 3), as llama.cpp writes it: what the reader and the writer
// share.  Layout, all little-endian:
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x (string key | u32 value type | value)
//   tensor_count x (string name | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset)
//   padding to general.alignment | tensor data (each tensor at data_start + offset, aligned)
// A string is u64 length + bytes (no terminator); an array is u32 element type + u64 count +
// elements.  ne[0] is the innermost (fastest-varying) dimension: a matrix of `rows` rows of `cols`
// values has ne = {cols, rows}.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/kernels/dtype.h"

namespace loom::model {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr int64_t kGgufDefaultAlignment = 32;

// Metadata value types (the ids stored in the file).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "u32", "string", ...; "type#N" for ids outside the enum.
std::string GgufTypeName(GgufType type);
// Bytes of one element of a fixed-size type; 0 for strings, arrays and unknown ids.
int64_t GgufTypeSize(GgufType type);

// What the format knows about a ggml tensor type id: its name and block geometry, and the Loom
// dtype when the kernels support it.
struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;                // llama.cpp spelling in lower case: "q4_k", "bf16"
  int64_t block_elems;                  // values per block
  int64_t block_bytes;                  // bytes per block
  std::optional<kernels::DType> dtype;  // empty: known to GGUF but not supported by the kernels
};

// Null for ids that no ggml version has defined (or that were removed).
const GgmlTypeInfo* FindGgmlType(uint32_t id);
// The ggml type id that stores a Loom dtype.
uint32_t GgmlTypeId(kernels::DType type);

// One metadata value: a scalar, or an array of scalars.  Arrays of arrays are rejected, as
// llama.cpp rejects them.  Numbers stay in the file's bytes (decoded on access), so a large array
// costs no memory beyond the mapping.
struct GgufValue {
  GgufType type = GgufType::kUint8;       // kArray for arrays
  GgufType elem_type = GgufType::kUint8;  // the element type; equals `type` for scalars
  int64_t count = 1;                      // number of elements (1 for a scalar)
  std::span<const std::byte> raw;         // count x GgufTypeSize(elem_type) bytes (numbers, bools)
  std::vector<std::string> strings;       // the elements when elem_type is kString

  bool is_array() const { return type == GgufType::kArray; }
  bool is_string() const { return elem_type == GgufType::kString; }
  bool is_integer() const;  // integer or bool elements
  bool is_float() const;    // f32 or f64 elements

  // Element i as a number.  IntAt fails (nullopt) for non-integers and for u64 values above
  // INT64_MAX; FloatAt converts any number.  i must be in [0, count).
  std::optional<int64_t> IntAt(int64_t i) const;
  std::optional<double> FloatAt(int64_t i) const;

  // Printable text for `loom info`: scalars in full (long strings shortened), arrays as the element
  // type, the count and the first few elements.
  std::string Summary() const;
};

}  // namespace loom::model
