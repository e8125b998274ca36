// Fuzzes the tiktoken rank file parser (Kimi K2's tiktoken.model) and the byte-level BPE built from
// what parses.  Input layout: a rank file, then optionally "\0" and text to encode with it.
// Invariants: nothing crashes; a parsed file has ranks 0..n-1 with distinct non-empty tokens; a
// vocabulary that parses and builds encodes to ids in range and decodes to valid UTF-8; when every
// byte is a token, decoding the ids of the text gives back exactly its bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "loom/text/detokenizer.h"
#include "loom/text/tiktoken_file.h"
#include "loom/text/tokenizer_loader.h"
#include "loom/text/utf8.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

// Building merges for huge vocabularies is slow and tells the fuzzer nothing new.
constexpr size_t kMaxRanksToBuild = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find('\0');
  const std::string_view file = input.substr(0, sep);
  const std::string_view text = sep == std::string_view::npos ? "" : input.substr(sep + 1);
  (void)loom::text::LooksLikeTiktoken(
      {reinterpret_cast<const std::byte*>(file.data()), file.size()});
  auto ranks = loom::text::ParseTiktokenRanks(file, "fuzz.model");
  if (!ranks.ok()) return 0;
  Check(!ranks->empty(), "an empty rank list parsed");
  std::set<std::string_view> distinct;
  bool every_byte = true;
  for (const std::string& t : *ranks) {
    Check(!t.empty(), "an empty token parsed");
    distinct.insert(t);
  }
  Check(distinct.size() == ranks->size(), "duplicate tokens parsed");
  for (int b = 0; b < 256; ++b) {
    every_byte &= distinct.count(std::string(1, static_cast<char>(b))) > 0;
  }
  if (ranks->size() > kMaxRanksToBuild) return 0;
  const int32_t n = static_cast<int32_t>(ranks->size());
  auto vocab = loom::text::TiktokenVocabulary(std::move(*ranks), {{n, "[BOS]"}, {n + 2, "<|x|>"}},
                                              "fuzz.model");
  Check(vocab.ok(), "a parsed rank file did not make a vocabulary");
  auto t = loom::text::TokenizerFromJson(std::move(*vocab), "fuzz.model");
  Check(t.ok(), "a parsed rank file did not build");
  for (bool special : {false, true}) {
    auto ids = (*t)->Encode(text, {.add_bos = false, .parse_special = special});
    if (!ids.ok()) {
      Check(!every_byte, "encoding failed although every byte is a token");
      continue;
    }
    for (int32_t id : *ids) Check(id >= 0 && id < (*t)->vocab_size(), "id out of range");
    const std::string decoded = loom::text::DetokenizeAll(**t, *ids);
    Check(loom::text::IsValidUtf8(decoded), "detokenizer produced invalid UTF-8");
    if (every_byte && !special && loom::text::IsValidUtf8(text)) {
      Check(decoded == text, "round trip");
    }
  }
  return 0;
}
