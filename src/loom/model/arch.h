// Architectures: each one binds a model file's tensors into TransformerWeights.  One file per
// architecture (arch_<name>.cc); the table in arch.cc lists them, so adding one touches no other.
#pragma once

#include <string_view>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/model/transformer.h"

namespace loom::model {

using BindFn = Status (*)(const ModelFile& file, TransformerWeights* weights);

struct ArchInfo {
  std::string_view name;  // general.architecture spelling, e.g. "llama"
  BindFn bind;
};

// Null when the architecture is not supported.
const ArchInfo* FindArch(std::string_view name);

// Tensor binding helpers shared by the architecture files.
// A matrix of the given shape (rows, cols), in place.
StatusOr<kernels::MatrixView> BindMatrix(const ModelFile& file, const std::string& name,
                                         int64_t rows, int64_t cols);
// A vector of n values as f32: in place when stored as F32, else converted into weights->owned.
StatusOr<const float*> BindVector(const ModelFile& file, const std::string& name, int64_t n,
                                  TransformerWeights* weights);
// Rows [begin, begin + count) of a (rows, cols) matrix, in place.
StatusOr<kernels::MatrixView> BindRows(const ModelFile& file, const std::string& name, int64_t rows,
                                       int64_t cols, int64_t begin, int64_t count);
// Block-aligned columns [begin, begin + count) of a (rows, cols) matrix.  A proper slice is copied
// into weights->owned_bytes, rows packed back to back: read in place, every row of the slice
// would sit between bytes that only other ranks use, and the CPU's stream prefetchers fetch those
// too (measured: tensor-parallel decode ran ~30% slower on such strided views).
StatusOr<kernels::MatrixView> BindCols(const ModelFile& file, const std::string& name, int64_t rows,
                                       int64_t cols, int64_t begin, int64_t count,
                                       TransformerWeights* weights);
// Elements [begin, ...) of a vector of n values, as f32.
StatusOr<const float*> BindVectorSlice(const ModelFile& file, const std::string& name, int64_t n,
                                       int64_t begin, TransformerWeights* weights);
// The token embedding (first stage) and the final norm and output head (last stage, its
// vocabulary rows; the embedding when tied) of the shard in weights->local.
Status BindEmbeddingAndHead(const ModelFile& file, TransformerWeights* weights);
// The Llama tensors every family member has, for the shard in weights->local (embedding, norms,
// attention, SwiGLU, output head).
Status BindLlamaTensors(const ModelFile& file, TransformerWeights* weights);
// The routers and experts of a mixture-of-experts model (ffn_gate_inp, ffn_{gate,up,down}_exps),
// for the shard's layers; BindLlamaTensors leaves the feed-forward matrices of such models unbound.
Status BindExperts(const ModelFile& file, TransformerWeights* weights);
// A SwiGLU block of `width` columns, "<p>ffn_{gate,up,down}<suffix>.weight": rows [begin,
// begin + count) of gate and up, the same columns of down (its sum in the canonical leaf tree, so
// split and whole blocks give the same bits).
Status BindSwiGlu(const ModelFile& file, const std::string& p, const std::string& suffix,
                  int64_t width, int64_t begin, int64_t count, TransformerWeights* weights,
                  kernels::MatrixView* gate, kernels::MatrixView* up, kernels::MatrixView* down);
// Layer L's (prefix p, "blk.N.") dense feed-forward block: the shard's columns of it.
Status BindDenseFeedForward(const ModelFile& file, const std::string& p,
                            TransformerWeights* weights, LayerWeights& L);
// Layer L's shared experts ffn_{gate,up,down}_shexp, hp.shared_ffn() columns wide: the shard's
// columns of them (weights->local.shared_begin, shared_dim).
Status BindSharedExperts(const ModelFile& file, const std::string& p, TransformerWeights* weights,
                         LayerWeights& L);

Status BindLlama(const ModelFile& file, TransformerWeights* weights);      // arch_llama.cc
Status BindQwen2(const ModelFile& file, TransformerWeights* weights);      // arch_qwen2.cc
Status BindQwen3(const ModelFile& file, TransformerWeights* weights);      // arch_qwen3.cc
Status BindMixtral(const ModelFile& file, TransformerWeights* weights);    // arch_mixtral.cc
Status BindQwen2Moe(const ModelFile& file, TransformerWeights* weights);   // arch_qwen2moe.cc
Status BindQwen3Moe(const ModelFile& file, TransformerWeights* weights);   // arch_qwen3moe.cc
Status BindDeepseek2(const ModelFile& file, TransformerWeights* weights);  // arch_deepseek2.cc

}  // namespace loom::model
