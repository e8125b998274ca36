// The text side of byte-level BPE, before merging: normalization (NFC, through ICU), splitting
// into words with the model's regexes (PCRE2 in UTF + UCP mode, so \p{L}, \p{N} and \s mean what
// they mean in Hugging Face tokenizers; JIT-compiled when the library supports it), and GPT-2's
// byte-to-character mapping that turns every byte into a printable character of the vocabulary.
//
// Invalid UTF-8 never reaches PCRE2 or ICU: each maximal valid run is normalized and split, and
// every invalid byte becomes a word of its own (byte-level BPE can still spell it).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::text {

// The pre-tokenizer regexes of the models we know, as their tokenizer.json files spell them.
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek-V3 (and R1): three Split steps, digits in threes, then runs of CJK ideographs and kana,
// then the rest (tokenizer.json and llama.cpp's DEEPSEEK3_LLM spell them alike).
// clang-format off
inline constexpr std::string_view kDeepSeekV3Regexes[] = {
    R"(\p{N}{1,3})",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
// clang-format on
// Kimi K2's pat_str (tokenization_kimi.py) in PCRE2: the model writes its letter classes as
// intersections, [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]], which PCRE2 10.42 lacks; each becomes
// (?:(?!\p{sc:Han})[...]).  \p{Han} there is the Script property (Rust's regex, under tiktoken);
// PCRE2's bare \p{Han} would be Script_Extensions (it takes "、" and "。" too), hence sc:.
inline constexpr std::string_view kKimiK2Regex =
    R"([\p{sc:Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)"
    R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+)"
    R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A compiled regex.  Immutable once compiled, so one Regex serves many threads (each match
// allocates its own match data).
class Regex {
 public:
  // Compiles `pattern` (UTF + UCP); errors name the pattern offset and `source`.
  static StatusOr<Regex> Compile(std::string_view pattern, std::string_view source);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Appends the pieces of `text` (valid UTF-8) as Hugging Face's Split(behavior "Isolated") makes
  // them: every non-empty match, and the text between matches, in order.
  Status Split(std::string_view text, std::vector<std::string_view>* out) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  Regex() = default;
  struct Code;
  std::unique_ptr<Code> code_;
  std::string pattern_;
  bool jit_ = false;
};

struct PreTokenizerConfig {
  bool nfc = false;                        // normalizer NFC
  std::vector<std::string> split_regexes;  // Split(Isolated), in order, each over every piece
  bool byte_level_regex = false;           // ByteLevel(use_regex): the GPT-2 regex, after those
  bool add_prefix_space = false;           // ByteLevel(add_prefix_space)
};

class PreTokenizer {
 public:
  static StatusOr<PreTokenizer> Create(const PreTokenizerConfig& config, std::string_view source);

  // Normalizes `text` into `*buffer` and splits it into words, which are views into `*buffer`
  // (the vector is cleared first).
  Status Run(std::string_view text, std::string* buffer,
             std::vector<std::string_view>* words) const;

  const PreTokenizerConfig& config() const { return config_; }
  // Whether every regex runs JIT-compiled.
  bool jit() const {
    for (const Regex& r : regexes_) {
      if (!r.jit()) return false;
    }
    return true;
  }

 private:
  PreTokenizerConfig config_;
  std::vector<Regex> regexes_;  // split_regexes, then GPT-2's when byte_level_regex
  std::string source_;
};

// `text` in Unicode normalization form C, appended to `out`.  Invalid UTF-8 bytes are copied as
// they are.
Status AppendNfc(std::string_view text, std::string* out);

// GPT-2's byte <-> character mapping: printable bytes stand for themselves, the other 68 are
// shifted to U+0100 onwards (space -> "Ġ", newline -> "Ċ").
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  // The UTF-8 spelling of the character that stands for `byte`.
  std::string_view Char(uint8_t byte) const { return chars_[byte]; }
  // Appends the characters for the bytes of `text`.
  void Encode(std::string_view text, std::string* out) const;
  // Appends the bytes a vocabulary piece spells; false (and nothing appended) when the piece
  // contains a character outside the alphabet.
  bool Decode(std::string_view piece, std::string* out) const;

 private:
  std::array<std::string, 256> chars_;
  std::array<int16_t, 324> byte_of_cp_{};  // code point (< 324) -> byte, -1 when not in alphabet
};

}  // namespace loom::text
