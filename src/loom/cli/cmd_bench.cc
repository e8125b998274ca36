// `loom bench`: prompt-processing and generation speed (several runs, medians), optionally on top
// of a filled context (--depth), next to the memory-bandwidth roofline for generation (weights
// plus the KV cache a token reads), from a bandwidth probed before and after every round.  It runs
// token ids only, so a model without a tokenizer (weights converted without one) benches too.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "loom/base/clock.h"
#include "loom/base/sysinfo.h"
#include "loom/cli/bench_memory.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/engine/loaded_model.h"
#include "loom/kernels/attention.h"
#include "loom/model/model_cache.h"
#include "loom/model/model_file.h"
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
  int64_t depth = 0;  // positions of context filled (not timed) before the measured tokens
  model::KvType kv_type = model::KvType::kF32;
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

// The per-round bandwidth probe: 256 MiB read 3 times (about 0.1 s at 10 GB/s, page faults
// included), short enough to run before and after every round.
double ProbeBandwidth(int threads) {
  return base::MeasureReadBandwidth(threads, int64_t{256} << 20, 3);
}

// Runs ids at positions first.. of slot 0 in chunks of the model's max_batch; the logits of the
// last id land in logits.
Status RunIds(model::ForwardPass& f, std::span<const int32_t> ids, int64_t first, float* logits) {
  const int64_t chunk = f.max_batch();
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int32_t> positions(static_cast<size_t>(std::min(chunk, n)));
  const std::vector<int32_t> slots(positions.size(), 0);
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    for (int64_t i = 0; i < count; ++i) positions[i] = static_cast<int32_t>(first + begin + i);
    const int32_t last_row = static_cast<int32_t>(count - 1);
    const bool last = begin + count == n;
    model::Batch batch{ids.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)),
                       std::span<const int32_t>(positions.data(), static_cast<size_t>(count)),
                       std::span<const int32_t>(slots.data(), static_cast<size_t>(count)),
                       last ? std::span<const int32_t>(&last_row, 1) : std::span<const int32_t>()};
    LOOM_RETURN_IF_ERROR(f.Forward(batch, logits));
  }
  return OkStatus();
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Round {
  double prompt_tokens_per_s = 0;
  double gen_tokens_per_s = 0;
};

// One measured round on top of the depth tokens already in slot 0: the prompt at positions
// depth.., then greedy generation (gen_tokens tokens: gen_tokens - 1 forward passes), timed as
// engine::Generator times them.  Rounds write positions from depth on only, so each one starts
// from the same cached prefix.
StatusOr<Round> RunRound(model::ForwardPass& f, std::span<const int32_t> prompt, int64_t depth,
                         int64_t gen_tokens, std::vector<float>& logits) {
  Round r;
  base::Stopwatch watch;
  LOOM_RETURN_IF_ERROR(RunIds(f, prompt, depth, logits.data()));
  const double prompt_s = watch.Seconds();
  watch.Reset();
  int64_t pos = depth + static_cast<int64_t>(prompt.size());
  for (int64_t step = 1; step < gen_tokens; ++step, ++pos) {
    const int32_t next = Argmax(logits);
    LOOM_RETURN_IF_ERROR(RunIds(f, std::span<const int32_t>(&next, 1), pos, logits.data()));
  }
  const double gen_s = watch.Seconds();
  r.prompt_tokens_per_s = prompt_s > 0 ? static_cast<double>(prompt.size()) / prompt_s : 0;
  r.gen_tokens_per_s = gen_s > 0 ? static_cast<double>(gen_tokens - 1) / gen_s : 0;
  return r;
}

