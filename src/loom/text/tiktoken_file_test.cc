// tiktoken rank files: what parses, the errors for what does not, and a Kimi-style directory
// (tiktoken.model + tokenizer_config.json) found and loaded by the tokenizer loader.  The
// vocabulary here is tiny and hand-made; tiktoken itself checks the real-sized one
// (bpe_reference_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/text/bpe.h"
#include "loom/text/detokenizer.h"
#include "loom/text/tiktoken_file.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::text {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string Base64(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    out += {kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], '=', '='};
  } else if (bytes.size() - i == 2) {
    const uint32_t v =
        (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8);
    out += {kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='};
  }
  return out;
}

// Every byte ranked by its value, then `extra` tokens ranked 256, 257, ...
std::string RankFile(const std::vector<std::string>& extra) {
  std::string out;
  for (int b = 0; b < 256; ++b) {
    out += Base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  for (size_t i = 0; i < extra.size(); ++i) {
    out += Base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  }
  return out;
}

std::string Error(std::string_view text) {
  auto r = ParseTiktokenRanks(text, "t.model");
  EXPECT_FALSE(r.ok()) << "parsed: '" << text << "'";
  return r.ok() ? std::string() : r.status().ToString();
}

TEST(TiktokenRanksTest, ParsesRanksInAnyOrderWithCrlfAndBlankLines) {
  auto r = ParseTiktokenRanks("YWI= 2\r\nYQ== 0\n\nYg== 1", "t.model");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<std::string>{"a", "b", "ab"}));
}

TEST(TiktokenRanksTest, MalformedLinesAreClearErrors) {
  EXPECT_THAT(Error("YQ== 0\nY!== 1\n"), HasSubstr("line 2: token 'Y!==' is not valid base64"));
  EXPECT_THAT(Error("YQ= 0\n"), HasSubstr("line 1: token 'YQ=' is not valid base64"));
  EXPECT_THAT(Error("YQ== 0\nYg== x1\n"), HasSubstr("line 2: rank 'x1' is not a decimal number"));
  EXPECT_THAT(Error("YQ== -1\n"), HasSubstr("rank '-1' is not a decimal number"));
  EXPECT_THAT(Error("YQ== 0\nYg== 0\n"), HasSubstr("line 2: rank 0 was already given on line 1"));
  EXPECT_THAT(Error("YQ== 0\nYQ== 1\n"), HasSubstr("rank 1 has the same bytes as rank 0"));
  EXPECT_THAT(Error("YQ==\n"), HasSubstr("line 1: expected 'BASE64 RANK', got 'YQ=='"));
  EXPECT_THAT(Error("YQ==  0\n"), HasSubstr("expected 'BASE64 RANK'"));
  EXPECT_THAT(Error("YQ== 0\nYg== 2\n\n"), HasSubstr("rank 1 is missing"));
  EXPECT_THAT(Error("YQ== 99999999\n"), HasSubstr("rank 99999999 is beyond the 2 lines"));
  EXPECT_THAT(Error("\n\n"), HasSubstr("no ranks"));
}

TEST(TiktokenRanksTest, SniffsRankFilesOnly) {
  EXPECT_TRUE(LooksLikeTiktoken(Bytes("IQ== 0\nIg== 1\n")));
  EXPECT_TRUE(LooksLikeTiktoken(Bytes("IQ== 0")));
  EXPECT_FALSE(LooksLikeTiktoken(Bytes("{\"model\": {}}")));
  EXPECT_FALSE(LooksLikeTiktoken(Bytes("IQ== x\n")));
  EXPECT_FALSE(LooksLikeTiktoken(Bytes("IQ= 0\n")));
  EXPECT_FALSE(LooksLikeTiktoken(Bytes("")));
}

TEST(TiktokenRanksTest, MergesEverySplitAtTheRankOfWhatItMakes) {
  // "abc" (3) splits as a|bc and ab|c; "bc" (2) as b|c; "ab" (1) as a|b.
  const std::vector<std::string> tokens = {"a", "ab", "bc", "abc", "b", "c"};
  std::vector<std::string> merges;
  std::vector<int32_t> ranks;
  RankMerges(tokens, std::vector<bool>(tokens.size(), true), &merges, &ranks);
  EXPECT_EQ(merges, (std::vector<std::string>{"a b", "b c", "a bc", "ab c"}));
  EXPECT_EQ(ranks, (std::vector<int32_t>{1, 2, 3, 3}));
}

class TiktokenDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per process and test: ctest runs this file's tests in parallel processes.
    dir_ = fs::path(::testing::TempDir()) /
           ("loom_tiktoken_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::FILE* f = std::fopen((dir_ / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  fs::path dir_;
};

TEST_F(TiktokenDirectoryTest, LoadsRanksSpecialsAndConfig) {
  // 256 bytes, then "ab" 256, "cd" 257, "abcd" 258: specials start at 259.
  Write("tiktoken.model", RankFile({"ab", "cd", "abcd"}));
  Write("tokenizer_config.json",
        R"({"added_tokens_decoder": {"259": {"content": "[BOS]", "special": true},
              "260": {"content": "[EOS]", "special": true},
              "261": {"content": "<|im_end|>", "special": true}},
            "bos_token": "[BOS]", "eos_token": "[EOS]"})");
  auto t = LoadTokenizer(dir_.string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), 259 + 256);
  EXPECT_EQ((*t)->bos_id(), 259);
  EXPECT_EQ((*t)->eos_id(), 260);
  EXPECT_FALSE((*t)->add_bos_default());
  EXPECT_TRUE((*t)->IsEog(261));
  EXPECT_EQ((*t)->PieceText(262), "<|reserved_token_262|>");
  EXPECT_EQ(static_cast<const BpeTokenizer&>(**t).pre_name(), "kimi-k2");
  // "abcd" is a token: whole.  "abcdab" merges ab, cd, ab, then ab+cd (258).  Specials only with
  // parse_special.
  auto ids = (*t)->Encode("abcd abcdab[BOS]<|im_end|>", {.add_bos = false, .parse_special = true});
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<int32_t>{258, ' ', 258, 256, 259, 261}));
  auto plain = (*t)->Encode("[BOS]", {.add_bos = false, .parse_special = false});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, (std::vector<int32_t>{'[', 'B', 'O', 'S', ']'}));
  EXPECT_EQ(DetokenizeAll(**t, *ids), "abcd abcdab");

  // The file itself loads too, with its directory's configs.
  auto file = LoadTokenizer((dir_ / "tiktoken.model").string());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->bos_id(), 259);
}

TEST_F(TiktokenDirectoryTest, SpecialIdsOutsideTheReservedRangeAreErrors) {
  Write("tiktoken.model", RankFile({}));
  Write("tokenizer_config.json", R"({"added_tokens_decoder": {"12": {"content": "[X]"}}})");
  auto t = LoadTokenizer(dir_.string());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().ToString(), HasSubstr("added_tokens_decoder id '12'"));
  Write("tokenizer_config.json", R"({"added_tokens_decoder": {"512": {"content": "[X]"}}})");
  t = LoadTokenizer(dir_.string());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().ToString(), HasSubstr("special ids 256..511"));
}

TEST_F(TiktokenDirectoryTest, BadRankFileNamesTheFileAndLine) {
  Write("tiktoken.model", RankFile({}) + "!!!! 256\n");
  auto t = LoadTokenizer(dir_.string());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().ToString(), HasSubstr("tiktoken.model: line 257: token '!!!!'"));
}

}  // namespace
}  // namespace loom::text
