#include "loom/text/detokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "loom/text/sentencepiece.h"
#include "loom/text/test_vocab.h"
#include "loom/text/utf8.h"

namespace loom::text {
namespace {

constexpr std::string_view kFffd = "\xEF\xBF\xBD";

std::unique_ptr<SentencePieceTokenizer> Vocab() {
  auto t = SentencePieceTokenizer::Create(
      testing::MakeSpec({{" ", 0}, {"Hi", 0}, {" there", 0}, {"\xC3\xA9", 0}, {"\x01", 0}}, false),
      "test-vocab");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

int32_t Byte(uint8_t b) { return 3 + b; }  // byte pieces sit at ids 3..258

// Pushes `ids` one at a time and concatenates everything returned, Finish() included.
std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids,
                   DetokenizerOptions options = {}) {
  StreamingDetokenizer d(t, options);
  std::string out;
  for (int32_t id : ids) out.append(d.Push(id));
  out.append(d.Finish());
  return out;
}

std::vector<int32_t> BytesAsTokens(std::string_view bytes) {
  std::vector<int32_t> ids;
  for (char c : bytes) ids.push_back(Byte(static_cast<uint8_t>(c)));
  return ids;
}

TEST(DetokenizerTest, PassesPiecesThroughAndDropsTheSpaceAfterBos) {
  auto t = Vocab();
  const int32_t hi = t->Lookup("Hi");
  const int32_t there = t->Lookup(" there");
  EXPECT_EQ(Stream(*t, {1, there, there, 2}), "there there");
  EXPECT_EQ(Stream(*t, {hi, there}), "Hi there");
  StreamingDetokenizer d(*t);
  EXPECT_EQ(d.Push(1), "");
  EXPECT_EQ(d.Push(there), "there");
  EXPECT_EQ(d.Push(there), " there");
  EXPECT_EQ(d.prev_id(), there);
}

TEST(DetokenizerTest, HoldsACharacterSplitOverByteTokensUntilComplete) {
  auto t = Vocab();
  StreamingDetokenizer d(*t);
  EXPECT_EQ(d.Push(t->Lookup("Hi")), "Hi");
  EXPECT_EQ(d.Push(Byte(0xE4)), "");
  EXPECT_EQ(d.Push(Byte(0xB8)), "");
  EXPECT_EQ(d.Push(Byte(0xAD)), "\xE4\xB8\xAD");  // 中
  EXPECT_EQ(d.Push(Byte(0xF0)), "");
  EXPECT_EQ(d.Push(Byte(0x9F)), "");
  EXPECT_EQ(d.Push(Byte(0x98)), "");
  EXPECT_EQ(d.Push(Byte(0x80)), "\xF0\x9F\x98\x80");  // 😀
  EXPECT_EQ(d.Finish(), "");
}

TEST(DetokenizerTest, ReplacesProvenInvalidSequencesAsSoonAsKnown) {
  auto t = Vocab();
  StreamingDetokenizer d(*t);
  EXPECT_EQ(d.Push(Byte(0x80)), kFffd);  // stray continuation byte
  EXPECT_EQ(d.Push(Byte(0xE4)), "");
  EXPECT_EQ(d.Push(Byte('a')), std::string(kFffd) + "a");  // lead byte cut short
  EXPECT_EQ(d.Push(Byte(0xC0)), kFffd);                    // never valid
  EXPECT_EQ(d.Push(Byte(0xE0)), "");
  EXPECT_EQ(d.Push(Byte(0x80)), std::string(kFffd) + std::string(kFffd));  // overlong
  EXPECT_EQ(d.Push(Byte(0xED)), "");
  EXPECT_EQ(d.Push(Byte(0xA0)), std::string(kFffd) + std::string(kFffd));  // surrogate
  EXPECT_EQ(d.Push(Byte(0xF4)), "");
  EXPECT_EQ(d.Push(Byte(0x90)), std::string(kFffd) + std::string(kFffd));  // > U+10FFFF
  EXPECT_EQ(d.Push(Byte(0xF0)), "");
  EXPECT_EQ(d.Push(Byte(0x9F)), "");
  EXPECT_EQ(d.Finish(), kFffd);  // incomplete at the end of the stream
  EXPECT_EQ(d.prev_id(), -1);
}

TEST(DetokenizerTest, OutputIsValidUtf8AndIndependentOfHowBytesAreSplit) {
  auto t = Vocab();
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> len(0, 40);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes;
    const int n = len(rng);
    for (int i = 0; i < n; ++i) {
      // Bias towards the interesting range so that valid multi-byte characters appear too.
      const int b = byte(rng);
      bytes.push_back(static_cast<char>(b < 128 ? 0x80 + b % 64 + (b % 3 == 0 ? 0x40 : 0) : b));
    }
    const std::string out = Stream(*t, BytesAsTokens(bytes));
    ASSERT_TRUE(IsValidUtf8(out)) << iter;
    if (IsValidUtf8(bytes)) {
      EXPECT_EQ(out, bytes);
    }
    // The same bytes as whole pieces where possible give the same text.
    std::vector<int32_t> mixed;
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (i + 1 < bytes.size() && bytes.substr(i, 2) == "\xC3\xA9") {
        mixed.push_back(t->Lookup("\xC3\xA9"));
        ++i;
      } else {
        mixed.push_back(Byte(static_cast<uint8_t>(bytes[i])));
      }
    }
    EXPECT_EQ(Stream(*t, mixed), out);
  }
  const std::string valid = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80z";
  EXPECT_EQ(Stream(*t, BytesAsTokens(valid)), valid);
}

