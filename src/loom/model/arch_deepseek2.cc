// DeepSeek-V2 / V3 / R1 (GGUF "deepseek2", as llama.cpp writes them): multi-head latent attention
// (mla.h) with a query bottleneck (attn_q_a, attn_q_a_norm, attn_q_b; attn_q when q_lora_rank is
// 0), the shared latent and rope key (attn_kv_a_mqa, attn_kv_a_norm) and their decompression
// (attn_kv_b, or attn_k_b / attn_v_b in newer files); leading_dense_block_count dense layers,
// then mixture-of-experts layers with shared experts (ffn_{gate,up,down}_shexp), sigmoid or
// softmax routing, the choice bias exp_probs_b, group-limited choice and routed_scaling_factor
// (expert_weights_scale), see moe.h.  Tensor shapes (outermost first), nope = head_dim - rope_dim:
//   blk.N.attn_q_a.weight (q_lora_rank, dim)   blk.N.attn_q_b.weight (n_heads*head_dim,
//   q_lora_rank) blk.N.attn_kv_a_mqa.weight (kv_lora_rank + rope_dim, dim) blk.N.attn_kv_b.weight
//   (n_heads*(nope + v_head_dim), kv_lora_rank) blk.N.attn_k_b.weight (n_heads, kv_lora_rank, nope)
//   blk.N.attn_v_b.weight (n_heads, v, rank) blk.N.attn_output.weight (dim, n_heads*v_head_dim)
//   blk.N.exp_probs_b.bias (n_experts)   blk.N.ffn_*_shexp: n_shared * expert_ffn_dim columns
#include "loom/model/arch.h"

namespace loom::model {

namespace {

bool Has(const ModelFile& file, const std::string& name) { return file.tensors.count(name) != 0; }

Status BindAttention(const ModelFile& file, const std::string& p, TransformerWeights* w,
                     LayerWeights& L) {
  const HParams& hp = w->hp;
  const LocalDims& d = w->local;
  const int64_t heads = hp.n_heads, hd = hp.head_dim, rank = hp.kv_lora_rank;
  const int64_t nope = hd - hp.rope_dim, vd = hp.v_head_dim;
  const int64_t h0 = d.head_begin, nh = d.n_heads;  // the shard's query heads
  LOOM_ASSIGN_OR_RETURN(L.attn_norm, BindVector(file, p + "attn_norm.weight", hp.dim, w));
  if (hp.q_lora_rank > 0) {
    LOOM_ASSIGN_OR_RETURN(L.wq_a, BindMatrix(file, p + "attn_q_a.weight", hp.q_lora_rank, hp.dim));
    LOOM_ASSIGN_OR_RETURN(L.q_a_norm,
                          BindVector(file, p + "attn_q_a_norm.weight", hp.q_lora_rank, w));
    LOOM_ASSIGN_OR_RETURN(L.wq_b, BindRows(file, p + "attn_q_b.weight", heads * hd,
                                           hp.q_lora_rank, h0 * hd, nh * hd));
  } else {
    LOOM_ASSIGN_OR_RETURN(
        L.wq, BindRows(file, p + "attn_q.weight", heads * hd, hp.dim, h0 * hd, nh * hd));
  }
  LOOM_ASSIGN_OR_RETURN(L.wkv_a,
                        BindMatrix(file, p + "attn_kv_a_mqa.weight", rank + hp.rope_dim, hp.dim));
  LOOM_ASSIGN_OR_RETURN(L.kv_a_norm, BindVector(file, p + "attn_kv_a_norm.weight", rank, w));
  if (!Has(file, p + "attn_kv_b.weight") && !Has(file, p + "attn_k_b.weight")) {
    return DataLossError(file.path, ": missing tensor '", p, "attn_kv_b.weight' (or its halves '",
                         p, "attn_k_b.weight' and '", p, "attn_v_b.weight')");
  }
  if (Has(file, p + "attn_k_b.weight")) {
    LOOM_ASSIGN_OR_RETURN(const TensorInfo* kb,
                          file.Find(p + "attn_k_b.weight", {heads, rank, nope}));
    LOOM_ASSIGN_OR_RETURN(const TensorInfo* vb,
                          file.Find(p + "attn_v_b.weight", {heads, vd, rank}));
    L.wk_b = kb->matrix().RowRange(h0 * rank, nh * rank);
    L.wv_b = vb->matrix().RowRange(h0 * vd, nh * vd);
  } else {
    LOOM_ASSIGN_OR_RETURN(L.wkv_b, BindRows(file, p + "attn_kv_b.weight", heads * (nope + vd),
                                            rank, h0 * (nope + vd), nh * (nope + vd)));
  }
  LOOM_ASSIGN_OR_RETURN(L.wo, BindCols(file, p + "attn_output.weight", hp.dim, heads * vd,
                                       h0 * vd, nh * vd, w));
  L.wo.k_leaves = kernels::SliceKLeaves(L.wo, heads * vd, h0 * vd);
  return OkStatus();
}

Status BindFeedForward(const ModelFile& file, int64_t l, const std::string& p,
                       TransformerWeights* w, LayerWeights& L) {
  const HParams& hp = w->hp;
  LOOM_ASSIGN_OR_RETURN(L.ffn_norm, BindVector(file, p + "ffn_norm.weight", hp.dim, w));
  if (!hp.is_moe_layer(l)) return BindDenseFeedForward(file, p, w, L);
  if (Has(file, p + "exp_probs_b.bias")) {
    LOOM_ASSIGN_OR_RETURN(L.expert_bias, BindVector(file, p + "exp_probs_b.bias", hp.n_experts, w));
  }
  if (hp.n_shared_experts > 0) LOOM_RETURN_IF_ERROR(BindSharedExperts(file, p, w, L));
  return OkStatus();
}

}  // namespace

Status BindDeepseek2(const ModelFile& file, TransformerWeights* w) {
  const HParams& hp = w->hp;
  const LocalDims& d = w->local;
  if (!hp.is_mla()) {
    return InvalidArgumentError(file.path, ": a deepseek2 model needs deepseek2.attention.",
                                "kv_lora_rank (multi-head latent attention)");
  }
  if (!hp.is_moe()) {
    return InvalidArgumentError(file.path, ": a deepseek2 model needs deepseek2.expert_count");
  }
  LOOM_RETURN_IF_ERROR(BindEmbeddingAndHead(file, w));
  w->layers.resize(static_cast<size_t>(d.n_layers()));
  for (int64_t l = d.layer_begin; l < d.layer_end; ++l) {
    LayerWeights& L = w->layers[static_cast<size_t>(l - d.layer_begin)];
    const std::string p = "blk." + std::to_string(l) + ".";
    LOOM_RETURN_IF_ERROR(BindAttention(file, p, w, L));
    LOOM_RETURN_IF_ERROR(BindFeedForward(file, l, p, w, L));
  }
  return BindExperts(file, w);
}

}  // namespace loom::model
