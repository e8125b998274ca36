// Qwen3 (dense): the Llama layout plus an RMSNorm over each query and key head (weights of
// head_dim values shared by all heads), applied before the rotary embedding.  head_dim is explicit
// (128) and n_heads * head_dim may differ from dim.
#include "loom/model/arch.h"

namespace loom::model {

Status BindQwen3(const ModelFile& file, TransformerWeights* w) {
  LOOM_RETURN_IF_ERROR(BindLlamaTensors(file, w));
  const int64_t hd = w->hp.head_dim;
  const LocalDims& d = w->local;
  for (int64_t l = d.layer_begin; l < d.layer_end; ++l) {
    LayerWeights& L = w->layers[static_cast<size_t>(l - d.layer_begin)];
    const std::string p = "blk." + std::to_string(l) + ".";
    LOOM_ASSIGN_OR_RETURN(L.q_norm, BindVector(file, p + "attn_q_norm.weight", hd, w));
    LOOM_ASSIGN_OR_RETURN(L.k_norm, BindVector(file, p + "attn_k_norm.weight", hd, w));
  }
  return OkStatus();
}

}  // namespace loom::model
