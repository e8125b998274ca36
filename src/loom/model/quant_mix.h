// Weight-type mixes: llama.cpp file types whose matrices get different types by role and layer,
// as `llama-quantize` chooses them (its llama_tensor_get_type rules, learned from
// src/llama-quant.cpp).  Q4_K_M ("mostly Q4_K, medium"):
//   - output.weight Q6_K; token_embd.weight Q4_K;
//   - attention-value-like matrices (attn_v, attn_qkv, attn_kv_b), counted in file order, and
//     ffn_down* of layer l: Q6_K where UseMoreBits(index, count), else Q4_K;
//   - with exactly 8 experts (Mixtral): attn_v and attn_k Q8_0, attn_output Q5_K;
//   - every other matrix Q4_K.
// A matrix whose rows are not whole 256-value blocks gets Q8_0 (rows of whole 32-value blocks) or
// F16, as `loom convert` does for K-quants (llama.cpp gives Q6_K's such rows Q8_0 too, Q4_K's
// Q5_0, which Loom does not store).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/kernels/dtype.h"

namespace loom::model {

enum class QuantMix : uint8_t { kQ4_K_M };

// "q4_k_m" (any case); nullopt for anything else (a plain weight type, or an unknown name).
std::optional<QuantMix> ParseQuantMix(std::string_view text);
std::string_view QuantMixName(QuantMix mix);  // "q4_k_m"

// The mix's llama_ftype for general.file_type (Q4_K_M: 15).
uint32_t QuantMixFileType(QuantMix mix);
// The type of a matrix no rule singles out (Q4_K_M: Q4_K); its block size bounds the rows.
kernels::DType QuantMixBaseType(QuantMix mix);

// llama.cpp's use_more_bits: the first eighth of the layers, the last eighth, and every third
// layer between them.
bool UseMoreBits(int64_t layer, int64_t n_layers);

// The types of the quantizable matrices `names` (GGUF names, in the file's order: norms, biases,
// routers and other tensors that stay f32 are left out by the caller) of a model of `n_layers`
// layers and `n_experts` experts per layer (0 or 1: dense), `cols[i]` values per row of names[i].
std::vector<kernels::DType> QuantMixTypes(QuantMix mix, std::span<const std::string> names,
                                          std::span<const int64_t> cols, int64_t n_layers,
                                          int64_t n_experts);

}  // namespace loom::model
