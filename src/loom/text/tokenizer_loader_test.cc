// Tokenizers loaded from real files: the llama2.c tokenizer.bin and the GGUF vocabulary of
// stories260K against the golden outputs of llama2.c run.c, and the loader's errors.
#include "loom/text/tokenizer_loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/base/testing.h"
#include "loom/text/detokenizer.h"
#include "loom/text/sentencepiece.h"
#include "loom/text/test_vocab.h"

namespace loom::text {
namespace {

namespace fs = std::filesystem;

struct Stories {
  std::string dir;
  std::unique_ptr<Tokenizer> bin;   // tok512.bin
  std::unique_ptr<Tokenizer> gguf;  // stories260K.gguf
};

Stories LoadStories(const std::string& shared) {
  Stories s;
  s.dir = shared + "/models/stories260K";
  auto bin = LoadTokenizer(s.dir + "/tok512.bin", 512);
  EXPECT_TRUE(bin.ok()) << bin.status().ToString();
  if (bin.ok()) s.bin = std::move(bin).value();
  auto gguf = LoadTokenizer(s.dir + "/stories260K.gguf");
  EXPECT_TRUE(gguf.ok()) << gguf.status().ToString();
  if (gguf.ok()) s.gguf = std::move(gguf).value();
  return s;
}

nlohmann::json Golden(const std::string& shared) {
  auto text = base::ReadFileToString(shared + "/golden/stories260K_greedy.json");
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return nlohmann::json::parse(text.ok() ? *text : "{}");
}

std::vector<int32_t> Encode(const Tokenizer& t, std::string_view text, bool add_bos = true) {
  auto ids = t.Encode(text, add_bos);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(TokenizerLoaderTest, LoadsBothStories260KTokenizers) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  Stories s = LoadStories(shared);
  ASSERT_NE(s.bin, nullptr);
  ASSERT_NE(s.gguf, nullptr);
  for (const Tokenizer* t : {s.bin.get(), s.gguf.get()}) {
    EXPECT_EQ(t->kind(), "sentencepiece");
    EXPECT_EQ(t->vocab_size(), 512);
    EXPECT_EQ(t->bos_id(), 1);
    EXPECT_EQ(t->eos_id(), 2);
    EXPECT_TRUE(t->IsControl(1));
    EXPECT_TRUE(t->IsControl(2));
    EXPECT_TRUE(t->IsEog(2));
    EXPECT_EQ(t->DecodePiece(-1, 13), "\n");
    EXPECT_EQ(t->DecodePiece(-1, 261), " a");
  }
  EXPECT_FALSE(static_cast<const SentencePieceTokenizer&>(*s.bin).metaspace());
  EXPECT_TRUE(static_cast<const SentencePieceTokenizer&>(*s.gguf).metaspace());
  EXPECT_TRUE(s.bin->IsEog(1));  // llama2.c: sampling BOS ends generation
  EXPECT_EQ(s.gguf->PieceText(261),
            "\xE2\x96\x81"
            "a");
}

TEST(TokenizerLoaderTest, GoldenPromptsEncodeToTheReferenceIds) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  Stories s = LoadStories(shared);
  ASSERT_NE(s.bin, nullptr);
  ASSERT_NE(s.gguf, nullptr);
  const nlohmann::json golden = Golden(shared);
  ASSERT_TRUE(golden.contains("entries"));
  ASSERT_FALSE(golden["entries"].empty());
  for (const auto& entry : golden["entries"]) {
    const std::string prompt = entry["prompt"];
    const std::vector<int32_t> want = entry["prompt_token_ids"];
    EXPECT_EQ(Encode(*s.bin, prompt), want) << "tok512.bin, prompt '" << prompt << "'";
    EXPECT_EQ(Encode(*s.gguf, prompt), want) << "gguf, prompt '" << prompt << "'";
  }
}

TEST(TokenizerLoaderTest, GoldenTokensDecodeToTheReferenceText) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  Stories s = LoadStories(shared);
  ASSERT_NE(s.bin, nullptr);
  ASSERT_NE(s.gguf, nullptr);
  const nlohmann::json golden = Golden(shared);
  for (const auto& entry : golden["entries"]) {
    std::vector<int32_t> ids = entry["prompt_token_ids"];
    const std::vector<int32_t> generated = entry["generated_token_ids"];
    ids.insert(ids.end(), generated.begin(), generated.end());
    const std::string want = entry["text"];
    for (const Tokenizer* t : {s.bin.get(), s.gguf.get()}) {
      // Streamed one token at a time, as generation prints it.
      StreamingDetokenizer detok(*t, {.llama2c_safe_printf = true});
      std::string text;
      for (int32_t id : ids) text.append(detok.Push(id));
      text.append(detok.Finish());
      EXPECT_EQ(text, want) << t->kind() << " steps " << entry["steps"];
    }
  }
}

