// Pre-tokenization: the model regexes through PCRE2 (hand-derived splits), invalid UTF-8, long
// whitespace runs, NFC through ICU, and GPT-2's byte alphabet.
#include "loom/text/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace loom::text {
namespace {

std::vector<std::string> Words(std::string_view regex, std::string_view text, bool nfc = false) {
  PreTokenizerConfig config;
  config.split_regexes = {std::string(regex)};
  config.nfc = nfc;
  auto p = PreTokenizer::Create(config, "test");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  std::string buffer;
  std::vector<std::string_view> words;
  Status s = p->Run(text, &buffer, &words);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::vector<std::string>(words.begin(), words.end());
}

using Strings = std::vector<std::string>;

TEST(PreTokenizerTest, Llama3RegexSplitsWordsNumbersAndWhitespaceRuns) {
  EXPECT_EQ(Words(kLlama3Regex, "Hello world's 123456 \n\n  x"),
            (Strings{"Hello", " world", "'s", " ", "123", "456", " \n\n", " ", " x"}));
}

TEST(PreTokenizerTest, Llama3ContractionsIgnoreCaseGpt2DoesNot) {
  EXPECT_EQ(Words(kLlama3Regex, "IT'S we'LL"), (Strings{"IT", "'S", " we", "'LL"}));
  EXPECT_EQ(Words(kGpt2Regex, "IT'S we'll"), (Strings{"IT", "'", "S", " we", "'ll"}));
}

TEST(PreTokenizerTest, Qwen2RegexSplitsDigitsOneByOne) {
  EXPECT_EQ(Words(kQwen2Regex, "x 2024!"), (Strings{"x", " ", "2", "0", "2", "4", "!"}));
}

TEST(PreTokenizerTest, UnicodeLettersAndNumbersFollowTheirCategories) {
  // é and CJK are letters (\p{L}); Arabic-Indic digits are numbers (\p{N}) in groups of 3.
  EXPECT_EQ(Words(kLlama3Regex, "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD"),
            (Strings{"caf\xC3\xA9", " \xE4\xBD\xA0\xE5\xA5\xBD"}));
  EXPECT_EQ(Words(kLlama3Regex, "\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6"),
            (Strings{"\xD9\xA3\xD9\xA4\xD9\xA5", "\xD9\xA6"}));
  // Non-breaking space is \s in Unicode mode.
  EXPECT_EQ(Words(kLlama3Regex,
                  "a\xC2\xA0"
                  "b"),
            (Strings{"a",
                     "\xC2\xA0"
                     "b"}));
}

TEST(PreTokenizerTest, InvalidUtf8BytesBecomeWordsOfTheirOwn) {
  EXPECT_EQ(Words(kLlama3Regex,
                  "ab\xFF"
                  "cd \xC3"),
            (Strings{"ab", "\xFF", "cd", " ", "\xC3"}));
}

TEST(PreTokenizerTest, WordsCoverTheInputExactly) {
  const std::string text = "  The 12345 quick\t\tbrown\r\n\r\nfox's   \xF0\x9F\x98\x80!!  ";
  for (std::string_view regex : {kGpt2Regex, kLlama3Regex, kQwen2Regex, kTekkenRegex}) {
    std::string joined;
    for (const std::string& w : Words(regex, text)) {
      EXPECT_FALSE(w.empty());
      joined += w;
    }
    EXPECT_EQ(joined, text) << regex;
  }
}

TEST(PreTokenizerTest, LongWhitespaceRunsDoNotOverflowTheMatcher) {
  const std::string text = "a" + std::string(1 << 20, ' ') + "b" + std::string(1 << 18, '\n');
  std::string joined;
  for (const std::string& w : Words(kLlama3Regex, text)) joined += w;
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizerTest, NfcComposesWhenAskedAndKeepsInvalidBytes) {
  std::string out;
  ASSERT_TRUE(AppendNfc("e\xCC\x81 \xFF", &out).ok());
  EXPECT_EQ(out, "\xC3\xA9 \xFF");
  EXPECT_EQ(Words(kQwen2Regex, "e\xCC\x81t\xC3\xA9", /*nfc=*/true), (Strings{"\xC3\xA9t\xC3\xA9"}));
  // Without NFC, the combining accent (\p{M}, not \p{L}) splits the word.
  EXPECT_EQ(Words(kQwen2Regex, "e\xCC\x81t", /*nfc=*/false), (Strings{"e", "\xCC\x81t"}));
}

TEST(PreTokenizerTest, ByteLevelRegexAndPrefixSpace) {
  PreTokenizerConfig config;
  config.byte_level_regex = true;
  config.add_prefix_space = true;
  auto p = PreTokenizer::Create(config, "test");
  ASSERT_TRUE(p.ok());
  std::string buffer;
  std::vector<std::string_view> words;
  ASSERT_TRUE(p->Run("Hi there", &buffer, &words).ok());
  EXPECT_EQ(Strings(words.begin(), words.end()), (Strings{" Hi", " there"}));
}

TEST(PreTokenizerTest, BadRegexIsAnErrorNamingTheOffset) {
  auto r = Regex::Compile("ab(c", "tok.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tok.json"), std::string::npos);
  EXPECT_NE(r.status().message().find("offset 4"), std::string::npos) << r.status().ToString();
}

TEST(ByteLevelAlphabetTest, MapsEveryByteToOneCharacterAndBack) {
  ByteLevelAlphabet a;
  EXPECT_EQ(a.Char(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(a.Char('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(a.Char('a'), "a");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string spelled;
  a.Encode(all, &spelled);
  std::string back;
  ASSERT_TRUE(a.Decode(spelled, &back));
  EXPECT_EQ(back, all);
  std::string out = "x";
  EXPECT_FALSE(a.Decode("\xE2\x82\xAC", &out));  // € is not in the alphabet
  EXPECT_EQ(out, "x");
}

}  // namespace
}  // namespace loom::text
