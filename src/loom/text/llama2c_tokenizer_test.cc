#include "loom/text/llama2c_tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "loom/base/testing.h"

namespace loom::text {
namespace {

// Serializes pieces as a tokenizer.bin (scores -i for piece i).
std::string WriteTokenizer(const std::vector<std::string>& pieces, int32_t max_len = -1) {
  if (max_len < 0) {
    max_len = 1;
    for (const std::string& p : pieces) max_len = std::max<int32_t>(max_len, p.size());
  }
  std::string out(reinterpret_cast<const char*>(&max_len), 4);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const float score = -static_cast<float>(i);
    const int32_t len = static_cast<int32_t>(pieces[i].size());
    out.append(reinterpret_cast<const char*>(&score), 4);
    out.append(reinterpret_cast<const char*>(&len), 4);
    out.append(pieces[i]);
  }
  return out;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

const std::vector<std::string> kPieces = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x00>", "<0x0A>",
                                          " ",     "a",       " a",       "<s>",    "<0xzz>"};

TEST(Llama2cTokenizerTest, ParsesPiecesScoresAndTypes) {
  const std::string file = WriteTokenizer(kPieces);
  auto spec = ParseLlama2cTokenizer(Bytes(file), 0, "tok.bin");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model, "llama");
  EXPECT_EQ(spec->tokens, kPieces);
  ASSERT_EQ(spec->scores.size(), kPieces.size());
  EXPECT_EQ(spec->scores[7], -7.0f);
  EXPECT_EQ(spec->unk_id, 0);
  EXPECT_EQ(spec->bos_id, 1);
  EXPECT_EQ(spec->eos_id, 2);
  EXPECT_TRUE(spec->stop_at_bos);
  EXPECT_TRUE(spec->add_space_prefix);
  EXPECT_EQ(spec->token_types,
            (std::vector<int32_t>{2, 3, 3, 6, 6, 1, 1, 1, 3, 1}));  // "<0xzz>" is no byte
}

TEST(Llama2cTokenizerTest, VocabSizeMustMatchExactly) {
  const std::string file = WriteTokenizer(kPieces);
  EXPECT_TRUE(ParseLlama2cTokenizer(Bytes(file), 10, "tok.bin").ok());
  auto fewer = ParseLlama2cTokenizer(Bytes(file), 9, "tok.bin");
  ASSERT_FALSE(fewer.ok());
  EXPECT_NE(fewer.status().message().find("remain after the 9 tokens"), std::string::npos)
      << fewer.status().message();
  auto more = ParseLlama2cTokenizer(Bytes(file), 11, "tok.bin");
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("tok.bin"), std::string::npos);
  EXPECT_FALSE(ParseLlama2cTokenizer(Bytes(file), 1000000, "tok.bin").ok());
  EXPECT_FALSE(ParseLlama2cTokenizer(Bytes(file), -1, "tok.bin").ok());
}

TEST(Llama2cTokenizerTest, EveryTruncationIsAnErrorNamingTheFile) {
  const std::string file = WriteTokenizer(kPieces);
  for (size_t n = 0; n < file.size(); ++n) {
    const std::string prefix = file.substr(0, n);
    auto spec = ParseLlama2cTokenizer(Bytes(prefix), static_cast<int64_t>(kPieces.size()), "t.bin");
    ASSERT_FALSE(spec.ok()) << n;
    EXPECT_EQ(spec.status().message().rfind("t.bin: ", 0), 0u) << spec.status().message();
    // Without a vocabulary size, a cut exactly between tokens is a valid shorter file (if it has
    // the three special tokens); anywhere else it is an error.
    int64_t whole_tokens = -1;  // tokens in the prefix when it ends exactly after a token
    size_t boundary = 4;
    for (size_t k = 0; k <= kPieces.size(); ++k) {
      if (boundary == n) whole_tokens = static_cast<int64_t>(k);
      if (k < kPieces.size()) boundary += 8 + kPieces[k].size();
    }
    const bool at_boundary = whole_tokens >= 0;
    auto open = ParseLlama2cTokenizer(Bytes(prefix), 0, "t.bin");
    EXPECT_EQ(open.ok(), at_boundary && whole_tokens >= 3) << n;
    if (open.ok()) {
      EXPECT_EQ(static_cast<int64_t>(open->tokens.size()), whole_tokens);
    }
  }
}

TEST(Llama2cTokenizerTest, RejectsBadLengthsAndScores) {
  std::string file = WriteTokenizer(kPieces);
  auto set_i32 = [](std::string& f, size_t off, int32_t v) { std::memcpy(&f[off], &v, 4); };
  // Token 0 header is at offset 4: score at 4, length at 8.
  for (int32_t bad : {-1, std::numeric_limits<int32_t>::min(), 7, 1 << 30}) {
    std::string f = file;
    set_i32(f, 8, bad);
    auto spec = ParseLlama2cTokenizer(Bytes(f), 0, "tok.bin");
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_NE(spec.status().message().find("token 0"), std::string::npos);
  }
  for (int32_t bad : {0, -5, (1 << 20) + 1}) {
    std::string f = file;
    set_i32(f, 0, bad);
    EXPECT_FALSE(ParseLlama2cTokenizer(Bytes(f), 0, "tok.bin").ok()) << bad;
  }
  std::string f = file;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&f[4], &nan, 4);
  EXPECT_FALSE(ParseLlama2cTokenizer(Bytes(f), 0, "tok.bin").ok());
  EXPECT_FALSE(ParseLlama2cTokenizer(Bytes(WriteTokenizer({"<unk>", "<s>"})), 0, "tok.bin").ok());
  EXPECT_FALSE(ParseLlama2cTokenizer({}, 0, "tok.bin").ok());
}

TEST(Llama2cTokenizerTest, ReadsTheRealStories260KTokenizer) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string path = shared + "/models/stories260K/tok512.bin";
  auto spec = ReadLlama2cTokenizer(path, 512);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->tokens.size(), 512u);
  EXPECT_EQ(spec->tokens[1], "\n<s>\n");
  EXPECT_EQ(spec->tokens[13], "<0x0A>");
  EXPECT_EQ(spec->tokens[410], " ");
  EXPECT_EQ(spec->token_types[13], 6);
  EXPECT_EQ(spec->token_types[2], 3);
  EXPECT_EQ(spec->scores[261], -2.0f);
  EXPECT_TRUE(ReadLlama2cTokenizer(path, 0).ok());
  EXPECT_FALSE(ReadLlama2cTokenizer(path, 511).ok());
  EXPECT_FALSE(ReadLlama2cTokenizer(path, 513).ok());
  auto missing = ReadLlama2cTokenizer(shared + "/models/stories260K/nope.bin", 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom::text
