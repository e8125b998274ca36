// Writing a tokenizer as the files of a Hugging Face / MLX model directory, so that converted
// weights run as written: tokenizer.json (SentencePiece style for "llama" specs, byte-level for
// "gpt2"), tokenizer_config.json (chat template, bos/eos/unk texts, add_bos_token), tokenizer.model
// for "llama" specs, and generation_config.json for llama2.c models (sampling BOS ends
// generation there, which Hugging Face says as an eos_token_id list).
//
// Each file reads back through tokenizer_json.h / sentencepiece_model.h into a tokenizer that
// gives the same ids as the spec's own.  A "llama" tokenizer.json lists merges made from the
// scores: every split of a piece into two pieces, the pieces with the highest scores first, which
// is the order in which a score-based SentencePiece merges.
#pragma once

#include <string>

#include "loom/base/status.h"
#include "loom/model/model_file.h"

namespace loom::text {

StatusOr<std::string> TokenizerJsonText(const model::TokenizerSpec& spec);
StatusOr<std::string> TokenizerConfigText(const model::TokenizerSpec& spec);

struct TokenizerFileOptions {
  bool tokenizer_json = true;
  bool tokenizer_model = true;  // "llama" specs only
  bool overwrite = true;        // false: keep files already in the directory
};

// Writes the files into `dir` (which must exist), atomically each.
Status WriteTokenizerFiles(const model::TokenizerSpec& spec, const std::string& dir,
                           const TokenizerFileOptions& options = {});

}  // namespace loom::text
