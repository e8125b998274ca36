// Pieces shared by several subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/engine/loaded_model.h"
#include "loom/text/sampler.h"

namespace CLI {
class App;
}

namespace loom::cli {

// Prints "loom <command>: <message>" to stderr and returns exit code 1.
int Fail(std::string_view command, const Status& status);

// "1, 2,3" -> {1, 2, 3}; errors name the bad element.
StatusOr<std::vector<int32_t>> ParseIdList(std::string_view text);

// Sampling options as flags (--temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed).
struct SamplingFlags {
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  int64_t seed = -1;  // -1: a random seed (printed with the statistics)
  text::SamplerConfig ToConfig() const;
};
void AddSamplingFlags(CLI::App& app, SamplingFlags& flags);

// --weights auto|mapped|copied (engine::WeightPlacement).
void AddWeightsFlag(CLI::App& app, engine::WeightPlacement& placement);

// --kv-type f32|q8_0 (model::KvType).
void AddKvTypeFlag(CLI::App& app, model::KvType& type);

}  // namespace loom::cli