int Bench(const BenchOptions& o) {
  engine::LoadOptions load;
  load.model_path = o.model;
  load.tokenizer_path = o.tokenizer;
  load.threads = o.threads;
  load.weights = o.weights;
  load.max_batch = o.batch;
  load.kv_type = o.kv_type;
  load.context = o.depth + o.prompt_tokens + o.gen_tokens + 1;
  load.load_tokenizer = !o.tokenizer.empty();  // a named one must load; see below otherwise
  {
    // Check the context before the KV cache for it is allocated.
    auto path = model::ResolveModelPath(o.model);
    auto file = path.ok() ? model::OpenModel(*path)
                          : StatusOr<std::unique_ptr<model::ModelFile>>(path.status());
    if (file.ok() && load.context > (*file)->hparams.context_length) {
      return Fail("bench", InvalidArgumentError("--depth + -p + -n (", load.context,
                                                ") exceeds the model's context of ",
                                                (*file)->hparams.context_length));
    }
  }
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
    return Fail("bench", InvalidArgumentError("--depth + -p + -n (", load.context,
                                              ") exceeds the model's context of ",
                                              m.file->hparams.context_length));
  }
  const int threads = m.pool->size();
  model::Transformer& f = *m.transformer;

  // Fixed pseudo-random ids (the same every run, no special tokens): the depth prefix (BOS first),
  // then the prompt (BOS first when there is no prefix).
  text::Pcg32 rng(42);
  const uint32_t vocab = static_cast<uint32_t>(m.file->hparams.vocab_size);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(3 + rng.Next() % (vocab - 3));
    return ids;
  };
  std::vector<int32_t> prefix = random_ids(o.depth);
  std::vector<int32_t> prompt = random_ids(o.prompt_tokens);
  std::vector<int32_t>& first = o.depth > 0 ? prefix : prompt;
  if (m.tokenizer->bos_id() >= 0) first[0] = m.tokenizer->bos_id();
  std::vector<float> logits(static_cast<size_t>(m.file->hparams.vocab_size));

  double fill_seconds = 0;
  if (o.depth > 0) {
    std::fprintf(stderr, "bench: filling %lld positions of context (not timed)...\n",
                 static_cast<long long>(o.depth));
    base::Stopwatch watch;
    if (Status s = RunIds(f, prefix, 0, logits.data()); !s.ok()) return Fail("bench", s);
    fill_seconds = watch.Seconds();
    std::fprintf(stderr, "bench: context filled in %.1f s\n", fill_seconds);
  }

  // Bytes a generated token reads: the weights, plus every cached position's key and value rows
  // in every layer, at the mean position of the timed generation.
  const int64_t weight_bytes = BytesPerToken(m);
  const double mean_pos =
      static_cast<double>(o.depth + o.prompt_tokens) + 0.5 * static_cast<double>(o.gen_tokens - 1);
  const double kv_bytes = static_cast<double>(f.cache().bytes_per_position()) *
                          static_cast<double>(f.cache().n_layers()) * mean_pos;
  const double bytes = static_cast<double>(weight_bytes) + kv_bytes;

  std::fprintf(stderr, "bench: %d threads; bandwidth probed before and after every round\n",
               threads);
  std::vector<double> pp, tg, bw_round, frac_round, bw_before, bw_after, weights_bw_round;
  for (int r = 0; r <= o.repeats; ++r) {  // run 0 warms up (pages the weights in)
    const double before = r == 0 ? 0 : ProbeBandwidth(threads);
    auto round = RunRound(f, prompt, o.depth, o.gen_tokens, logits);
    if (!round.ok()) return Fail("bench", round.status());
    if (r == 0) continue;
    const double after = ProbeBandwidth(threads);
    const double bw = std::max(before, after);
    weights_bw_round.push_back(MeasureWeightPagesBandwidth(m, threads));
    pp.push_back(round->prompt_tokens_per_s);
    tg.push_back(round->gen_tokens_per_s);
    bw_before.push_back(before);
    bw_after.push_back(after);
    bw_round.push_back(bw);
    frac_round.push_back(tg.back() / (bw / bytes));
    std::fprintf(stderr,
                 "bench: run %d: prompt %.1f tokens/s, generation %.1f tokens/s; bandwidth %.1f "
                 "GB/s (%.1f before, %.1f after; the weights' own pages %.1f): roofline %.1f "
                 "tokens/s, reached %.0f%%\n",
                 r, pp.back(), tg.back(), bw / 1e9, before / 1e9, after / 1e9,
                 weights_bw_round.back() / 1e9, bw / bytes, 100 * frac_round.back());
  }
  const double bandwidth = *std::max_element(bw_round.begin(), bw_round.end());
  const double roofline = bandwidth / bytes;
  const double pp_med = Median(pp), tg_med = Median(tg);
  const std::string kv_name(kernels::KvTypeName(f.cache().type()));
  const double huge_fraction = WeightHugePageFraction(m);
  const char* experts = !m.file->hparams.is_moe() || !m.weights_copied ? ""
                        : m.experts_copied                             ? ", experts too"
                                                                       : ", experts mapped";

  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"threads", threads},
                        {"weights", m.weights_copied ? "copied" : "mapped"},
                        {"experts_copied", m.experts_copied},
                        {"weights_huge_page_fraction", huge_fraction},
                        {"depth", o.depth},
                        {"kv_type", kv_name},
                        {"prompt_tokens", o.prompt_tokens},
                        {"gen_tokens", o.gen_tokens},
                        {"repeats", o.repeats},
                        {"fill_seconds", fill_seconds},
                        {"prompt_tokens_per_s_median", pp_med},
                        {"gen_tokens_per_s_median", tg_med},
                        {"prompt_tokens_per_s", pp},
                        {"gen_tokens_per_s", tg},
                        {"bandwidth_bytes_per_s", bandwidth},
                        {"bandwidth_before", bw_before.front()},
                        {"bandwidth_after", bw_after.back()},
                        {"bandwidth_per_round", bw_round},
                        {"bandwidth_before_per_round", bw_before},
                        {"bandwidth_after_per_round", bw_after},
                        {"weight_bytes_per_token", weight_bytes},
                        {"kv_bytes_per_token", kv_bytes},
                        {"bytes_per_token", bytes},
                        {"roofline_tokens_per_s", roofline},
                        {"fraction_of_roofline", tg_med / roofline},
                        {"fraction_of_roofline_per_round", frac_round},
                        {"weights_bandwidth_per_round", weights_bw_round}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model            %s\n", o.model.c_str());
    std::printf("threads          %d\n", threads);
    if (huge_fraction < 0) {
      std::printf("weights          %s%s\n", m.weights_copied ? "copied" : "mapped", experts);
    } else {
      std::printf("weights          %s%s, %.0f%% of %.1f MB in huge pages\n",
                  m.weights_copied ? "copied" : "mapped", experts, 100 * huge_fraction,
                  static_cast<double>(WeightRegion(m).size()) / 1e6);
    }
    std::printf("kv cache         %s, depth %lld (filled in %.1f s, not timed)\n", kv_name.c_str(),
                static_cast<long long>(o.depth), fill_seconds);
    std::printf("prompt (pp%lld)    %.1f tokens/s (median of %d)\n",
                static_cast<long long>(o.prompt_tokens), pp_med, o.repeats);
    std::printf("generation (tg%lld) %.1f tokens/s (median of %d)\n",
                static_cast<long long>(o.gen_tokens), tg_med, o.repeats);
    std::printf("memory bandwidth %.1f GB/s (best probe; each round probed before and after)\n",
                bandwidth / 1e9);
    std::printf(
        "bytes/token      %.1f MB: weights %.1f MB + KV cache %.1f MB (2 x layers x "
        "kv_dim x %.0f positions, the mean generation position, x bytes per value)\n",
        bytes / 1e6, static_cast<double>(weight_bytes) / 1e6, kv_bytes / 1e6, mean_pos);
    std::printf("roofline         %.1f tokens/s; generation reaches %.0f%% of it\n", roofline,
                100 * tg_med / roofline);
    for (size_t r = 0; r < tg.size(); ++r) {
      std::printf(
          "round %-2zu         generation %.1f tokens/s, bandwidth %.1f GB/s (weights' pages "
          "%.1f), roofline %.1f tokens/s, %.0f%%\n",
          r + 1, tg[r], bw_round[r] / 1e9, weights_bw_round[r] / 1e9, bw_round[r] / bytes,
          100 * frac_round[r]);
    }
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
  sub->add_option("-d,--depth", o->depth,
                  "Context filled before the measured prompt and generation (pseudo-random ids, "
                  "not timed; every round starts from this same cached prefix)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  AddWeightsFlag(*sub, o->weights);
  AddKvTypeFlag(*sub, o->kv_type);
  sub->add_option("--threads", o->threads, "Threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--batch", o->batch, "Prompt tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->callback([o, action] { *action = [o] { return Bench(*o); }; });
}

}  // namespace loom::cli
