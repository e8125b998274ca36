// Qwen2 / Qwen2.5: the Llama layout plus biases on the query, key and value projections.  Hugging
// Face and GGUF files alike keep the rotate-halves q/k layout (RopeStyle::kHalves).
#include "loom/model/arch.h"

namespace loom::model {

Status BindQwen2(const ModelFile& file, TransformerWeights* w) {
  LOOM_RETURN_IF_ERROR(BindLlamaTensors(file, w));
  const HParams& hp = w->hp;
  const LocalDims& d = w->local;
  const int64_t q_dim = hp.n_heads * hp.head_dim;
  const int64_t kv_dim = hp.n_kv_heads * hp.head_dim;
  for (int64_t l = d.layer_begin; l < d.layer_end; ++l) {
    LayerWeights& L = w->layers[static_cast<size_t>(l - d.layer_begin)];
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t q0 = d.head_begin * hp.head_dim, kv0 = d.kv_head_begin * hp.head_dim;
    LOOM_ASSIGN_OR_RETURN(L.bq, BindVectorSlice(file, p + "attn_q.bias", q_dim, q0, w));
    LOOM_ASSIGN_OR_RETURN(L.bk, BindVectorSlice(file, p + "attn_k.bias", kv_dim, kv0, w));
    LOOM_ASSIGN_OR_RETURN(L.bv, BindVectorSlice(file, p + "attn_v.bias", kv_dim, kv0, w));
  }
  return OkStatus();
}

}  // namespace loom::model
