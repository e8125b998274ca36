// Mixtral (and other Llama-layout mixtures of experts): the Llama attention, and in every layer a
// router (ffn_gate_inp) over n_experts SwiGLU experts stored as stacked 3-D tensors.  llama.cpp's
// files say general.architecture "llama" with llama.expert_count / llama.expert_used_count; the
// experts are feed_forward_length wide.  Routing (moe.h): softmax over all router logits, the top
// expert_used_count, renormalised; for Mixtral this equals Hugging Face's softmax over the chosen
// logits.
#include "loom/model/arch.h"

namespace loom::model {

Status BindMixtral(const ModelFile& file, TransformerWeights* w) {
  LOOM_RETURN_IF_ERROR(BindLlamaTensors(file, w));
  return BindExperts(file, w);
}

}  // namespace loom::model
