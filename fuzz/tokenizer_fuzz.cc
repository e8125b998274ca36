// Fuzzes the llama2.c tokenizer.bin parser, the SentencePiece encoder and the streaming
// detokenizer.  Input layout: byte 0 = mode; bytes 1..2 = n (u16 LE); the next n bytes are a
// tokenizer.bin (mode bit 0 clear) and the rest is text to encode.  With mode bit 0 set a fixed
// small vocabulary is used and everything after byte 0 is text, so the encoder sees deep inputs
// even when random files do not parse.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "loom/text/detokenizer.h"
#include "loom/text/llama2c_tokenizer.h"
#include "loom/text/sentencepiece.h"
#include "loom/text/utf8.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}


loom::model::TokenizerSpec FixedSpec() {
  loom::model::TokenizerSpec spec;
  spec.model = "llama";
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    spec.tokens.emplace_back(buf);
    spec.token_types.push_back(6);
  }
  const char* pieces[] = {"\xE2\x96\x81",
                          "a",
                          "b",
                          "c",
                          "ab",
                          "bc",
                          "abc",
                          "\xE2\x96\x81\x61",  // "▁a"
                          "\xC3\xA9",
                          "\xE4\xB8\xAD",
                          "\xE2\x96\x81\xE2\x96\x81",
                          "ca",
                          "cab"};
  for (const char* p : pieces) {
    spec.tokens.emplace_back(p);
    spec.token_types.push_back(1);
  }
  spec.scores.resize(spec.tokens.size());
  for (size_t i = 0; i < spec.scores.size(); ++i) spec.scores[i] = -static_cast<float>(i % 3);
  return spec;
}

void Exercise(const loom::text::SentencePieceTokenizer& t, std::string_view text) {
  for (bool bos : {false, true}) {
    auto ids = t.Encode(text, bos);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) Check(id >= 0 && id < t.vocab_size(), "id out of range");
    for (bool llama2c : {false, true}) {
      const std::string out = loom::text::DetokenizeAll(t, *ids, {.llama2c_safe_printf = llama2c});
      Check(loom::text::IsValidUtf8(out), "detokenizer produced invalid UTF-8");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool fixed = (data[0] & 1) != 0;
  if (fixed) {
    auto t = loom::text::SentencePieceTokenizer::Create(FixedSpec(), "fixed");
    Check(t.ok(), "fixed vocabulary rejected");
    Exercise(**t, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    return 0;
  }
  if (size < 3) return 0;
  const size_t n = std::min<size_t>(data[1] | (size_t{data[2]} << 8), size - 3);
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data + 3), n);
  const int64_t vocab_hint = (data[0] & 2) != 0 ? data[0] >> 2 : 0;  // 0: read to the end
  auto spec = loom::text::ParseLlama2cTokenizer(file, vocab_hint, "fuzz.bin");
  if (!spec.ok()) return 0;
  Check(spec->tokens.size() == spec->scores.size(), "scores");
  Check(spec->tokens.size() == spec->token_types.size(), "types");
  auto t = loom::text::SentencePieceTokenizer::Create(*spec, "fuzz.bin");
  if (!t.ok()) return 0;
  Exercise(**t, std::string_view(reinterpret_cast<const char*>(data + 3 + n), size - 3 - n));
  return 0;
}