TEST(DetokenizerTest, Llama2cRuleDropsSingleUnprintableBytes) {
  auto t = Vocab();
  DetokenizerOptions llama2c{.llama2c_safe_printf = true};
  // Control byte pieces and lone high bytes vanish; whitespace and printable bytes stay; a
  // multi-byte piece stays; so does a one-character piece that is printable.
  EXPECT_EQ(Stream(*t, {Byte(0x01), Byte('\n'), Byte('\t'), Byte('A'), Byte(0x7F)}, llama2c),
            "\n\tA");
  EXPECT_EQ(Stream(*t, {Byte(0xE4), Byte(0xB8), Byte(0xAD)}, llama2c), "");
  EXPECT_EQ(Stream(*t, {t->Lookup("\xC3\xA9"), t->Lookup("\x01")}, llama2c), "\xC3\xA9");
  EXPECT_EQ(Stream(*t, {Byte(0xE4), Byte(0xB8), Byte(0xAD)}), "\xE4\xB8\xAD");
  EXPECT_EQ(Stream(*t, {t->Lookup("\x01")}), "\x01");
  EXPECT_TRUE(Llama2cWouldPrint(" "));
  EXPECT_TRUE(Llama2cWouldPrint("\r"));
  EXPECT_FALSE(Llama2cWouldPrint(""));
  EXPECT_FALSE(Llama2cWouldPrint("\x1B"));
  EXPECT_FALSE(Llama2cWouldPrint("\xC3"));
  EXPECT_TRUE(Llama2cWouldPrint("\xC3\xA9"));
}

TEST(DetokenizerTest, FinishStartsANewStream) {
  auto t = Vocab();
  StreamingDetokenizer d(*t);
  const int32_t there = t->Lookup(" there");
  EXPECT_EQ(d.Push(1), "");
  EXPECT_EQ(d.Push(there), "there");
  EXPECT_EQ(d.Finish(), "");
  EXPECT_EQ(d.Push(there), " there");  // prev is no longer BOS
  d.Reset();
  EXPECT_EQ(d.Push(Byte(0xE4)), "");
  d.Reset();  // drops the held byte
  EXPECT_EQ(d.Finish(), "");
  EXPECT_EQ(DetokenizeAll(*t, std::vector<int32_t>{1, there, Byte(0xE4)}),
            "there" + std::string(kFffd));
}

}  // namespace
}  // namespace loom::text
