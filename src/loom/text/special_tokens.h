// Finding added tokens in input text before it is pre-tokenized: "<|im_start|>" in a prompt becomes
// its id instead of the characters "<", "|", "im", ....  Matching is leftmost-longest over a byte
// trie (as Hugging Face's added-vocabulary matcher and llama.cpp's special-token partition do);
// control tokens match only when the caller allows them (EncodeOptions::parse_special), the other
// added tokens always.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::text {

// What tokenizer.json / tokenizer_config.json / config.json say about added and special tokens,
// whichever model they go with (BpeOptions and SentencePieceOptions both carry it).
struct AddedTokenOptions {
  std::vector<int32_t> lstrip_ids;  // added tokens that swallow the whitespace before them
  std::vector<int32_t> rstrip_ids;  // ... after them
  std::vector<int32_t> eog_ids;     // end of generation beside eos (config.json eos_token_id list)
  // The texts a chat template's bos_token / eos_token stand for (tokenizer_config.json); when not
  // set, the spellings of bos_id / eos_id.
  bool has_chat_tokens = false;
  std::string chat_bos_token;
  std::string chat_eos_token;
};

class SpecialTokenMatcher {
 public:
  struct Token {
    int32_t id = -1;
    bool control = true;  // matched only with parse_special
    bool lstrip = false;  // swallow the whitespace before the token (tokenizer.json "lstrip")
    bool rstrip = false;  // ... and after it ("rstrip")
  };

  // One piece of the input: plain text (id -1) or a matched token (text is what it covered).
  struct Fragment {
    std::string_view text;
    int32_t id = -1;
  };

  SpecialTokenMatcher() { root_.fill(-1); }

  // Registers `text` (not empty).  A text registered twice keeps its first token.
  void Add(std::string_view text, const Token& token);
  bool empty() const { return tokens_.empty(); }

  // Splits `text` into fragments in order; plain-text fragments are never empty.
  void Split(std::string_view text, bool allow_control, std::vector<Fragment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index)
    int32_t token = -1;                                 // index into tokens_ when a text ends here
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  // The longest allowed token starting at text[pos]: its length and index, or (0, -1).
  std::pair<size_t, int32_t> Longest(std::string_view text, size_t pos, bool allow_control) const;

  std::array<int32_t, 256> root_{};  // first byte -> node index, -1 when no token starts so
  std::vector<Node> nodes_;
  std::vector<Token> tokens_;
};

}  // namespace loom::text
