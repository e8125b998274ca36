// Fuzzes the tokenizer.model (SentencePiece protobuf) reader and the tokenizer built from what
// parses.  Input layout: byte 0 selects what the rest is:
//   0: tokenizer.model bytes, then optionally "\xFF\xFF\xFF\xFF" and text to encode with it;
//   1: text to encode with a fixed small tokenizer.model (the encoder sees deep inputs even when
//      random files do not parse).
// Invariants: nothing crashes; a model that parses serializes and parses back to the same pieces,
// scores, types and ids; encoded ids are in range; decoded text is valid UTF-8; with the fixed
// model (every byte has a piece), decoding the ids of valid UTF-8 text gives back the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "loom/text/detokenizer.h"
#include "loom/text/sentencepiece_model.h"
#include "loom/text/tokenizer_loader.h"
#include "loom/text/utf8.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// <unk> <s> </s>, the 256 byte pieces, then a few pieces with scores.
std::string FixedModel() {
  static const std::string bytes = [] {
    loom::model::TokenizerSpec spec;
    spec.model = "llama";
    spec.tokens = {"<unk>", "<s>", "</s>"};
    spec.scores = {0, 0, 0};
    spec.token_types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      spec.tokens.emplace_back(buf);
      spec.scores.push_back(0);
      spec.token_types.push_back(6);
    }
    const char* pieces[] = {
        "\xE2\x96\x81",    "a",  "b",     "t", "h", "e", "\xE2\x96\x81t", "th", "he",
        "\xE2\x96\x81the", "ab", "<tool>"};
    float score = -1;
    for (const char* p : pieces) {
      spec.tokens.emplace_back(p);
      spec.scores.push_back(score--);
      spec.token_types.push_back(std::strcmp(p, "<tool>") == 0 ? 4 : 1);
    }
    spec.unk_id = 0;
    spec.bos_id = 1;
    spec.eos_id = 2;
    auto s = loom::text::SerializeSentencePieceModel(spec);
    Check(s.ok(), "fixed model did not serialize");
    return *s;
  }();
  return bytes;
}

void Exercise(const loom::text::Tokenizer& t, std::string_view text, bool exact) {
  for (bool special : {false, true}) {
    auto ids = t.Encode(text, {.add_bos = special, .parse_special = special});
    if (!ids.ok()) continue;
    for (int32_t id : *ids) Check(id >= 0 && id < t.vocab_size(), "id out of range");
    const std::string decoded = loom::text::DetokenizeAll(t, *ids);
    Check(loom::text::IsValidUtf8(decoded), "detokenizer produced invalid UTF-8");
  }
  // After BOS the dummy prefix is dropped again; every other byte comes back (a literal "▁" comes
  // back as the space it stands for; text after the added token <tool> gets a prefix of its own).
  if (!exact || !loom::text::IsValidUtf8(text) ||
      text.find("\xE2\x96\x81") != std::string_view::npos ||
      text.find("<tool>") != std::string_view::npos) {
    return;
  }
  auto ids = t.Encode(text, {.add_bos = true, .parse_special = false});
  Check(ids.ok(), "the fixed model failed to encode valid UTF-8");
  Check(loom::text::DetokenizeAll(t, *ids) == text, "round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    const size_t sep = rest.find("\xFF\xFF\xFF\xFF");
    const std::string_view model = rest.substr(0, sep);
    const std::string_view text = sep == std::string_view::npos ? "" : rest.substr(sep + 4);
    auto spec = loom::text::ParseSentencePieceModel(Bytes(model), "fuzz.model");
    if (!spec.ok()) return 0;
    auto again = loom::text::SerializeSentencePieceModel(*spec);
    Check(again.ok(), "a parsed model did not serialize");
    auto back = loom::text::ParseSentencePieceModel(Bytes(*again), "again.model");
    Check(back.ok(), "a serialized model did not parse");
    auto respelled = loom::text::MetaspaceSpec(*spec);
    Check(respelled.ok(), "a parsed model did not validate");
    Check(back->tokens == respelled->tokens, "pieces changed in a round trip");
    Check(back->token_types == respelled->token_types, "types changed in a round trip");
    Check(std::memcmp(back->scores.data(), respelled->scores.data(),
                      back->scores.size() * sizeof(float)) == 0,
          "scores changed in a round trip");
    Check(back->bos_id == spec->bos_id && back->eos_id == spec->eos_id &&
              back->unk_id == spec->unk_id && back->pad_id == spec->pad_id,
          "ids changed in a round trip");
    auto t = loom::text::TokenizerFromSpec(*spec, "fuzz.model");
    if (t.ok()) Exercise(**t, text, false);
    return 0;
  }
  auto spec = loom::text::ParseSentencePieceModel(Bytes(FixedModel()), "fixed.model");
  Check(spec.ok(), "fixed model rejected");
  auto t = loom::text::TokenizerFromSpec(*spec, "fixed.model");
  Check(t.ok(), "fixed tokenizer did not build");
  Exercise(**t, rest, true);
  return 0;
}
