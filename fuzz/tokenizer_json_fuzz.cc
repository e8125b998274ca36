// Fuzzes the tokenizer.json parser (and the config files applied beside it) and the tokenizer
// built from what parses (byte-level BPE, or SentencePiece style).  Input layout: byte 0 selects
// what the rest is:
//   0: a tokenizer.json, then optionally "\0" and text to encode with it;
//   1: a tokenizer_config.json applied to a fixed small tokenizer;
//   2: a config.json applied to it;
//   3: text to encode with the fixed tokenizer (the encoder sees deep inputs even when random
//      files do not parse).
// Invariants: nothing crashes; encoded ids are in range; decoded text is valid UTF-8; with the
// fixed tokenizer, decoding the ids gives back exactly the input bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "loom/text/bpe.h"
#include "loom/text/detokenizer.h"
#include "loom/text/tokenizer_json.h"
#include "loom/text/tokenizer_loader.h"
#include "loom/text/utf8.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

// A small Llama-3-style tokenizer.json: every byte, a few merges, special and added tokens.
const char kFixed[] = R"({
  "added_tokens": [
    {"id": 262, "content": "<|begin_of_text|>", "special": true},
    {"id": 263, "content": "<|eot_id|>", "special": true, "lstrip": true},
    {"id": 264, "content": "<think>", "special": false, "rstrip": true}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}}]},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "ignore_merges": true, "vocab": VOCAB,
            "merges": [["h", "i"], ["Ġ", "t"], ["Ġt", "h"], "Ġth e", ["r", "e"], "Ġthe re"]}})";

std::string FixedJson() {
  static const std::string json = [] {
    loom::text::ByteLevelAlphabet alphabet;
    std::string vocab = "{";
    for (int b = 0; b < 256; ++b) {
      std::string ch(alphabet.Char(static_cast<uint8_t>(b)));
      std::string escaped;
      for (char c : ch) {
        if (c == '"' || c == '\\') escaped.push_back('\\');
        escaped.push_back(c);
      }
      vocab += "\"" + escaped + "\": " + std::to_string(b) + ", ";
    }
    vocab += R"("hi": 256, "Ġt": 257, "Ġth": 258, "Ġthe": 259, "re": 260, "Ġthere": 261})";
    std::string j = kFixed;
    j.replace(j.find("VOCAB"), 5, vocab);
    return j;
  }();
  return json;
}

void Exercise(const loom::text::Tokenizer& t, std::string_view text, bool exact) {
  for (bool special : {false, true}) {
    auto ids = t.Encode(text, {.add_bos = special, .parse_special = special});
    if (!ids.ok()) continue;
    std::string raw;
    for (int32_t id : *ids) {
      Check(id >= 0 && id < t.vocab_size(), "id out of range");
      raw.append(t.DecodePiece(-1, id));
    }
    Check(loom::text::IsValidUtf8(loom::text::DetokenizeAll(t, *ids)),
          "detokenizer produced invalid UTF-8");
    // Without specials, NFC changes or whitespace swallowed by <think> (rstrip), the bytes come
    // back exactly.
    if (exact && !special && text.find("<think>") == std::string_view::npos) {
      std::string nfc;
      if (loom::text::AppendNfc(text, &nfc).ok() && nfc == text) Check(raw == text, "round trip");
    }
  }
}

std::unique_ptr<loom::text::Tokenizer> Build(loom::text::TokenizerJson t) {
  loom::text::FinishTokenizerJson(false, &t);
  auto built = loom::text::TokenizerFromJson(std::move(t), "fuzz.json");
  return built.ok() ? std::move(built).value() : nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const int mode = data[0] % 4;
  if (mode == 0) {
    const size_t nul = rest.find('\0');
    const std::string_view json = rest.substr(0, nul);
    const std::string_view text = nul == std::string_view::npos ? "" : rest.substr(nul + 1);
    auto parsed = loom::text::ParseTokenizerJson(json, "fuzz.json");
    if (!parsed.ok()) return 0;
    Check(parsed->spec.tokens.size() == parsed->spec.token_types.size(), "types");
    auto t = Build(std::move(parsed).value());
    if (t != nullptr) Exercise(*t, text, false);
    return 0;
  }
  auto fixed = loom::text::ParseTokenizerJson(FixedJson(), "fixed.json");
  Check(fixed.ok(), "fixed tokenizer.json rejected");
  if (mode == 1 || mode == 2) {
    const loom::Status s = mode == 1
                               ? loom::text::ApplyTokenizerConfig(rest, "fuzz_config.json", &*fixed)
                               : loom::text::ApplyModelConfig(rest, "fuzz_config.json", &*fixed);
    if (!s.ok()) return 0;
    auto t = Build(std::move(fixed).value());
    if (t != nullptr) Exercise(*t, "hi there<|eot_id|> <think> x", false);
    return 0;
  }
  auto t = Build(std::move(fixed).value());
  Check(t != nullptr, "fixed tokenizer did not build");
  Exercise(*t, rest, true);
  return 0;
}
