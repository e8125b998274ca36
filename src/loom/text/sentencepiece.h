// SentencePiece-style tokenizer (GGUF tokenizer.ggml.model == "llama", and llama2.c tokenizer.bin):
// every UTF-8 character becomes a piece (or its bytes become "<0xXX>" byte pieces when the
// character is not in the vocabulary), then the adjacent pair whose concatenation is the piece
// with the highest score is merged, again and again, ties going to the leftmost pair.  That is
// exactly llama2.c run.c's encode(); here a priority queue over a linked list of symbols makes it
// O(n log n) instead of run.c's O(n^2) rescans.
//
// Details that follow run.c: the dummy prefix " " (non-empty text, add_space_prefix) is a symbol of
// its own before the first character; a "character" is a byte plus the continuation bytes after it
// (at most 4 bytes), so invalid UTF-8 falls back to bytes.  Where run.c has accidents, this does
// the sensible thing instead: only normal and user-defined pieces can result from text (run.c
// could merge into a control or "<0xXX>" piece whose spelling happens to match), byte fallback
// uses the "<0xXX>" pieces (run.c assumes id = byte + 3, true for Llama vocabularies), scores
// below -1e10 still merge, and a NUL byte is an ordinary byte (run.c stops at it).
//
// Vocabularies come in two spellings of the space: SentencePiece/GGUF pieces use "▁" (U+2581),
// llama2.c tokenizer.bin pieces contain real spaces.  The spelling is detected from the pieces;
// input spaces are rewritten to it before merging, and decoding turns "▁" back into " ".
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/text/special_tokens.h"
#include "loom/text/tokenizer.h"

namespace loom::text {

// GGUF token types (tokenizer.ggml.token_type).
enum class PieceKind : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Builds from a spec with model "llama".  Validates ids, array lengths, byte pieces and scores
  // (NaN is rejected); `source` (a file name) prefixes the error messages.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> Create(const model::TokenizerSpec& spec,
                                                                  std::string_view source);

  // Lookups point into pieces_; the object is neither copied nor moved.
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  // With parse_special, control pieces spelled in the text become their ids, and the text after
  // each gets the dummy prefix again (as llama.cpp does).
  using Tokenizer::Encode;
  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options) const override;
  std::string_view DecodePiece(int32_t prev_id, int32_t id) const override;
  std::string_view PieceText(int32_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  bool add_bos_default() const override { return add_bos_; }
  bool IsControl(int32_t id) const override;
  bool IsEog(int32_t id) const override;
  std::string_view kind() const override { return "sentencepiece"; }
  ChatTemplateInfo chat_template() const override;

  // True when pieces spell the space as "▁" (GGUF), false for real spaces (llama2.c).
  bool metaspace() const { return metaspace_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  PieceKind piece_kind(int32_t id) const { return kinds_[static_cast<size_t>(id)]; }
  float score(int32_t id) const { return scores_[static_cast<size_t>(id)]; }
  // The id of the piece spelled exactly `piece` that plain text may produce (normal and
  // user-defined pieces), or -1.
  int32_t Lookup(std::string_view piece) const;
  // The id of the byte piece "<0xXX>" for `byte`, or -1.
  int32_t ByteId(uint8_t byte) const { return byte_ids_[byte]; }

  // `text` with its spaces in the vocabulary's spelling ("▁" or " ").
  std::string SpellSpaces(std::string_view text) const;

 private:
  SentencePieceTokenizer() = default;
  // Appends the ids of plain text; `prefix` adds the dummy prefix (non-empty text only).
  Status EncodeText(std::string_view text, bool prefix, std::vector<int32_t>* ids) const;

  std::vector<std::string> pieces_;   // (vocab) as spelled in the vocabulary
  std::vector<std::string> decoded_;  // (vocab) output bytes: "▁" -> " ", bytes raw, control ""
  std::vector<float> scores_;         // (vocab) merge priority, higher first
  std::vector<PieceKind> kinds_;      // (vocab)
  std::unordered_map<std::string_view, int32_t> lookup_;  // views into pieces_
  std::array<int32_t, 256> byte_ids_{};                   // byte -> "<0xXX>" id, -1 if absent
  SpecialTokenMatcher controls_;                          // control pieces, for parse_special
  std::string source_;
  std::string chat_template_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
  bool stop_at_bos_ = false;
  bool metaspace_ = false;
  bool has_byte_pieces_ = false;  // byte fallback: unknown characters become their bytes
};

// Parses the byte piece spelling "<0xXX>" (two hex digits, either case).  False otherwise.
bool ParseBytePiece(std::string_view piece, uint8_t* byte);

}  // namespace loom::text
