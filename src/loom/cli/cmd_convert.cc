// `loom convert -m IN -o OUT --to gguf|hf|mlx [--type T] [--bits B --group-size G]
// [--tokenizer FILE]` converts any model loom can open (GGUF, llama2.c, Hugging Face or MLX
// directory, a pulled name) into a GGUF file, a Hugging Face directory or an MLX-quantized one.
// GGUF output embeds a tokenizer: --tokenizer FILE (a GGUF whose tokenizer is borrowed, a
// tokenizer.json / model directory, or a tokenizer.model), else the model's own, else the
// tokenizer.json beside it.  Directory output gets the tokenizer files of a source directory
// copied, or else tokenizer.json, tokenizer_config.json (with the chat template) and, for
// SentencePiece vocabularies, tokenizer.model written from --tokenizer / the model's own tokenizer
// (a GGUF's, or a llama2.c checkpoint's tokenizer.bin), so that the output runs as written.
// Big models show progress on stderr; writes are atomic.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "loom/base/clock.h"
#include "loom/cli/commands.h"
#include "loom/model/convert.h"
#include "loom/model/model_cache.h"
#include "loom/model/model_file.h"
#include "loom/text/llama2c_tokenizer.h"
#include "loom/text/sentencepiece_model.h"
#include "loom/text/tokenizer_files.h"
#include "loom/text/tokenizer_json.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertCliOptions {
  std::string model;
  std::string out;
  std::string to;
  std::string type;
  int bits = 4;
  int64_t group_size = 64;
  std::string tokenizer;
};

// The tokenizer a GGUF output embeds; nullopt keeps the model's own.
StatusOr<std::optional<model::TokenizerSpec>> TokenizerFor(const model::ModelFile& m,
                                                           const std::string& path) {
  std::error_code ec;
  if (!path.empty()) {
    if (fs::path(path).extension() == ".model") {
      LOOM_ASSIGN_OR_RETURN(model::TokenizerSpec spec, text::LoadSentencePieceModel(path));
      return std::optional<model::TokenizerSpec>(std::move(spec));
    }
    const bool json = fs::is_directory(path, ec) || fs::path(path).extension() == ".json";
    if (json) {
      LOOM_ASSIGN_OR_RETURN(text::TokenizerJson t, text::LoadTokenizerJson(path));
      return std::optional<model::TokenizerSpec>(std::move(t.spec));
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<model::ModelFile> g, model::OpenModel(path));
    if (g->tokenizer.model.empty()) {
      return InvalidArgumentError(path, " carries no tokenizer to borrow");
    }
    return std::optional<model::TokenizerSpec>(std::move(g->tokenizer));
  }
  if (!m.tokenizer.model.empty()) return std::optional<model::TokenizerSpec>();
  if (fs::is_regular_file(fs::path(m.path) / "tokenizer.json", ec)) {
    LOOM_ASSIGN_OR_RETURN(text::TokenizerJson t, text::LoadTokenizerJson(m.path));
    return std::optional<model::TokenizerSpec>(std::move(t.spec));
  }
  if (fs::is_regular_file(fs::path(m.path) / "tokenizer.model", ec)) {
    text::TokenizerJson t;
    LOOM_ASSIGN_OR_RETURN(
        t.spec, text::LoadSentencePieceModel((fs::path(m.path) / "tokenizer.model").string()));
    LOOM_RETURN_IF_ERROR(text::ApplyDirectoryConfigs(m.path, &t).status());
    return std::optional<model::TokenizerSpec>(std::move(t.spec));
  }
  return std::optional<model::TokenizerSpec>();
}

// The tokenizer files a directory output gets: none when the source directory's are copied
// (ConvertModel does that) and no --tokenizer replaces them; else the spec to write them from,
// nullopt when there is none.
StatusOr<std::optional<model::TokenizerSpec>> TokenizerToWrite(
    const model::ModelFile& m, const std::optional<model::TokenizerSpec>& flag) {
  if (flag) return flag;
  std::error_code ec;
  if (fs::is_directory(m.path, ec)) return std::optional<model::TokenizerSpec>();
  if (!m.tokenizer.model.empty()) return std::optional<model::TokenizerSpec>(m.tokenizer);
  if (m.format == "llama2c") {
    const fs::path dir = fs::path(m.path).parent_path();
    for (const fs::path& candidate :
         {dir / "tokenizer.bin", dir / ("tok" + std::to_string(m.hparams.vocab_size) + ".bin")}) {
      if (!fs::is_regular_file(candidate, ec)) continue;
      LOOM_ASSIGN_OR_RETURN(model::TokenizerSpec spec,
                            text::ReadLlama2cTokenizer(candidate.string(), m.hparams.vocab_size));
      return std::optional<model::TokenizerSpec>(std::move(spec));
    }
  }
  return std::optional<model::TokenizerSpec>();
}

