// `loom synth --shape SHAPE --type TYPE -o FILE [--seed S] [--threads N]` writes a GGUF Llama model
// with deterministic pseudo-random weights and a working tokenizer; `loom synth --list` prints the
// shapes.  `--arch mixtral|qwen2moe|qwen3moe|deepseek2 --experts E --experts-used K [--expert-ffn
// F]` makes every layer a mixture of experts; `--peaked` scales the weights so the next-token
// distribution is peaked (for comparisons with other implementations); `--layers N` keeps the
// shape but writes N layers (qwen3-30b-a3b: 12 of its 48 fit a shared benchmark machine);
// `--context N` declares another context length; `--type q4_k_m` writes llama.cpp's Q4_K_M mix.
// Big models show progress (percent, MB/s) on stderr; the write is atomic.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "loom/base/clock.h"
#include "loom/cli/commands.h"
#include "loom/model/synth.h"

namespace loom::cli {
namespace {

struct SynthCliOptions {
  std::string shape = "tiny";
  std::string type = "f32";
  std::string out;
  std::string arch = "llama";
  int64_t experts = 8;
  int64_t experts_used = 2;
  int64_t expert_ffn = 0;
  bool experts_given = false, experts_used_given = false, expert_ffn_given = false;
  int64_t layers = 0;  // 0: the shape's
  int64_t context = 0;  // 0: the shape's
  bool peaked = false;
  float yarn = 0.0f;
  bool mla_split = false;
  uint64_t seed = 1;
  int threads = 0;
  bool list = false;
};

// Parameters of a dense model of the shape; with `experts`, of every expert in place of the dense
// feed-forward block (plus routers and, qwen3moe, q/k norms).
int64_t ParameterCount(const model::SynthShape& s, const model::SynthOptions* experts = nullptr) {
  const int64_t head_dim = model::HeadDim(s);
  const int64_t q = s.n_heads * head_dim;
  const int64_t kv = s.n_kv_heads * head_dim;
  int64_t ffn = 3 * s.dim * s.ffn_dim;
  int64_t extra = 0;
  if (experts != nullptr && experts->arch != model::SynthArch::kLlama) {
    int64_t f = s.ffn_dim;  // Mixtral
    if (experts->arch != model::SynthArch::kMixtral) {
      f = experts->expert_ffn_dim > 0 ? experts->expert_ffn_dim
                                      : s.ffn_dim / experts->n_experts_used;
    }
    ffn = experts->n_experts * (3 * s.dim * f + s.dim);
    if (experts->arch == model::SynthArch::kQwen3Moe) extra = 2 * head_dim;
    if (experts->arch == model::SynthArch::kQwen2Moe) {
      // q/k/v biases; the shared expert (2 * f wide) and its gate.
      extra = s.dim + 2 * kv + 3 * s.dim * 2 * f + s.dim;
    }
  }
  const int64_t per_layer = 2 * s.dim + 2 * q * s.dim + 2 * kv * s.dim + ffn + extra;
  return 2 * s.vocab_size * s.dim + s.dim + s.n_layers * per_layer;
}

void PrintShapes() {
  std::printf("%-16s %6s %6s %6s %6s %6s %7s %7s %10s\n", "shape", "dim", "ffn", "layers", "heads",
              "kv", "vocab", "context", "params");
  for (const model::SynthShape& s : model::SynthShapes()) {
    std::printf("%-16.*s %6lld %6lld %6lld %6lld %6lld %7lld %7lld %9.2fM\n",
                static_cast<int>(s.name.size()), s.name.data(), static_cast<long long>(s.dim),
                static_cast<long long>(s.ffn_dim), static_cast<long long>(s.n_layers),
                static_cast<long long>(s.n_heads), static_cast<long long>(s.n_kv_heads),
                static_cast<long long>(s.vocab_size), static_cast<long long>(s.context_length),
                static_cast<double>(ParameterCount(s)) / 1e6);
  }
  std::printf(
      "types: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k, and q4_k_m: llama.cpp's Q4_K_M mix (q4_k, "
      "q6_k for the output and for attn_v and ffn_down of some layers) (norm vectors are always "
      "f32; k-quants need rows of whole 256-value blocks)\n");
  std::printf(
      "archs: llama, mixtral, qwen2moe, qwen3moe, deepseek2 (--experts, --experts-used, "
      "--expert-ffn; the "
      "params above are dense)\n");
}

int RunSynth(const SynthCliOptions& o) {
  if (o.list) {
    PrintShapes();
    return 0;
  }
  if (o.out.empty()) {
    std::fprintf(stderr, "loom synth: -o FILE is required (or --list)\n");
    return 2;
  }
  const model::SynthShape* shape = model::FindSynthShape(o.shape);
  if (shape == nullptr) {
    std::fprintf(stderr, "loom synth: unknown shape '%s' (see loom synth --list)\n",
                 o.shape.c_str());
    return 2;
  }
  // A llama.cpp mix (q4_k_m) or one type for every matrix.
  const std::optional<model::QuantMix> mix = model::ParseQuantMix(o.type);
  StatusOr<kernels::DType> type =
      mix ? StatusOr<kernels::DType>(model::QuantMixBaseType(*mix)) : model::ParseDType(o.type);
  if (!type.ok()) {
    std::fprintf(stderr, "loom synth: %s; or q4_k_m (llama.cpp's Q4_K_M mix)\n",
                 type.status().message().c_str());
    return 2;
  }
  StatusOr<model::SynthArch> arch = model::ParseSynthArch(o.arch);
  if (!arch.ok()) {
    std::fprintf(stderr, "loom synth: %s\n", arch.status().message().c_str());
    return 2;
  }
  model::SynthOptions options;
  options.shape = *shape;
  if (o.layers > 0) options.shape.n_layers = o.layers;
  if (o.context > 0) options.shape.context_length = o.context;
  options.type = *type;
  options.mix = mix;
  options.arch = *arch;
  // The shape's own experts unless the flags say otherwise.
  options.n_experts = !o.experts_given && shape->experts > 0 ? shape->experts : o.experts;
  options.n_experts_used =
      !o.experts_used_given && shape->experts_used > 0 ? shape->experts_used : o.experts_used;
  options.expert_ffn_dim =
      !o.expert_ffn_given && shape->expert_ffn > 0 ? shape->expert_ffn : o.expert_ffn;
  options.peaked = o.peaked;
  options.yarn_factor = o.yarn;
  options.mla_split = o.mla_split;
  options.seed = o.seed;
  options.threads = o.threads;
  const base::Stopwatch watch;
  double last_report = -1.0;
  constexpr int64_t kProgressAbove = int64_t{64} << 20;  // small models finish too fast to watch
  options.progress = [&](int64_t done, int64_t total) {
    if (total < kProgressAbove) return;
    const double t = watch.Seconds();
    if (done < total && t - last_report < 0.5) return;
    last_report = t;
    std::fprintf(stderr, "\rloom synth: %3.0f%%  %7.0f / %.0f MB  %6.0f MB/s", 100.0 * done / total,
                 done / 1e6, total / 1e6, t > 0 ? done / 1e6 / t : 0.0);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  const Status s = model::WriteSynthModel(o.out, options);
  if (!s.ok()) {
    std::fprintf(stderr, "\nloom synth: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "loom synth: wrote %s (%s %s %.*s, %.2fM parameters, seed %llu) in %.1f s\n",
               o.out.c_str(),
               std::string(mix ? model::QuantMixName(*mix) : kernels::Traits(*type).name).c_str(),
               o.arch.c_str(), static_cast<int>(shape->name.size()), shape->name.data(),
               static_cast<double>(ParameterCount(options.shape, &options)) / 1e6,
               static_cast<unsigned long long>(o.seed), watch.Seconds());
  return 0;
}

}  // namespace

void AddSynthCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("synth", "write a model with random weights");
  auto options = std::make_shared<SynthCliOptions>();
  sub->add_option("--shape", options->shape,
                  "tiny | small | tinyllama-1.1b | llama2-7b | qwen3-30b-a3b (see --list)")
      ->capture_default_str();
  sub->add_option(
         "--type", options->type,
         "weight type: f32 | f16 | bf16 | q8_0 | q4_0 | q4_k | q5_k | q6_k | q4_k_m (llama.cpp's "
         "Q4_K_M mix: q4_k, q6_k for output.weight and for attn_v and ffn_down of the "
         "first and last eighth of the layers and every third between)")
      ->capture_default_str();
  sub->add_option("-o,--output", options->out, "the GGUF file to write");
  sub->add_option(
         "--arch", options->arch,
         "llama | mixtral | qwen2moe | qwen3moe | deepseek2 (all but llama: layers of experts)")
      ->capture_default_str();
  sub->add_option_function<int64_t>(
         "--experts",
         [options](int64_t v) {
           options->experts = v;
           options->experts_given = true;
         },
         "experts per layer (mixtral, qwen2moe, qwen3moe, deepseek2; default 8, or the shape's)");
  sub->add_option_function<int64_t>(
         "--experts-used",
         [options](int64_t v) {
           options->experts_used = v;
           options->experts_used_given = true;
         },
         "experts each token runs (top-k; default 2, or the shape's)");
  sub->add_option_function<int64_t>(
      "--expert-ffn",
      [options](int64_t v) {
        options->expert_ffn = v;
        options->expert_ffn_given = true;
      },
      "qwen2moe, qwen3moe, deepseek2: each expert's feed-forward width (default: the shape's, "
      "else its ffn / experts-used)");
  sub->add_option("--layers", options->layers,
                  "layers (0: the shape's; fewer make a smaller file of the same layer shape)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}))
      ->capture_default_str();
  sub->add_option("--context", options->context,
                  "trained context length written to the file (0: the shape's), e.g. for "
                  "`loom bench --depth`")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
      ->capture_default_str();
  sub->add_option("--yarn", options->yarn,
                  "YaRN RoPE scaling by this factor over a quarter of the context (0: none)")
      ->check(CLI::Range(0.0f, 1024.0f));
  sub->add_flag("--mla-split", options->mla_split,
                "deepseek2: attn_k_b / attn_v_b and key_length_mla (newer llama.cpp layout)");
  sub->add_flag("--peaked", options->peaked,
                "unit-gain weights and a strong output head: a peaked next-token distribution");
  sub->add_option("--seed", options->seed, "random seed (same seed, same file)")
      ->capture_default_str();
  sub->add_option("--threads", options->threads, "threads (0: one per core)")
      ->capture_default_str();
  sub->add_flag("--list", options->list, "print the known shapes and exit");
  sub->callback([action, options] { *action = [options] { return RunSynth(*options); }; });
}

}  // namespace loom::cli
