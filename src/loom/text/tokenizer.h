// The Tokenizer interface: text -> token ids, and token ids -> the bytes they stand for.  One
// implementation per vocabulary kind (SentencePiece-style scores BPE in sentencepiece.h, byte-level
// BPE from tokenizer.json or GGUF in bpe.h), chosen by TokenizerFromSpec() / LoadTokenizer() in
// tokenizer_loader.h.
//
// Decoding is per token and allocation-free (DecodePiece returns a view into the tokenizer); the
// StreamingDetokenizer (detokenizer.h) assembles those bytes into valid UTF-8 text.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::text {

struct EncodeOptions {
  // Put the BOS id first (when the vocabulary has one).
  bool add_bos = false;
  // Match the text of control tokens ("<|begin_of_text|>", "<|im_start|>", "<s>") in the input
  // and emit their ids, as llama.cpp's parse_special does.  Off: such text is tokenized as
  // ordinary characters.  Prompts a user typed into `loom run` and rendered chat templates allow
  // specials; text from untrusted sources (documents, API message contents) usually should not.
  // Non-special added tokens (tokenizer.json "special": false, GGUF user-defined) always match.
  bool parse_special = false;
};

// What a tokenizer carries for chat templates (chat_template.h): the Jinja source and the texts
// the template variables bos_token / eos_token stand for.  Views into the tokenizer.
struct ChatTemplateInfo {
  std::string_view source;     // "" when the tokenizer came without a template
  std::string_view bos_token;  // "" when none
  std::string_view eos_token;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes `text` (UTF-8, but any bytes are accepted) into ids.  Fails only when a character
  // cannot be represented (no byte pieces and no unknown token) or the input is pathological
  // (the pre-tokenizer regex gives up).
  virtual StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                const EncodeOptions& options) const = 0;
  // The same with only `add_bos` chosen: control-token text stays plain text.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const {
    return Encode(text, EncodeOptions{.add_bos = add_bos});
  }

  // The bytes token `id` contributes to the output text when it follows token `prev_id` (-1 at the
  // start of a stream): byte tokens give their raw byte, control tokens nothing, and tokenizers
  // with a dummy prefix drop the leading space of the first piece after BOS.  Out-of-range ids
  // give "".  The view stays valid as long as the tokenizer.
  virtual std::string_view DecodePiece(int32_t prev_id, int32_t id) const = 0;

  // The piece as spelled in the vocabulary (e.g. "▁the", "<0x0A>", "<s>", "Ġthe"), for display.
  // "" for out-of-range ids.
  virtual std::string_view PieceText(int32_t id) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  // Whether the tokenizer itself wants BOS prepended (model metadata); callers may override.
  virtual bool add_bos_default() const = 0;

  // Control tokens (<s>, </s>, chat markers): decoded as "", produced from text only with
  // EncodeOptions::parse_special.
  virtual bool IsControl(int32_t id) const = 0;
  // End of generation: EOS, other end-of-turn tokens the model declares (<|eot_id|>, <|im_end|>),
  // and BOS for llama2.c models (sampling BOS ends their generation).
  virtual bool IsEog(int32_t id) const = 0;

  // The algorithm's name for logs and `loom info`: "sentencepiece", "bpe".
  virtual std::string_view kind() const = 0;

  // The chat template that came with the tokenizer (GGUF tokenizer.chat_template,
  // tokenizer_config.json chat_template), with its bos/eos texts.
  virtual ChatTemplateInfo chat_template() const { return {}; }
};

}  // namespace loom::text
