// Reading GGUF files: the structural parse (header, metadata, tensor table) of untrusted bytes, and
// the conversion of a parsed file into a ModelFile (hyperparameters, tokenizer, named tensors).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/gguf.h"
#include "loom/model/model_file.h"

namespace loom::model {

// Limits on what a well-formed file may declare (everything else is bounded by the file size).
inline constexpr int64_t kGgufMaxKeyBytes = 65536;
inline constexpr int64_t kGgufMaxTensorNameBytes = 1024;  // ggml itself allows 63
inline constexpr int64_t kGgufMaxDims = 4;
// general.alignment must be a power of two in this range.  At least 8 so that every tensor starts
// on an 8-byte boundary of the (page-aligned) mapping, which f32/f16/bf16 loads and the f16 block
// scales rely on; at most 1 MiB because padding is up to alignment - 1 bytes per tensor and real
// files use 32 (larger values are a sign of corruption rather than a layout anyone writes).
inline constexpr int64_t kGgufMinAlignment = 8;
inline constexpr int64_t kGgufMaxAlignment = int64_t{1} << 20;

struct GgufTensor {
  std::string name;
  const GgmlTypeInfo* type = nullptr;  // never null in a parsed file
  std::vector<int64_t> ne;             // GGUF order: ne[0] is the innermost dimension (cols)
  int64_t offset = 0;                  // bytes from GgufFile::data_offset (aligned)
  int64_t size_bytes = 0;              // inside the file (checked)
  int64_t elements = 0;
};

struct GgufFile {
  uint32_t version = 0;
  int64_t alignment = kGgufDefaultAlignment;
  int64_t data_offset = 0;  // absolute offset of the tensor data section
  int64_t file_size = 0;
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<GgufTensor> tensors;  // in file order

  const GgufValue* Find(std::string_view key) const {
    auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : &it->second;
  }
};

// Parses and validates the structure of a GGUF file held in `bytes` (its whole contents); `name`
// (usually the path) starts every error message.  Tensor types that GGUF knows but the kernels do
// not support are accepted here (GgufToModel rejects them); unknown type ids are DataLoss.  The
// result's string values are copies; numeric values point into `bytes`.
StatusOr<GgufFile> ParseGguf(std::span<const std::byte> bytes, std::string_view name);

// Fills model->format, hparams, tokenizer, tensors and metadata from a parsed file whose bytes are
// `bytes` (the tensors point into them, so they must outlive the model).  Does not run
// ValidateModel; OpenModel does.
Status GgufToModel(const GgufFile& gguf, std::span<const std::byte> bytes, ModelFile* model);

}  // namespace loom::model
