#include "loom/cli/common.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <map>
#include <random>

namespace loom::cli {

int Fail(std::string_view command, const Status& status) {
  std::fprintf(stderr, "loom %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.message().c_str());
  return 1;
}

StatusOr<std::vector<int32_t>> ParseIdList(std::string_view text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= text.size()) {
    size_t end = text.find(',', i);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(i, end - i);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0) {
      return InvalidArgumentError("bad token id '", item, "' in '", text,
                                  "' (expected comma-separated non-negative integers)");
    }
    ids.push_back(v);
    i = end + 1;
  }
  return ids;
}

text::SamplerConfig SamplingFlags::ToConfig() const {
  text::SamplerConfig c;
  c.temperature = temperature;
  c.top_k = top_k;
  c.top_p = top_p;
  c.min_p = min_p;
  c.repeat_penalty = repeat_penalty;
  c.repeat_last_n = repeat_last_n;
  c.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
  return c;
}

void AddSamplingFlags(CLI::App& app, SamplingFlags& f) {
  app.add_option("--temp", f.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", f.top_k, "Keep the k most likely tokens; 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--top-p", f.top_p, "Nucleus sampling threshold; 1 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", f.min_p, "Drop tokens below min-p x the top probability; 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", f.repeat_penalty, "Penalty for repeated tokens; 1 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.01f, 100.0f));
  app.add_option("--repeat-last-n", f.repeat_last_n, "Tokens the repeat penalty looks back over")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--seed", f.seed, "Random seed; -1 = random")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, INT64_MAX));
}

void AddWeightsFlag(CLI::App& app, engine::WeightPlacement& placement) {
  const std::map<std::string, engine::WeightPlacement> names = {
      {"auto", engine::WeightPlacement::kAuto},
      {"mapped", engine::WeightPlacement::kMapped},
      {"copied", engine::WeightPlacement::kCopied}};
  app.add_option("--weights", placement,
                 "Where weights are read from: mapped (in place in the file: nothing copied, "
                 "larger than memory is fine), copied (into huge-page memory: faster generation, "
                 "the weights are read whole at load), auto (copied when they take under half "
                 "the available memory)")
      ->transform(CLI::CheckedTransformer(names, CLI::ignore_case))
      ->default_str("auto");
}

void AddKvTypeFlag(CLI::App& app, model::KvType& type) {
  // A string option: CLI11 would print the uint8_t enum's values as characters in its errors.
  app.add_option_function<std::string>(
         "--kv-type",
         [&type](const std::string& name) {
           type = name == "q8_0" ? model::KvType::kQ8_0 : model::KvType::kF32;
         },
         "Rows of the KV cache: f32, or q8_0 (8-bit values with a scale per 32, 3.6x smaller, "
         "read directly by attention; not for latent attention (DeepSeek), whose cache stays f32)")
      ->transform(CLI::IsMember({"f32", "q8_0"}, CLI::ignore_case))
      ->default_str("f32");
}

}  // namespace loom::cli
