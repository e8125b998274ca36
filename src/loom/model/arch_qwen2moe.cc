// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B; GGUF "qwen2moe"): Qwen2's attention (biases on the
// query, key and value projections, "halves" rotary embedding) and in every layer a router over
// n_experts experts of qwen2moe.expert_feed_forward_length columns, whose softmax weights of the
// top k are used as they are (llama.cpp does not renormalise them for qwen2moe), plus one shared
// expert of qwen2moe.expert_shared_feed_forward_length columns whose output is scaled, per token,
// by sigmoid(ffn_gate_inp_shexp . x) (moe.h).  Tensors beyond Qwen2's, outermost first:
//   blk.N.ffn_gate_inp.weight (n_experts, dim)     blk.N.ffn_{gate,up}_exps.weight (n_experts, f,
//   dim) blk.N.ffn_down_exps.weight (n_experts, dim, f) blk.N.ffn_{gate,up}_shexp.weight (s, dim)
//   blk.N.ffn_down_shexp.weight (dim, s)           blk.N.ffn_gate_inp_shexp.weight (dim)
#include "loom/model/arch.h"

namespace loom::model {

Status BindQwen2Moe(const ModelFile& file, TransformerWeights* w) {
  const HParams& hp = w->hp;
  if (!hp.is_moe()) {
    return InvalidArgumentError(file.path, ": a qwen2moe model needs qwen2moe.expert_count");
  }
  LOOM_RETURN_IF_ERROR(BindQwen2(file, w));
  const LocalDims& d = w->local;
  for (int64_t l = d.layer_begin; l < d.layer_end; ++l) {
    LayerWeights& L = w->layers[static_cast<size_t>(l - d.layer_begin)];
    const std::string p = "blk." + std::to_string(l) + ".";
    LOOM_RETURN_IF_ERROR(BindSharedExperts(file, p, w, L));
    LOOM_ASSIGN_OR_RETURN(L.shexp_gate_inp,
                          BindVector(file, p + "ffn_gate_inp_shexp.weight", hp.dim, w));
  }
  return BindExperts(file, w);
}

}  // namespace loom::model
