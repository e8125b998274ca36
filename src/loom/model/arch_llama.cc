// Llama 2 / Llama 3 and everything that shares their tensors exactly (TinyLlama, llama2.c models).
#include "loom/model/arch.h"

namespace loom::model {

Status BindLlama(const ModelFile& file, TransformerWeights* weights) {
  return BindLlamaTensors(file, weights);
}

}  // namespace loom::model
