// llama2.c checkpoints (github.com/karpathy/llama2.c): float32 weights behind a small header.
//
// Legacy ("version 0") layout: 7 x int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size (negative: a separate classifier follows), seq_len}, then float32 arrays
//   token_embedding (vocab, dim) | rms_att (L, dim) | wq (L, dim, dim) | wk (L, kv_dim, dim) |
//   wv (L, kv_dim, dim) | wo (L, dim, dim) | rms_ffn (L, dim) | w1 (L, hidden, dim) |
//   w2 (L, dim, hidden) | w3 (L, hidden, dim) | rms_final (dim) |
//   freq_cis_real (seq_len, head_size/2) | freq_cis_imag (seq_len, head_size/2) | [wcls (vocab,
//   dim)]
// (the RoPE tables are unused and skipped).  Matrices are (out features, in features) row-major, as
// in GGUF, so they map to the same tensor names and shapes without copies.
//
// "Version 1" (export.py --version 1): a 256-byte header {u32 magic "ak42", i32 version = 1,
// the 7 int32 above with vocab_size positive, u8 shared_classifier, zero padding}, then float32
//   rms_att (L, dim) | rms_ffn (L, dim) | rms_final (dim) | token_embedding (vocab, dim) |
//   wq | wk | wv | wo | w1 | w2 | w3 (per-layer stacks as above) | [wcls (vocab, dim)].
// Version 2 (int8 groups with their own scales) is recognized and rejected as unimplemented.
//
// RoPE rotates adjacent pairs with theta 10000; RMSNorm eps is 1e-5; BOS 1 and EOS 2.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "loom/base/status.h"
#include "loom/model/model_file.h"

namespace loom::model {

inline constexpr uint32_t kLlama2cMagic = 0x616b3432;  // "ak42" as a little-endian u32
inline constexpr int64_t kLlama2cLegacyHeaderBytes = 28;
inline constexpr int64_t kLlama2cV1HeaderBytes = 256;

// Whether `bytes` start with the "ak42" magic.
bool HasLlama2cMagic(std::span<const std::byte> bytes);
// Whether `bytes` start with a plausible legacy header (positive dimensions within the limits
// below, heads dividing the width).  The size check comes later, with a clear error.
bool LooksLikeLlama2cLegacy(std::span<const std::byte> bytes);

// Fills model->format, hparams, tokenizer (special ids only: the vocabulary lives in a separate
// tokenizer file), tensors and metadata from a checkpoint in `bytes`; tensors point into `bytes`.
// The file size must equal what the header implies.
Status Llama2cToModel(std::span<const std::byte> bytes, ModelFile* model);

}  // namespace loom::model
