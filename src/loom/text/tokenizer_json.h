// Hugging Face tokenizer files -> the byte-level BPE tokenizer's inputs.  tokenizer.json gives the
// vocabulary, merges, added tokens, normalizer and pre-tokenizer; tokenizer_config.json beside it
// gives the chat template, bos/eos token texts and add_bos_token; config.json and
// generation_config.json give bos/eos ids (eos_token_id may be a list: all of them end generation).
//
// Supported tokenizer.json subset (anything else fails with Unimplemented naming the field):
//   model: type "BPE", vocab {piece: id}, merges as "a b" strings or [a, b] pairs,
//          ignore_merges, unk_token; byte_fallback false; no subword prefix/suffix
//   normalizer: null, NFC, or a Sequence of those
//   pre_tokenizer: ByteLevel (add_prefix_space, use_regex), or a Sequence of Split(Regex or
//          String pattern, behavior Isolated, invert false) steps ending in ByteLevel
//   decoder: ByteLevel (or null);  post_processor: TemplateProcessing tells whether BOS is added
//   added_tokens: id, content, special (special -> control token), lstrip, rstrip
// and SentencePiece style (Llama 2, Mistral, TinyLlama; spec.model "llama", t.sp):
//   model: type "BPE", byte_fallback, vocab, merges (ranked), unk_token, fuse_unk
//   normalizer: Prepend("▁") and Replace(" " -> "▁") (legacy), or null with a Metaspace
//          pre_tokenizer (replacement "▁", prepend_scheme always|first|never or add_prefix_space,
//          split)
//   decoder: Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", start, 0), or Metaspace
// Added tokens are matched on the raw text (their "normalized" flag is not honoured).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/text/bpe.h"
#include "loom/text/sentencepiece.h"

namespace loom::text {

struct TokenizerJson {
  // model "gpt2" (byte-level; pre = a known name when the regexes are known) or "llama"
  // (SentencePiece style: scores derived from the merge ranks, merges kept)
  model::TokenizerSpec spec;
  BpeOptions options;       // byte-level; also where the config files put eog ids and chat tokens
  SentencePieceOptions sp;  // SentencePiece style: prefix, splitting, decoding
  // From the post_processor: the special token its single-sequence template starts with (-1),
  // and whether it has a TemplateProcessing at all.
  int32_t template_bos_id = -1;
  bool has_template = false;
};

// Parses the text of a tokenizer.json; `source` (a file name) prefixes errors.  BOS comes from the
// post-processor template only; the config files below refine it.
StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view json, std::string_view source);

// Applies a tokenizer_config.json: chat_template (a string, or a list of named templates: the one
// named "default"), bos_token / eos_token (strings or {"content": ...}), add_bos_token,
// add_eos_token.
Status ApplyTokenizerConfig(std::string_view json, std::string_view source, TokenizerJson* t);

// Applies a config.json or generation_config.json: bos_token_id, eos_token_id (int or list).
Status ApplyModelConfig(std::string_view json, std::string_view source, TokenizerJson* t);

// Settles add_bos when no file said it: a template that starts with BOS adds it; a bos token
// distinct from eos (Llama 3's <|begin_of_text|>) is added; otherwise not (GPT-2, Qwen).
void FinishTokenizerJson(bool config_set_add_bos, TokenizerJson* t);

// `path` is a tokenizer.json or a directory holding one; tokenizer_config.json (or
// chat_template.jinja), config.json and generation_config.json from the same directory are applied
// when present.
StatusOr<TokenizerJson> LoadTokenizerJson(const std::string& path);

// Applies the config files of `dir` that are present (tokenizer_config.json or
// chat_template.jinja, config.json, generation_config.json) to `t`; returns whether
// tokenizer_config.json said add_bos_token.  Also used for tokenizer.model directories.
StatusOr<bool> ApplyDirectoryConfigs(const std::string& dir, TokenizerJson* t);

// Whether `bytes` look like JSON text (the first non-blank byte is '{').
bool LooksLikeJson(std::span<const std::byte> bytes);

}  // namespace loom::text
