// `loom bench`: prompt-processing and generation speed (several runs, medians) next to the
// memory-bandwidth roofline for generation, from a bandwidth measured in the same run.  It runs
// token ids only, so a model without a tokenizer (weights converted without one) benches too.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/base/clock.h"
#include "loom/base/sysinfo.h"
#include "loom/cli/bench_memory.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/engine/generator.h"
#include "loom/engine/loaded_model.h"
#include "loom/text/sampler.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::cli {
namespace {

struct BenchOptions {
  std::string model;
  std::string tokenizer;
  int64_t prompt_tokens = 128;
  int64_t gen_tokens = 64;
  int repeats = 5;
  engine::WeightPlacement weights = engine::WeightPlacement::kAuto;
  int threads = 0;
  int64_t batch = 256;
  bool json = false;
};

// Stands in for the tokenizer of a model that has none: bench feeds ids and reads ids, so nothing
// needs text.  Every id decodes to "" and none ends generation.
class IdsOnlyTokenizer final : public text::Tokenizer {
 public:
  explicit IdsOnlyTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}
  using Tokenizer::Encode;
  StatusOr<std::vector<int32_t>> Encode(std::string_view,
                                        const text::EncodeOptions&) const override {
    return FailedPreconditionError("bench: the model has no tokenizer");
  }
  std::string_view DecodePiece(int32_t, int32_t) const override { return {}; }
  std::string_view PieceText(int32_t) const override { return {}; }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  bool add_bos_default() const override { return false; }
  bool IsControl(int32_t) const override { return false; }
  bool IsEog(int32_t) const override { return false; }
  std::string_view kind() const override { return "none"; }

