// Llama 2 / Llama 3 and everything that shares their tensors exactly (TinyLlama, llama2.c models).
// llama.cpp writes Mixtral as "llama" too, with expert counts: those go to arch_mixtral.cc.
#include "loom/model/arch.h"

namespace loom::model {

Status BindLlama(const ModelFile& file, TransformerWeights* weights) {
  if (weights->hp.is_moe()) return BindMixtral(file, weights);
  return BindLlamaTensors(file, weights);
}

}  // namespace loom::model
