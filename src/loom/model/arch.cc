#include "loom/model/arch.h"

#include <array>
#include <cstring>

#include "loom/base/half.h"
#include "loom/kernels/matmul.h"
#include "loom/model/mlx_model.h"
#include "loom/model/weight_copy.h"

namespace loom::model {

namespace {
constexpr std::array kArchs = {
    ArchInfo{"llama", &BindLlama},
    ArchInfo{"mistral", &BindLlama},  // same tensors; a sliding window caps the context at load
    ArchInfo{"qwen2", &BindQwen2},
    ArchInfo{"qwen3", &BindQwen3},
    ArchInfo{"qwen2moe", &BindQwen2Moe},
    ArchInfo{"qwen3moe", &BindQwen3Moe},
    ArchInfo{"deepseek2", &BindDeepseek2},
};
}  // namespace

const ArchInfo* FindArch(std::string_view name) {
  for (const ArchInfo& a : kArchs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

StatusOr<kernels::MatrixView> BindMatrix(const ModelFile& file, const std::string& name,
                                         int64_t rows, int64_t cols) {
  LOOM_ASSIGN_OR_RETURN(const TensorInfo* t, file.Find(name, {rows, cols}));
  return t->matrix();
}

StatusOr<const float*> BindVector(const ModelFile& file, const std::string& name, int64_t n,
                                  TransformerWeights* weights) {
  LOOM_ASSIGN_OR_RETURN(const TensorInfo* t, file.Find(name, {n}));
  // In place when aligned (safetensors files only guarantee alignment when written that way).
  if (t->type == kernels::DType::kF32 &&
      reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(t->data);
  }
  const kernels::DType type = t->type;
  if (MlxBits(type) != 0) {  // MLX quantizes one-row linear layers (Qwen2-MoE's expert gate)
    auto out = std::make_unique<float[]>(static_cast<size_t>(n));
    MlxDequantizeTensorRow(*t, 0, out.get());
    const float* p = out.get();
    weights->owned.push_back(std::move(out));
    return p;
  }
  if (type != kernels::DType::kF32 && type != kernels::DType::kF16 &&
      type != kernels::DType::kBF16) {
    return UnimplementedError(file.path, ": vector '", name, "' is stored as ",
                              kernels::Traits(type).name, "; expected f32, f16 or bf16");
  }
  auto out = std::make_unique<float[]>(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    if (type == kernels::DType::kF32) {
      std::memcpy(&out[i], t->data + 4 * i, 4);
    } else {
      std::memcpy(&bits, t->data + 2 * i, 2);
      out[i] = type == kernels::DType::kF16 ? base::F16ToF32(bits) : base::Bf16ToF32(bits);
    }
  }
  const float* p = out.get();
  weights->owned.push_back(std::move(out));
  return p;
}

StatusOr<kernels::MatrixView> BindRows(const ModelFile& file, const std::string& name, int64_t rows,
                                       int64_t cols, int64_t begin, int64_t count) {
  LOOM_ASSIGN_OR_RETURN(kernels::MatrixView m, BindMatrix(file, name, rows, cols));
  return m.RowRange(begin, count);
}

StatusOr<kernels::MatrixView> BindCols(const ModelFile& file, const std::string& name, int64_t rows,
                                       int64_t cols, int64_t begin, int64_t count,
                                       TransformerWeights* weights) {
  LOOM_ASSIGN_OR_RETURN(kernels::MatrixView m, BindMatrix(file, name, rows, cols));
  if (!m.ColRangeOk(begin, count)) {
    return InvalidArgumentError(file.path, ": shard columns [", begin, ", ", begin + count,
                                ") of '", name, "' cut its ", kernels::Traits(m.type).name,
                                " blocks of ", kernels::Traits(m.type).block_elems, " values");
  }
  kernels::MatrixView v = m.ColRange(begin, count);
  if (count == cols) return v;
  // A buffer of the slice's own, rows back to back (MLX: with its scales and biases).
  PackMatrix(&v, weights->owned_bytes.emplace_back(PackedMatrixBytes(v)).data());
  return v;
}

StatusOr<const float*> BindVectorSlice(const ModelFile& file, const std::string& name, int64_t n,
                                       int64_t begin, TransformerWeights* weights) {
  LOOM_ASSIGN_OR_RETURN(const float* v, BindVector(file, name, n, weights));
  return v + begin;
}

Status BindEmbeddingAndHead(const ModelFile& file, TransformerWeights* w) {
  const HParams& hp = w->hp;
  const LocalDims& d = w->local;
  if (d.embed || (d.head && hp.tied_embeddings)) {
    LOOM_ASSIGN_OR_RETURN(w->token_embd,
                          BindMatrix(file, "token_embd.weight", hp.vocab_size, hp.dim));
  }
  if (d.head) {
    LOOM_ASSIGN_OR_RETURN(w->output_norm, BindVector(file, "output_norm.weight", hp.dim, w));
    if (hp.tied_embeddings) {
      w->output = w->token_embd;
    } else {
      LOOM_ASSIGN_OR_RETURN(w->output, BindMatrix(file, "output.weight", hp.vocab_size, hp.dim));
    }
    w->output = w->output.RowRange(d.vocab_begin, d.vocab_count);  // rows: in place
  }
  return OkStatus();
}

Status BindLlamaTensors(const ModelFile& file, TransformerWeights* w) {
  const HParams& hp = w->hp;
  const LocalDims& d = w->local;
  const int64_t hd = hp.head_dim;
  const int64_t q_dim = hp.n_heads * hd;
  const int64_t kv_dim = hp.n_kv_heads * hd;
  LOOM_RETURN_IF_ERROR(BindEmbeddingAndHead(file, w));
  w->layers.resize(static_cast<size_t>(d.n_layers()));
  for (int64_t l = d.layer_begin; l < d.layer_end; ++l) {
    LayerWeights& L = w->layers[static_cast<size_t>(l - d.layer_begin)];
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t q0 = d.head_begin * hd, kv0 = d.kv_head_begin * hd;
    LOOM_ASSIGN_OR_RETURN(L.attn_norm, BindVector(file, p + "attn_norm.weight", hp.dim, w));
    LOOM_ASSIGN_OR_RETURN(L.wq, BindRows(file, p + "attn_q.weight", q_dim, hp.dim, q0, d.q_dim()));
    LOOM_ASSIGN_OR_RETURN(L.wk,
                          BindRows(file, p + "attn_k.weight", kv_dim, hp.dim, kv0, d.kv_dim()));
    LOOM_ASSIGN_OR_RETURN(L.wv,
                          BindRows(file, p + "attn_v.weight", kv_dim, hp.dim, kv0, d.kv_dim()));
    LOOM_ASSIGN_OR_RETURN(
        L.wo, BindCols(file, p + "attn_output.weight", hp.dim, q_dim, q0, d.q_dim(), w));
    LOOM_ASSIGN_OR_RETURN(L.ffn_norm, BindVector(file, p + "ffn_norm.weight", hp.dim, w));
    L.wo.k_leaves = kernels::SliceKLeaves(L.wo, q_dim, q0);
    if (hp.is_moe()) continue;  // the architecture binds its experts (BindExperts)
    LOOM_RETURN_IF_ERROR(BindDenseFeedForward(file, p, w, L));
  }
  return OkStatus();
}

Status BindSwiGlu(const ModelFile& file, const std::string& p, const std::string& suffix,
                  int64_t width, int64_t begin, int64_t count, TransformerWeights* w,
                  kernels::MatrixView* gate, kernels::MatrixView* up, kernels::MatrixView* down) {
  const int64_t dim = w->hp.dim;
  const std::string end = suffix + ".weight";
  LOOM_ASSIGN_OR_RETURN(*gate, BindRows(file, p + "ffn_gate" + end, width, dim, begin, count));
  LOOM_ASSIGN_OR_RETURN(*up, BindRows(file, p + "ffn_up" + end, width, dim, begin, count));
  LOOM_ASSIGN_OR_RETURN(*down, BindCols(file, p + "ffn_down" + end, dim, width, begin, count, w));
  // The row-split products sum their columns in the canonical leaf tree (kernels/matmul.h), so
  // one process and tensor- or expert-parallel ranks get the same bits.
  down->k_leaves = kernels::SliceKLeaves(*down, width, begin);
  return OkStatus();
}

Status BindDenseFeedForward(const ModelFile& file, const std::string& p, TransformerWeights* w,
                            LayerWeights& L) {
  const LocalDims& d = w->local;
  return BindSwiGlu(file, p, "", w->hp.ffn_dim, d.ffn_begin, d.ffn_dim, w, &L.w_gate, &L.w_up,
                    &L.w_down);
}

Status BindSharedExperts(const ModelFile& file, const std::string& p, TransformerWeights* w,
                         LayerWeights& L) {
  const LocalDims& d = w->local;
  return BindSwiGlu(file, p, "_shexp", w->hp.shared_ffn(), d.shared_begin, d.shared_dim, w,
                    &L.shexp_gate, &L.shexp_up, &L.shexp_down);
}

ExpertRows ExpertRowsOf(const HParams& hp, const LocalDims& d) {
  const int64_t p = d.expert_part, parts = d.expert_parts;
  // Part boundaries on the kernels' 4-row tiles: the products and the elementwise ops give each
  // row the same bits wherever a part starts (ops_test ...AnyOffsetAndLength).
  auto cut = [parts](int64_t rows, int64_t i) {
    return i >= parts ? rows : i * rows / parts / 4 * 4;
  };
  ExpertRows r;
  r.ffn_begin = cut(hp.expert_ffn_dim, p);
  r.ffn = cut(hp.expert_ffn_dim, p + 1) - r.ffn_begin;
  r.dim_begin = cut(hp.dim, p);
  r.dim = cut(hp.dim, p + 1) - r.dim_begin;
  return r;
}

namespace {

// Experts stored one tensor each (Hugging Face files; early llama.cpp Mixtral files):
// blk.N.ffn_{gate,up}.E.weight (f, dim) and blk.N.ffn_down.E.weight (dim, f), for the shard's
// experts only.
Status BindExpertTensors(const ModelFile& file, const std::string& p, const TransformerWeights* w,
                         LayerWeights& L) {
  const HParams& hp = w->hp;
  const LocalDims& d = w->local;
  const int64_t f = hp.expert_ffn_dim;
  for (int64_t i = d.expert_begin; i < d.expert_begin + d.n_experts; ++i) {
    const std::string e = "." + std::to_string(i) + ".weight";
    if (file.tensors.count(p + "ffn_gate" + e) == 0) {
      return DataLossError(file.path, ": missing expert ", i, " of ", hp.n_experts, ": neither '",
                           p, "ffn_gate_exps.weight' nor '", p, "ffn_gate", e, "'");
    }
    LayerWeights::Expert& x = L.experts[static_cast<size_t>(i)];
    LOOM_ASSIGN_OR_RETURN(x.gate, BindMatrix(file, p + "ffn_gate" + e, f, hp.dim));
    LOOM_ASSIGN_OR_RETURN(x.up, BindMatrix(file, p + "ffn_up" + e, f, hp.dim));
    LOOM_ASSIGN_OR_RETURN(x.down, BindMatrix(file, p + "ffn_down" + e, hp.dim, f));
    const ExpertRows r = ExpertRowsOf(hp, d);
    x = {x.gate.RowRange(r.ffn_begin, r.ffn), x.up.RowRange(r.ffn_begin, r.ffn),
         x.down.RowRange(r.dim_begin, r.dim)};
  }
  return OkStatus();
}

}  // namespace

Status BindExperts(const ModelFile& file, TransformerWeights* w) {
  const HParams& hp = w->hp;
  const LocalDims& d = w->local;
  const int64_t e = hp.n_experts, f = hp.expert_ffn_dim;
  for (int64_t l = d.layer_begin; l < d.layer_end; ++l) {
    if (!hp.is_moe_layer(l)) continue;  // DeepSeek's leading dense layers
    LayerWeights& L = w->layers[static_cast<size_t>(l - d.layer_begin)];
    const std::string p = "blk." + std::to_string(l) + ".";
    LOOM_ASSIGN_OR_RETURN(L.router, BindMatrix(file, p + "ffn_gate_inp.weight", e, hp.dim));
    L.experts.resize(static_cast<size_t>(e));
    if (file.tensors.count(p + "ffn_gate_exps.weight") == 0) {
      LOOM_RETURN_IF_ERROR(BindExpertTensors(file, p, w, L));
      continue;
    }
    // The 3-D tensors as matrices of stacked rows: (e, f, dim) -> (e * f, dim).
    LOOM_ASSIGN_OR_RETURN(const TensorInfo* gate,
                          file.Find(p + "ffn_gate_exps.weight", {e, f, hp.dim}));
    LOOM_ASSIGN_OR_RETURN(const TensorInfo* up,
                          file.Find(p + "ffn_up_exps.weight", {e, f, hp.dim}));
    LOOM_ASSIGN_OR_RETURN(const TensorInfo* down,
                          file.Find(p + "ffn_down_exps.weight", {e, hp.dim, f}));
    const kernels::MatrixView g = gate->matrix(), u = up->matrix(), dn = down->matrix();
    const ExpertRows r = ExpertRowsOf(hp, d);
    for (int64_t i = d.expert_begin; i < d.expert_begin + d.n_experts; ++i) {
      L.experts[static_cast<size_t>(i)] = {g.RowRange(i * f + r.ffn_begin, r.ffn),
                                           u.RowRange(i * f + r.ffn_begin, r.ffn),
                                           dn.RowRange(i * hp.dim + r.dim_begin, r.dim)};
    }
  }
  return OkStatus();
}

}  // namespace loom::model
