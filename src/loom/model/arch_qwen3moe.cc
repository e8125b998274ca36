// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention (per-head q/k RMSNorm, explicit
// head_dim, "halves" rotary embedding) and in every layer a router over n_experts experts of
// qwen3moe.expert_feed_forward_length columns (no shared expert).  The chosen experts' softmax
// probabilities are always renormalised over the top k: llama.cpp does so for qwen3moe whatever
// the Hugging Face config's norm_topk_prob says (the released models all set it true).
#include "loom/model/arch.h"

namespace loom::model {

Status BindQwen3Moe(const ModelFile& file, TransformerWeights* w) {
  if (!w->hp.is_moe()) {
    return InvalidArgumentError(file.path, ": a qwen3moe model needs qwen3moe.expert_count");
  }
  LOOM_RETURN_IF_ERROR(BindQwen3(file, w));
  return BindExperts(file, w);
}

}  // namespace loom::model
