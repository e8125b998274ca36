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
//
// The same tokenizer serves SentencePiece-style tokenizer.json files (BPE with byte_fallback,
// tokenizer_json.h) and tokenizer.model files (sentencepiece_model.h).  A tokenizer.json gives a
// merge list instead of scores: with spec.merges set, the pair to merge is the listed pair of
// lowest rank (ties: leftmost), as Hugging Face's BPE model does; SentencePieceOptions carry what
// its normalizer, pre-tokenizer and decoder say about the dummy prefix and word splitting.
//
// Added tokens: control and unknown pieces are matched in the text only with parse_special,
// user-defined pieces (tokenizer.json added tokens with "special": false) always, as llama.cpp and
// Hugging Face do.  Each run of text between them is encoded on its own and gets the dummy prefix
// as SentencePieceOptions::prepend says.
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

// Which runs of text (between added tokens) get the dummy prefix.
enum class PrependScheme : uint8_t {
  kAlways,  // every run (GGUF/llama.cpp, tokenizer.model, tokenizer.json Prepend normalizer)
  kFirst,   // only a run at the very start of the text (Metaspace prepend_scheme "first")
  kNever,
};

// What a TokenizerSpec (the GGUF view) does not say; the defaults are GGUF's behaviour.
struct SentencePieceOptions : AddedTokenOptions {
  PrependScheme prepend = PrependScheme::kAlways;  // with spec.add_space_prefix false: never
  // Metaspace pre-tokenizer: no dummy prefix for a run that already starts with a space.
  bool prepend_unless_space = false;
  // Metaspace split: every space starts a new word, and merges never join two words.
  bool split_words = false;
  // Decoders that strip the leading space of a stream's first piece (Strip, Metaspace) do it at
  // the start of a stream too, not only after BOS.
  bool strip_space_at_start = false;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Builds from a spec with model "llama".  Validates ids, array lengths, byte pieces, scores
  // (NaN is rejected) and merges (each must join two pieces into a piece); `source` (a file name)
  // prefixes the error messages.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> Create(
      const model::TokenizerSpec& spec, std::string_view source,
      const SentencePieceOptions& options = {});

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
  // Whether merges follow a merge list (tokenizer.json) rather than scores.
  bool ranked_merges() const { return !merge_ranks_.empty(); }
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
  // Whether a run of text starting at `offset` of the input gets the dummy prefix.
  bool WantsPrefix(std::string_view run, size_t offset) const;
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  struct RankedMerge {
    int32_t rank = 0;
    int32_t id = -1;  // the merged piece
  };

  std::vector<std::string> pieces_;   // (vocab) as spelled in the vocabulary
  std::vector<std::string> decoded_;  // (vocab) output bytes: "▁" -> " ", bytes raw, control ""
  std::vector<float> scores_;         // (vocab) merge priority, higher first
  std::vector<PieceKind> kinds_;      // (vocab)
  std::unordered_map<std::string_view, int32_t> lookup_;  // views into pieces_
  std::array<int32_t, 256> byte_ids_{};                   // byte -> "<0xXX>" id, -1 if absent
  // (left id, right id) -> merge, when the vocabulary came with a merge list
  std::unordered_map<uint64_t, RankedMerge> merge_ranks_;
  SpecialTokenMatcher specials_;  // control and unknown pieces (parse_special), user-defined ones
  std::vector<int32_t> eog_ids_;
  std::string source_;
  std::string chat_template_;
  std::string chat_bos_token_;
  std::string chat_eos_token_;
  bool has_chat_tokens_ = false;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
  bool stop_at_bos_ = false;
  bool metaspace_ = false;
  bool has_byte_pieces_ = false;  // byte fallback: unknown characters become their bytes
  PrependScheme prepend_ = PrependScheme::kAlways;
  bool prepend_unless_space_ = false;
  bool split_words_ = false;
  bool strip_space_at_start_ = false;
};

// Parses the byte piece spelling "<0xXX>" (two hex digits, either case).  False otherwise.
bool ParseBytePiece(std::string_view piece, uint8_t* byte);

}  // namespace loom::text
