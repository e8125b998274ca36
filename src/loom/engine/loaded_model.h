// Everything needed to run a model file in this process: the mapped file, its bound weights, its
// tokenizer, a thread pool and a transformer with its KV cache.  The commands and the server open
// models through this.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/base/status.h"
#include "loom/base/thread_pool.h"
#include "loom/model/model_file.h"
#include "loom/model/transformer.h"
#include "loom/text/tokenizer.h"

namespace loom::engine {

// Where the forward pass reads the weight matrices from.
enum class WeightPlacement {
  kAuto,    // copied when they take under half of the memory available now, else mapped
  kMapped,  // in place in the file's mapping: nothing copied, pages shared with the page cache, a
            // shard larger than the free memory still runs
  kCopied,  // copied into memory backed by huge pages (model/weight_copy.h): faster decoding; the
            // shard's weights are read whole at load and their memory cannot be reclaimed
};
// A mixture of experts' routed experts are copied (kAuto, kCopied) only when the whole shard's
// copy takes under half of the memory available; otherwise they stay mapped.

struct LoadOptions {
  std::string model_path;
  std::string tokenizer_path;  // "" = the model's own (or tokenizer.bin beside a llama2.c file)
  int threads = 0;             // 0 = one per available core
  int64_t context = 0;         // 0 = the model's trained context
  int64_t max_batch = 256;     // prompt tokens per forward pass
  int64_t n_slots = 1;         // sequences held at once
  model::ShardSpec shard;      // the part of the model this process holds (default: all of it)
  bool load_tokenizer = true;  // ranks other than a pod's driver need none
  WeightPlacement weights = WeightPlacement::kAuto;
  model::KvType kv_type = model::KvType::kF32;  // rows of the KV cache
};

struct LoadedModel {
  std::unique_ptr<model::ModelFile> file;
  std::unique_ptr<model::TransformerWeights> weights;
  std::unique_ptr<text::Tokenizer> tokenizer;  // null when not loaded
  std::unique_ptr<base::ThreadPool> pool;
  std::unique_ptr<model::Transformer> transformer;
  double load_seconds = 0;
  bool weights_copied = false;  // the placement chosen (kAuto decides at load)
  bool experts_copied = false;  // a mixture's routed experts copied with the rest
};

StatusOr<LoadedModel> LoadModel(const LoadOptions& options);

}  // namespace loom::engine
