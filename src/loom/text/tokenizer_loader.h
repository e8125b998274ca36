// Finding and building tokenizers from whatever the command line names: a GGUF model (tokenizer in
// its metadata), a Hugging Face tokenizer.json (or a model directory holding one), a tiktoken.model
// (Kimi K2: tiktoken_file.h; or a directory holding one), a llama2.c
// tokenizer.bin, or a llama2.c checkpoint (which has none: an explicit --tokenizer file, else
// tokenizer.bin or tok<vocab>.bin next to it).  New vocabulary kinds plug in at TokenizerFromSpec
// (by spec.model) and at LoadTokenizer's file sniffing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/text/tokenizer.h"
#include "loom/text/tokenizer_json.h"

namespace loom::text {

// Builds the tokenizer a spec describes: "llama" -> SentencePieceTokenizer, "gpt2" -> BpeTokenizer
// (pre-tokenizer chosen by spec.pre).  "" (no tokenizer) and unknown kinds are errors naming
// `source`.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromSpec(const model::TokenizerSpec& spec,
                                                       std::string_view source);

// Builds the tokenizer a parsed tokenizer.json describes (byte-level or SentencePiece style).
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromJson(TokenizerJson t, std::string_view source);

// Loads a tokenizer file: GGUF (from its metadata), a tokenizer.json (with tokenizer_config.json,
// config.json and generation_config.json from its directory), a directory holding a
// tokenizer.json, or a llama2.c tokenizer.bin, which holds `vocab_size_hint` tokens (the model's
// vocab_size; 0 = read to the end of the file).  Errors: a GGUF without a tokenizer, a llama2.c
// checkpoint (not a tokenizer), a malformed or unknown file.
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path,
                                                   int64_t vocab_size_hint = 0);

// The tokenizer for an open model: `tokenizer_path` when not empty (checked to fit the model's
// vocabulary), else the model's own (GGUF), else for a llama2.c checkpoint tokenizer.bin or
// tok<vocab_size>.bin in the model's folder, else the tokenizer.json in the model's directory
// (Hugging Face / MLX models).
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const model::ModelFile& model,
                                                           const std::string& tokenizer_path);

// The same for a path given as -m: a model (as above), a model directory (its tokenizer.json; the
// weights are not opened), or itself a tokenizer file (then `tokenizer_path`, if given, wins).
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& model_path,
                                                           const std::string& tokenizer_path);

}  // namespace loom::text