int RunConvert(const ConvertCliOptions& o) {
  StatusOr<model::ConvertFormat> format = model::ParseConvertFormat(o.to);
  if (!format.ok()) {
    std::fprintf(stderr, "loom convert: --to: %s\n", format.status().message().c_str());
    return 2;
  }
  model::ConvertOptions options;
  options.format = *format;
  if (!o.type.empty()) {
    StatusOr<kernels::DType> type = model::ParseWeightType(o.type);
    if (!type.ok()) {
      std::fprintf(stderr, "loom convert: --type: %s\n", type.status().message().c_str());
      return 2;
    }
    options.type = *type;
  }
  options.mlx = {o.bits, o.group_size};
  StatusOr<std::string> path = model::ResolveModelPath(o.model);
  if (!path.ok()) {
    std::fprintf(stderr, "loom convert: %s\n", path.status().ToString().c_str());
    return 1;
  }
  StatusOr<std::unique_ptr<model::ModelFile>> in = model::OpenModel(*path);
  if (!in.ok()) {
    std::fprintf(stderr, "loom convert: %s\n", in.status().ToString().c_str());
    return 1;
  }
  std::optional<model::TokenizerSpec> tokenizer;
  if (options.format == model::ConvertFormat::kGguf || !o.tokenizer.empty()) {
    StatusOr<std::optional<model::TokenizerSpec>> t = TokenizerFor(**in, o.tokenizer);
    if (!t.ok()) {
      std::fprintf(stderr, "loom convert: %s\n", t.status().ToString().c_str());
      return 1;
    }
    tokenizer = std::move(*t);
  }
  if (tokenizer) options.tokenizer = &*tokenizer;

  const base::Stopwatch watch;
  double last_report = -1.0;
  constexpr int64_t kProgressAbove = int64_t{64} << 20;  // small models finish too fast to watch
  options.progress = [&](int64_t done, int64_t total) {
    if (total < kProgressAbove) return;
    const double t = watch.Seconds();
    if (done < total && t - last_report < 0.5) return;
    last_report = t;
    std::fprintf(stderr, "\rloom convert: %3.0f%%  %7.0f / %.0f MB  %6.0f MB/s",
                 100.0 * done / total, done / 1e6, total / 1e6, t > 0 ? done / 1e6 / t : 0.0);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  const Status s = model::ConvertModel(**in, o.out, options);
  if (!s.ok()) {
    std::fprintf(stderr, "\nloom convert: %s\n", s.ToString().c_str());
    return 1;
  }
  if (options.format != model::ConvertFormat::kGguf) {
    StatusOr<std::optional<model::TokenizerSpec>> spec = TokenizerToWrite(**in, tokenizer);
    Status written = spec.status();
    if (written.ok() && *spec) written = text::WriteTokenizerFiles(**spec, o.out);
    if (!written.ok()) {
      std::fprintf(stderr, "loom convert: writing the tokenizer: %s\n", written.ToString().c_str());
      return 1;
    }
    std::error_code ec;
    if (spec.ok() && !*spec && !fs::exists(fs::path(o.out) / "tokenizer.json", ec) &&
        !fs::exists(fs::path(o.out) / "tokenizer.model", ec)) {
      std::fprintf(stderr,
                   "loom convert: warning: %s carries no tokenizer, so none was written; loom "
                   "run needs --tokenizer FILE for %s (or convert with --tokenizer FILE)\n",
                   in->get()->path.c_str(), o.out.c_str());
    }
  }
  std::fprintf(stderr, "loom convert: wrote %s (%s) in %.1f s\n", o.out.c_str(), o.to.c_str(),
               watch.Seconds());
  return 0;
}

}  // namespace

void AddConvertCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("convert", "convert a model to GGUF, Hugging Face or MLX");
  auto options = std::make_shared<ConvertCliOptions>();
  sub->add_option("-m,--model", options->model,
                  "the model: GGUF, llama2.c, a Hugging Face / MLX directory, or ORG/NAME")
      ->required();
  sub->add_option("-o,--output", options->out, "the GGUF file or the directory to write")
      ->required();
  sub->add_option("--to", options->to, "gguf | hf | mlx")->required();
  sub->add_option("--type", options->type,
                  "gguf: matrix type (f32 f16 bf16 q8_0 q4_0 ...; default f32); hf: f32 | f16 | "
                  "bf16 (default f32); mlx: type of unquantized tensors and scales (default bf16)");
  sub->add_option("--bits", options->bits, "mlx: bits per weight (2 3 4 5 6 8)")
      ->capture_default_str();
  sub->add_option("--group-size", options->group_size, "mlx: values per scale (32 64 128)")
      ->capture_default_str();
  sub->add_option("--tokenizer", options->tokenizer,
                  "the tokenizer to embed (gguf) or write beside the weights (hf, mlx): a GGUF to "
                  "borrow from, a tokenizer.json or a tokenizer.model");
  sub->callback([action, options] { *action = [options] { return RunConvert(*options); }; });
}

}  // namespace loom::cli
