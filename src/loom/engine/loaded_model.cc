#include "loom/engine/loaded_model.h"

#include "loom/base/clock.h"
#include "loom/model/model_cache.h"
#include "loom/model/weight_copy.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::engine {

StatusOr<LoadedModel> LoadModel(const LoadOptions& options) {
  base::Stopwatch watch;
  LoadedModel m;
  LOOM_ASSIGN_OR_RETURN(const std::string path, model::ResolveModelPath(options.model_path));
  LOOM_ASSIGN_OR_RETURN(m.file, model::OpenModel(path));
  if (options.load_tokenizer) {
    LOOM_ASSIGN_OR_RETURN(m.tokenizer,
                          text::LoadTokenizerForModel(*m.file, options.tokenizer_path));
  }
  LOOM_ASSIGN_OR_RETURN(model::TransformerWeights weights,
                        model::BindWeights(*m.file, options.shard));
  m.weights = std::make_unique<model::TransformerWeights>(std::move(weights));
  // A mixture's experts are copied too when all of it fits; otherwise they stay mapped (a token
  // reads only its experts' pages, so experts larger than memory still run from the page cache)
  // and the rest is copied when that fits.
  const bool all_fit =
      options.weights != WeightPlacement::kMapped && model::CopyFitsInMemory(*m.weights);
  m.weights_copied = options.weights == WeightPlacement::kCopied ||
                     (options.weights == WeightPlacement::kAuto &&
                      (all_fit || model::CopyFitsInMemory(*m.weights, 1, /*experts=*/false)));
  m.experts_copied = m.weights_copied && all_fit && m.file->hparams.is_moe();
  if (m.weights_copied) {
    LOOM_RETURN_IF_ERROR(model::CopyMatricesToMemory(m.weights.get(), all_fit));
  }
  m.pool = std::make_unique<base::ThreadPool>(options.threads);
  model::TransformerOptions t;
  t.context = options.context;
  t.max_batch = options.max_batch;
  t.n_slots = options.n_slots;
  t.kv_type = options.kv_type;
  LOOM_ASSIGN_OR_RETURN(m.transformer, model::Transformer::Create(*m.weights, t, *m.pool));
  // Start reading the weights in the background so the first tokens do not wait on page faults
  // (mapped whole models only: a shard must not pull the rest of a file bigger than memory into
  // it, and copied weights have been read already).
  const model::ShardSpec& s = options.shard;
  if (!m.weights_copied && s.layer_begin == 0 && s.layer_end < 0 && s.n_heads < 0 &&
      s.ffn_dim < 0) {
    for (const auto& mapping : m.file->mappings) mapping.WillNeed(0, mapping.size());
  }
  m.load_seconds = watch.Seconds();
  return m;
}

}  // namespace loom::engine
