// `loom run`: generate text from a model.  Text streams to stdout as it is generated; statistics go
// to stderr.  With --json, stdout carries exactly one JSON object instead.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/cli/pod.h"
#include "loom/engine/generator.h"
#include "loom/engine/loaded_model.h"
#include "loom/text/chat_template.h"

namespace loom::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  bool prompt_given = false;
  std::string prompt_ids;
  int64_t max_new = 256;
  SamplingFlags sampling;
  engine::WeightPlacement weights = engine::WeightPlacement::kAuto;
  int threads = 0;
  int64_t context = 0;
  model::KvType kv_type = model::KvType::kF32;
  int64_t batch = 256;
  bool no_bos = false;
  bool chat = false;
  std::string system;
  bool json = false;
  PodFlags pod;
};

// Generates from `forward` (a local model or a pod driven from here) and prints the results.
int Generate(const RunOptions& o, model::ForwardPass& forward, const text::Tokenizer& tokenizer,
             std::vector<int32_t> prompt_ids, double load_seconds, int threads) {
  const model::HParams& hp = forward.hparams();
  if (prompt_ids.empty() && o.chat) {
    std::vector<text::ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    auto rendered = text::RenderChat(tokenizer, messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return Fail("run", rendered.status());
    auto ids = text::EncodeChat(tokenizer, *rendered);
    if (!ids.ok()) return Fail("run", ids.status());
    prompt_ids = std::move(*ids);
  } else if (prompt_ids.empty()) {
    // A prompt typed here may name control tokens ("<|im_start|>"), as llama.cpp allows.
    text::EncodeOptions encode;
    encode.add_bos = !o.no_bos && tokenizer.add_bos_default();
    encode.parse_special = true;
    auto ids = tokenizer.Encode(o.prompt, encode);
    if (!ids.ok()) return Fail("run", ids.status());
    prompt_ids = std::move(*ids);
  }
  if (prompt_ids.empty()) {
    return Fail("run", InvalidArgumentError("the prompt is empty and the tokenizer adds no BOS; "
                                            "give -p TEXT or --prompt-ids"));
  }
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= hp.vocab_size) {
      return Fail("run", OutOfRangeError("prompt token id ", id, " is outside the vocabulary (",
                                         hp.vocab_size, " tokens)"));
    }
  }

  engine::GenerateOptions gen;
  gen.max_new_tokens = o.max_new;
  gen.sampling = o.sampling.ToConfig();
  engine::Generator generator(forward, tokenizer);
  auto result = generator.Generate(prompt_ids, gen, [&](int32_t, std::string_view text) {
    if (!o.json && !text.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!result.ok()) return Fail("run", result.status());
  const engine::GenerationTimings& t = result->timings;
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["prompt_token_ids"] = prompt_ids;
    j["generated_token_ids"] = result->generated;
    j["text"] = result->text;
    j["finish_reason"] = engine::FinishReasonName(result->finish);
    j["seed"] = gen.sampling.seed;
    j["tp"] = o.pod.tp;
    j["ep"] = o.pod.ep;
    j["pp"] = o.pod.pp;
    j["timings"] = {{"load_s", load_seconds},
                    {"prompt_tokens", t.prompt_tokens},
                    {"prompt_s", t.prompt_seconds},
                    {"prompt_tokens_per_s", t.PromptTokensPerSecond()},
                    {"generated_tokens", result->generated.size()},
                    {"decode_steps", t.decode_steps},
                    {"decode_s", t.decode_seconds},
                    {"decode_tokens_per_s", t.DecodeTokensPerSecond()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);
  std::fprintf(
      stderr,
      "loom: load %.2f s | prompt %lld tokens, %.1f tokens/s | generation %zu tokens, "
      "%.1f tokens/s | %s | seed %llu | %d threads%s\n",
      load_seconds, static_cast<long long>(t.prompt_tokens), t.PromptTokensPerSecond(),
      result->generated.size(), t.DecodeTokensPerSecond(),
      std::string(engine::FinishReasonName(result->finish)).c_str(),
      static_cast<unsigned long long>(gen.sampling.seed), threads,
      o.pod.distributed() ? StrCat(" per rank | ", o.pod.Describe()).c_str() : "");
  return 0;
}

int Run(const RunOptions& o) {
  if (NeedsSelfLaunch(o.pod)) return SelfLaunch(o.pod, "run");
  std::vector<int32_t> prompt_ids;
  if (!o.prompt_ids.empty()) {
    auto ids = ParseIdList(o.prompt_ids);
    if (!ids.ok()) return Fail("run", ids.status());
    prompt_ids = std::move(*ids);
  }
  engine::LoadOptions load;
  load.model_path = o.model;
  load.tokenizer_path = o.tokenizer;
  load.threads = o.threads;
  load.weights = o.weights;
  load.max_batch = o.batch;
  load.context = o.context;
  load.kv_type = o.kv_type;
  if (o.pod.distributed()) {
    auto pod = JoinPod(o.pod, load);
    if (!pod.ok()) return Fail("run", pod.status());
    PodSession& s = **pod;
    if (!s.is_driver()) {
      const Status st = parallel::RunFollower(s.rank());
      return st.ok() ? 0 : Fail("run", st.WithContext(StrCat("rank ", s.world->rank())));
    }
    const int code = Generate(o, *s.driver, *s.model.tokenizer, std::move(prompt_ids),
                              s.model.load_seconds, s.model.pool->size());
    const Status st = s.driver->Shutdown();
    if (!st.ok() && code == 0) return Fail("run", st);
    return code;
  }
  auto loaded = engine::LoadModel(load);
  if (!loaded.ok()) return Fail("run", loaded.status());
  return Generate(o, *loaded->transformer, *loaded->tokenizer, std::move(prompt_ids),
                  loaded->load_seconds, loaded->pool->size());
}

}  // namespace

void AddRunCommand(CLI::App& app, Action* action) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Generate text from a model");
  sub->add_option("-m,--model", o->model,
                  "Model: GGUF or llama2.c file, Hugging Face / MLX model directory, or a name "
                  "in the cache (loom pull)")
      ->required();
  sub->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer: tokenizer.json or tokenizer.model (or their directory), llama2.c "
                  "tokenizer.bin, or a GGUF file whose tokenizer is borrowed (default: the "
                  "model's own, the tokenizer.json / tokenizer.model beside it, or tokenizer.bin "
                  "beside a llama2.c checkpoint)");
  auto* p =
      sub->add_option("-p,--prompt", o->prompt, "Prompt text (BOS added as the tokenizer says)");
  auto* ids = sub->add_option("--prompt-ids", o->prompt_ids,
                              "Prompt as comma-separated token ids, used exactly as given");
  p->excludes(ids);
  auto* chat =
      sub->add_flag("--chat", o->chat,
                    "Treat -p as a user message and apply the model's chat template "
                    "(tokenizer_config.json chat_template or GGUF tokenizer.chat_template; "
                    "without one, the message text as is)");
  chat->excludes(ids);
  sub->add_option("--system", o->system, "System message for --chat")->needs(chat);
  sub->add_option("-n,--max-new", o->max_new, "Maximum number of new tokens")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  AddSamplingFlags(*sub, o->sampling);
  AddWeightsFlag(*sub, o->weights);
  AddKvTypeFlag(*sub, o->kv_type);
  sub->add_option("--threads", o->threads, "Threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--ctx", o->context, "Context length (default: the model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  sub->add_option("--batch", o->batch, "Prompt tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  sub->add_flag("--no-bos", o->no_bos, "Do not add BOS to a text prompt");
  AddPodFlags(*sub, o->pod);
  sub->add_flag("--json", o->json,
                "Print one JSON object (prompt_token_ids, generated_token_ids, text, timings) "
                "instead of streaming text");
  sub->callback([o, action] { *action = [o] { return Run(*o); }; });
}

}  // namespace loom::cli
