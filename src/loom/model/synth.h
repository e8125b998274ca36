// Synthetic Llama models: GGUF files of a real model's shape with deterministic pseudo-random
// weights and a working SentencePiece-style vocabulary, for tests and benchmarks without downloads.
// The files are also loadable by llama.cpp (they carry the keys its llama loader requires).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/kernels/dtype.h"
#include "loom/model/model_file.h"

namespace loom::model {

struct SynthShape {
  std::string_view name;  // "tiny", "tinyllama-1.1b", "llama2-7b"
  int64_t dim;
  int64_t ffn_dim;
  int64_t n_layers;
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t vocab_size;
  int64_t context_length;
  float rms_eps;
  float rope_theta;
};

// The known shapes, smallest first.
std::span<const SynthShape> SynthShapes();
// Null when there is no shape of that name.
const SynthShape* FindSynthShape(std::string_view name);

struct SynthOptions {
  SynthShape shape;
  kernels::DType type = kernels::DType::kF32;  // of every matrix (norm vectors are always f32)
  uint64_t seed = 1;
  int threads = 0;  // 0: one per available core
  // Called after each piece of tensor data is written with (bytes so far, total bytes).
  std::function<void(int64_t done, int64_t total)> progress;
};

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
