// Byte-level BPE (GPT-2 style), the tokenizer of Llama 3, Qwen2/2.5/3, Mistral Nemo and most recent
// models: tokenizer.json (model.type "BPE" with a ByteLevel pre-tokenizer) or GGUF
// (tokenizer.ggml.model = "gpt2").
//
// Encoding: added tokens are found in the text first (special_tokens.h; control tokens only with
// parse_special); every other run of text is normalized (NFC where the model says), split into
// words by the model's regexes (pretokenizer.h), each word's bytes are spelled in GPT-2's byte
// alphabet, and the word's symbols (one per byte) are merged pair by pair, lowest merge rank
// first (ties: leftmost), with a priority queue over a linked list: O(n log n) per word.  With
// ignore_merges (Llama 3, Tekken) a word that is itself in the vocabulary is taken whole.
//
// Decoding: each id maps to the raw bytes it stands for (byte alphabet undone; added tokens are
// their own text; control tokens ""), which the StreamingDetokenizer assembles into UTF-8.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/text/pretokenizer.h"
#include "loom/text/sentencepiece.h"
#include "loom/text/special_tokens.h"
#include "loom/text/tokenizer.h"

namespace loom::text {

// What a TokenizerSpec (the GGUF view) does not say: how text is split, and the details a
// tokenizer.json / tokenizer_config.json / config.json add.
struct BpeOptions : AddedTokenOptions {
  PreTokenizerConfig pre;
  bool ignore_merges = false;
  // (merges) the priority of each merge when it is not its index: tiktoken vocabularies give every
  // split of a token the token's rank (tiktoken_file.h).  Empty: merge i has priority i.
  std::vector<int32_t> merge_ranks;
};

// The options for a GGUF tokenizer.ggml.pre name ("llama-bpe", "qwen2", "gpt-2", "tekken",
// "deepseek-v3", "kimi-k2", "default", ...); Unimplemented for names whose regexes are not known
// here.
StatusOr<BpeOptions> BpeOptionsForPre(std::string_view pre, std::string_view source);

class BpeTokenizer final : public Tokenizer {
 public:
  // Builds from a spec with model "gpt2": tokens in the byte alphabet (added tokens as their
  // text), token_types (3 control, 4 user-defined = non-special added token), merges "a b" by
  // rank.  Validates ids, lengths and that every merge joins two known tokens into a known token;
  // errors name `source`.
  // `spec` is taken by value: pass an rvalue to spare copying the vocabulary.
  static StatusOr<std::unique_ptr<BpeTokenizer>> Create(model::TokenizerSpec spec,
                                                        const BpeOptions& options,
                                                        std::string_view source);

  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

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
  std::string_view kind() const override { return "bpe"; }
  ChatTemplateInfo chat_template() const override;

  PieceKind piece_kind(int32_t id) const { return kinds_[static_cast<size_t>(id)]; }
  const std::string& pre_name() const { return pre_name_; }
  int64_t merge_count() const { return static_cast<int64_t>(merges_.size()); }
  bool regex_jit() const { return regex_jit_; }

 private:
  BpeTokenizer() = default;
  struct Merge {
    int32_t rank = 0;
    int32_t id = -1;  // the merged token
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Appends the ids of plain text (no added tokens in it).
  Status EncodeText(std::string_view text, std::vector<int32_t>* ids) const;
  // Appends the ids of one word already spelled in the byte alphabet (`raw` is its bytes).
  Status EncodeWord(std::string_view raw, std::vector<int32_t>* ids) const;

  std::vector<std::string> pieces_;   // (vocab) as spelled in the vocabulary
  std::vector<std::string> decoded_;  // (vocab) raw output bytes; "" for control and unused
  std::vector<PieceKind> kinds_;      // (vocab)
  // Open-addressing tables (no allocation per entry: building 400k entries stays fast).
  class PieceTable {
   public:
    void Reserve(size_t n);
    // Inserts unless present (the first of duplicates wins).
    void Insert(std::string_view piece, int32_t id);
    int32_t Find(std::string_view piece) const;  // -1 when absent
   private:
    std::vector<std::pair<std::string_view, int32_t>> slots_;  // id -1 = empty
    size_t mask_ = 0;
  };
  class MergeTable {
   public:
    void Reserve(size_t n);
    void Insert(uint64_t key, Merge merge);  // the first (lowest rank) wins
    const Merge* Find(uint64_t key) const;
    size_t size() const { return size_; }

   private:
    std::vector<std::pair<uint64_t, Merge>> slots_;  // Merge::id -1 = empty
    size_t mask_ = 0;
    size_t size_ = 0;
  };

  PieceTable lookup_;                    // normal pieces -> id, views into pieces_
  MergeTable merges_;                    // PairKey(left, right) -> merge
  std::array<int32_t, 256> byte_ids_{};  // byte -> its one-character token, -1
  ByteLevelAlphabet alphabet_;
  PreTokenizer pre_;
  SpecialTokenMatcher specials_;
  std::unordered_set<int32_t> eog_;
  std::string source_;
  std::string pre_name_;
  std::string chat_template_;
  std::string chat_bos_token_;
  std::string chat_eos_token_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  bool add_bos_ = false;
  bool ignore_merges_ = false;
  bool regex_jit_ = false;
};

}  // namespace loom::text