 private:
  int64_t vocab_size_;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Bytes of weights one decode step reads: every tensor except the embedding table, of which it
// reads one row (counted as nothing); a tied output head reads the table in full.
int64_t BytesPerToken(const engine::LoadedModel& m) {
  // A mixture of experts reads only the experts a token uses (model_file.h, CountParameters).
  if (m.file->hparams.is_moe()) return model::CountParameters(*m.file).active_bytes_per_token;
  int64_t bytes = 0;
  for (const auto& [name, t] : m.file->tensors) {
    if (name != "token_embd.weight") bytes += t.size_bytes;
  }
  if (m.file->hparams.tied_embeddings) bytes += m.file->tensors.at("token_embd.weight").size_bytes;
  return bytes;
}

int Bench(const BenchOptions& o) {
  engine::LoadOptions load;
  load.model_path = o.model;
  load.tokenizer_path = o.tokenizer;
  load.threads = o.threads;
  load.weights = o.weights;
  load.max_batch = o.batch;
  load.context = o.prompt_tokens + o.gen_tokens + 1;
  load.load_tokenizer = !o.tokenizer.empty();  // a named one must load; see below otherwise
  auto loaded = engine::LoadModel(load);
  if (!loaded.ok()) return Fail("bench", loaded.status());
  engine::LoadedModel& m = *loaded;
  if (m.tokenizer == nullptr) {
    // The model's own tokenizer gives the prompt its BOS; without one, ids alone will do.
    auto own = text::LoadTokenizerForModel(*m.file, "");
    if (own.ok()) {
      m.tokenizer = std::move(own).value();
    } else {
      m.tokenizer = std::make_unique<IdsOnlyTokenizer>(m.file->hparams.vocab_size);
    }
  }
  if (load.context > m.file->hparams.context_length) {
    return Fail("bench", InvalidArgumentError("-p + -n exceeds the model's context of ",
                                              m.file->hparams.context_length));
  }
  const int threads = m.pool->size();

  // A fixed pseudo-random prompt (the same every run, no special tokens).
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
  text::Pcg32 rng(42);
  const uint32_t vocab = static_cast<uint32_t>(m.file->hparams.vocab_size);
  for (auto& id : prompt) id = static_cast<int32_t>(3 + rng.Next() % (vocab - 3));
  if (m.tokenizer->bos_id() >= 0) prompt[0] = m.tokenizer->bos_id();

  engine::GenerateOptions gen;
  gen.max_new_tokens = o.gen_tokens;
  gen.sampling.temperature = 0;
  gen.stop_at_eog = false;
  engine::Generator generator(*m.transformer, *m.tokenizer);

  const int64_t bytes = BytesPerToken(m);
  std::fprintf(stderr, "bench: measuring memory bandwidth with %d threads...\n", threads);
  const double bw_before = base::MeasureReadBandwidth(threads);
  std::vector<double> pp, tg, round_bw, round_weights_bw, round_fraction;
  MemoryState last;
  for (int r = 0; r <= o.repeats; ++r) {  // run 0 warms up (pages the weights in)
    const MemoryState before = r == 0 ? MemoryState{} : MeasureMemoryState(m, threads);
    auto result = generator.Generate(prompt, gen);
    if (!result.ok()) return Fail("bench", result.status());
    if (r == 0) continue;
    last = MeasureMemoryState(m, threads);
    pp.push_back(result->timings.PromptTokensPerSecond());
    tg.push_back(result->timings.DecodeTokensPerSecond());
    // The round's bandwidth: the better of the probes on either side of it.
    round_bw.push_back(std::max(before.probe_bytes_per_s, last.probe_bytes_per_s));
    round_weights_bw.push_back(std::max(before.weights_bytes_per_s, last.weights_bytes_per_s));
    round_fraction.push_back(tg.back() / (round_bw.back() / static_cast<double>(bytes)));
    std::fprintf(stderr,
                 "bench: run %d: prompt %.1f tokens/s, generation %.1f tokens/s; bandwidth %.1f "
                 "GB/s (weights' pages %.1f GB/s): %.0f%% of this round's roofline\n",
                 r, pp.back(), tg.back(), round_bw.back() / 1e9, round_weights_bw.back() / 1e9,
                 100 * round_fraction.back());
  }
  const double bw_after = base::MeasureReadBandwidth(threads);
  const double bandwidth = std::max(bw_before, bw_after);
  const double roofline = bandwidth / static_cast<double>(bytes);
  const double pp_med = Median(pp), tg_med = Median(tg);
  const double huge_fraction =
      last.huge_page_bytes < 0 || last.weight_bytes == 0
          ? -1
          : static_cast<double>(last.huge_page_bytes) / static_cast<double>(last.weight_bytes);

  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"threads", threads},
                        {"weights", m.weights_copied ? "copied" : "mapped"},
                        {"experts_copied", m.experts_copied},
                        {"prompt_tokens", o.prompt_tokens},
                        {"gen_tokens", o.gen_tokens},
                        {"repeats", o.repeats},
                        {"prompt_tokens_per_s_median", pp_med},
                        {"gen_tokens_per_s_median", tg_med},
                        {"prompt_tokens_per_s", pp},
                        {"gen_tokens_per_s", tg},
                        {"bandwidth_bytes_per_s", bandwidth},
                        {"bandwidth_before", bw_before},
                        {"bandwidth_after", bw_after},
                        {"weight_bytes_per_token", bytes},
                        {"roofline_tokens_per_s", roofline},
                        {"fraction_of_roofline", tg_med / roofline},
                        {"bandwidth_per_round", round_bw},
                        {"weights_bandwidth_per_round", round_weights_bw},
                        {"fraction_of_roofline_per_round", round_fraction},
                        {"fraction_of_roofline_median", Median(round_fraction)},
                        {"weights_huge_page_fraction", huge_fraction}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model            %s\n", o.model.c_str());
    std::printf("threads          %d\n", threads);
    const char* experts = !m.file->hparams.is_moe() || !m.weights_copied ? ""
                          : m.experts_copied                             ? ", experts too"
                                                                         : ", experts mapped";
    if (huge_fraction < 0) {
      std::printf("weights          %s%s\n", m.weights_copied ? "copied" : "mapped", experts);
    } else {
      std::printf("weights          %s%s, %.0f%% of %.1f MB in huge pages\n",
                  m.weights_copied ? "copied" : "mapped", experts, 100 * huge_fraction,
                  static_cast<double>(last.weight_bytes) / 1e6);
    }
    std::printf("prompt (pp%lld)    %.1f tokens/s (median of %d)\n",
                static_cast<long long>(o.prompt_tokens), pp_med, o.repeats);
    std::printf("generation (tg%lld) %.1f tokens/s (median of %d)\n",
                static_cast<long long>(o.gen_tokens), tg_med, o.repeats);
    std::printf("memory bandwidth %.1f GB/s (measured: %.1f before, %.1f after)\n", bandwidth / 1e9,
                bw_before / 1e9, bw_after / 1e9);
    std::printf("weights/token    %.1f MB\n", static_cast<double>(bytes) / 1e6);
    std::printf("roofline         %.1f tokens/s; generation reaches %.0f%% of it\n", roofline,
                100 * tg_med / roofline);
    std::printf("per round        generation at %.0f%% (median) of each round's own roofline\n",
                100 * Median(round_fraction));
  }
  return 0;
}

}  // namespace

void AddBenchCommand(CLI::App& app, Action* action) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Measure prompt and generation tokens/s (medians) and the bandwidth roofline");
  sub->add_option("-m,--model", o->model, "Model file")->required();
  sub->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer file (optional: bench runs token ids; it only gives the BOS id)");
  sub->add_option("-p,--prompt-tokens", o->prompt_tokens, "Prompt length")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("-n,--gen-tokens", o->gen_tokens, "Tokens generated per run")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  sub->add_option("-r,--repeats", o->repeats, "Measured runs (after one warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  AddWeightsFlag(*sub, o->weights);
  sub->add_option("--threads", o->threads, "Threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--batch", o->batch, "Prompt tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->callback([o, action] { *action = [o] { return Bench(*o); }; });
}

}  // namespace loom::cli