TEST(TokenizerLoaderTest, BothTokenizersGiveIdenticalIdsOnVariedText) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  Stories s = LoadStories(shared);
  ASSERT_NE(s.bin, nullptr);
  ASSERT_NE(s.gguf, nullptr);
  const std::vector<std::string> texts = {
      "",
      " ",
      "Hello world",
      "Once upon a time, there was a little girl named Lily.",
      "  leading and trailing spaces  ",
      "many     spaces\tand\ttabs",
      "line one\nline two\n\n\nthree newlines",
      "digits 0123456789 and 3.14159, 42!",
      "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\x9C"
      "ber",                                                     // café naïve résumé Über
      "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95",        // 中文测试
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 party",            // 😀🎉
      "mixed: Tom\xE2\x84\xA2 said \xE2\x80\x9Chi\xE2\x80\x9D",  // ™ “ ”
      "\x80\xFF invalid \xE4 bytes \xC3",
      "<s> and </s> are plain text here",
      "The end.",
  };
  for (const std::string& text : texts) {
    for (bool bos : {false, true}) {
      const std::vector<int32_t> a = Encode(*s.bin, text, bos);
      EXPECT_EQ(a, Encode(*s.gguf, text, bos)) << "text '" << text << "'";
      for (int32_t id : a) EXPECT_FALSE(s.bin->IsControl(id) && !(bos && id == 1)) << text;
      // Without the llama2.c output rule, text made of valid UTF-8 round-trips (the dummy prefix
      // is dropped after BOS).
      if (bos && text.find('\x80') == std::string::npos) {
        EXPECT_EQ(DetokenizeAll(*s.gguf, a), text) << "text '" << text << "'";
      }
    }
  }
}

// The O(n log n) encoder against the run.c transcription on the real vocabularies: random byte
// slices of the golden stories (cut anywhere, so also through multi-byte characters).
TEST(TokenizerLoaderTest, RealVocabulariesMatchTheReferenceEncoder) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  Stories s = LoadStories(shared);
  ASSERT_NE(s.bin, nullptr);
  ASSERT_NE(s.gguf, nullptr);
  std::string corpus;
  const nlohmann::json golden = Golden(shared);
  for (const auto& entry : golden["entries"]) corpus += entry["text"].get<std::string>();
  corpus += " caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80  \t\n";
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<size_t> start(0, corpus.size() - 1);
  std::uniform_int_distribution<size_t> len(0, 120);
  for (int i = 0; i < 1000; ++i) {
    const std::string text = corpus.substr(start(rng), len(rng));
    for (const Tokenizer* t : {s.bin.get(), s.gguf.get()}) {
      const auto& sp = static_cast<const SentencePieceTokenizer&>(*t);
      ASSERT_EQ(Encode(sp, text), testing::ReferenceEncode(sp, text, true))
          << "text '" << text << "'";
    }
  }
}

TEST(TokenizerLoaderTest, FindsTheTokenizerForAModel) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string dir = shared + "/models/stories260K";
  // A llama2.c checkpoint: tok<vocab>.bin next to it (tok512.bin), or an explicit file.
  auto beside = LoadTokenizerForModel(dir + "/stories260K.bin", "");
  ASSERT_TRUE(beside.ok()) << beside.status().ToString();
  EXPECT_EQ((*beside)->vocab_size(), 512);
  auto explicit_tok = LoadTokenizerForModel(dir + "/stories260K.bin", dir + "/tok512.bin");
  ASSERT_TRUE(explicit_tok.ok()) << explicit_tok.status().ToString();
  // A GGUF carries its own; a tokenizer file stands for itself.
  auto gguf = LoadTokenizerForModel(dir + "/stories260K.gguf", "");
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto tok = LoadTokenizerForModel(dir + "/tok512.bin", "");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(Encode(**beside, "Lily and Tom"), Encode(**gguf, "Lily and Tom"));
  EXPECT_EQ(Encode(**tok, "Lily and Tom"), Encode(**explicit_tok, "Lily and Tom"));
}

TEST(TokenizerLoaderTest, ExplainsWhatIsWrong) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string dir = shared + "/models/stories260K";
  auto checkpoint = LoadTokenizer(dir + "/stories260K.bin");
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_NE(checkpoint.status().message().find("llama2.c checkpoint"), std::string::npos)
      << checkpoint.status().message();
  EXPECT_NE(checkpoint.status().message().find("--tokenizer"), std::string::npos);

  auto missing = LoadTokenizer(dir + "/no-such-file.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto wrong_size = LoadTokenizer(dir + "/tok512.bin", 32000);
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_NE(wrong_size.status().message().find("32000"), std::string::npos);

  // A checkpoint alone in a folder: no tokenizer anywhere.
  const fs::path tmp = fs::temp_directory_path() / ("loom_text_test_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  fs::copy_file(dir + "/stories260K.bin", tmp / "model.bin", fs::copy_options::overwrite_existing);
  auto lonely = LoadTokenizerForModel((tmp / "model.bin").string(), "");
  ASSERT_FALSE(lonely.ok());
  EXPECT_NE(lonely.status().message().find("pass --tokenizer FILE"), std::string::npos)
      << lonely.status().message();
  // The wrong vocabulary for the model.
  {
    std::ofstream junk(tmp / "junk.txt");
    junk << "this is not a tokenizer at all, just some text";
  }
  auto unknown = LoadTokenizer((tmp / "junk.txt").string());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown file"), std::string::npos)
      << unknown.status().message();
  auto unknown_model = LoadTokenizerForModel((tmp / "junk.txt").string(), "");
  ASSERT_FALSE(unknown_model.ok());
  fs::remove_all(tmp);

  model::TokenizerSpec none;
  auto no_tokenizer = TokenizerFromSpec(none, "model.gguf");
  ASSERT_FALSE(no_tokenizer.ok());
  EXPECT_EQ(no_tokenizer.status().message(), "model.gguf has no tokenizer; pass --tokenizer FILE");
  none.model = "gpt2";  // byte-level BPE, but without a vocabulary
  EXPECT_EQ(TokenizerFromSpec(none, "m.gguf").status().code(), StatusCode::kInvalidArgument);
  none.model = "bert";
  EXPECT_EQ(TokenizerFromSpec(none, "m.gguf").status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace loom::text
