// `loom tokenize -m MODEL_OR_TOKENIZER [--tokenizer FILE] [--no-bos] [--json] TEXT`: prints the
// token ids of TEXT, separated by spaces (or one JSON object with --json).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/cli/commands.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::cli {
namespace {

struct TokenizeOptions {
  std::string model;      // GGUF model, llama2.c tokenizer.bin, or llama2.c checkpoint
  std::string tokenizer;  // explicit tokenizer file (llama2.c checkpoints)
  bool no_bos = false;
  bool json = false;
  std::string text;
};

int RunTokenize(const TokenizeOptions& o) {
  auto tokenizer = text::LoadTokenizerForModel(o.model, o.tokenizer);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "loom tokenize: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const text::Tokenizer& t = **tokenizer;
  const bool add_bos = !o.no_bos && t.add_bos_default();
  auto ids = t.Encode(o.text, add_bos);
  if (!ids.ok()) {
    std::fprintf(stderr, "loom tokenize: %s\n", ids.status().ToString().c_str());
    return 1;
  }
  if (o.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : *ids) pieces.push_back(std::string(t.PieceText(id)));
    const nlohmann::json out = {
        {"ids", *ids},
        {"pieces", pieces},
        {"count", ids->size()},
        {"tokenizer", std::string(t.kind())},
        {"vocab_size", t.vocab_size()},
        {"bos", add_bos},
    };
    // Pieces that are not valid UTF-8 are written with U+FFFD rather than failing.
    const std::string text = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) line.push_back(' ');
    line += std::to_string((*ids)[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

void AddTokenizeCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of a text");
  auto options = std::make_shared<TokenizeOptions>();
  sub->add_option("-m,--model", options->model,
                  "a GGUF model, a model directory, a tokenizer.json or tokenizer.model, a "
                  "llama2.c tokenizer.bin, or a llama2.c checkpoint (.bin)")
      ->required();
  sub->add_option("--tokenizer", options->tokenizer,
                  "tokenizer file; for a llama2.c checkpoint the default is tokenizer.bin or "
                  "tok<vocab>.bin next to it");
  sub->add_flag("--no-bos", options->no_bos, "do not prepend the BOS token");
  sub->add_flag("--json", options->json,
                "print one JSON object: {\"ids\": [...], \"pieces\": [...], ...}");
  sub->add_option("text", options->text, "the text to tokenize")->required();
  sub->callback([action, options] { *action = [options] { return RunTokenize(*options); }; });
}

}  // namespace loom::cli
