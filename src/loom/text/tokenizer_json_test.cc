// tokenizer.json parsing: a synthetic Llama-3-style file in both merge spellings, the config files
// beside it (chat template, BOS, EOS lists), directories, and clear errors for malformed or
// unsupported files.
#include "loom/text/tokenizer_json.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/text/bpe_test_vocab.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::text {
namespace {

namespace fs = std::filesystem;
using testing::AddedToken;
using testing::MakeBpeSpec;
using testing::MakeTokenizerJson;

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "i"}, {" ", "t"}, {" t", "here"}, {"h", "e"}, {"he", "re"}, {"r", "e"}};

model::TokenizerSpec Spec() {
  return MakeBpeSpec(kMerges, {"here"},
                     {{"<|begin_of_text|>", true}, {"<|eot_id|>", true}, {"<think>", false}});
}

// A fresh directory under the test's temp dir.
fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("loom_tokjson_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void Write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

Status ParseError(const std::string& json) {
  auto t = ParseTokenizerJson(json, "bad.json");
  return t.ok() ? OkStatus() : t.status();
}

nlohmann::json Base() { return nlohmann::json::parse(MakeTokenizerJson(Spec(), true)); }

TEST(TokenizerJsonTest, ParsesVocabularyMergesAndAddedTokens) {
  for (bool pairs : {true, false}) {
    auto t = ParseTokenizerJson(MakeTokenizerJson(Spec(), pairs), "tok.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const model::TokenizerSpec& spec = t->spec;
    EXPECT_EQ(spec.model, "gpt2");
    EXPECT_EQ(spec.pre, "llama-bpe");
    EXPECT_EQ(spec.tokens, Spec().tokens);
    EXPECT_EQ(spec.merges, Spec().merges);
    EXPECT_EQ(spec.token_types, Spec().token_types);  // special -> 3, other added -> 4
    EXPECT_FALSE(spec.add_bos);
  }
}

TEST(TokenizerJsonTest, TheParsedTokenizerEncodes) {
  auto t = ParseTokenizerJson(MakeTokenizerJson(Spec(), true), "tok.json");
  ASSERT_TRUE(t.ok());
  auto bpe = BpeTokenizer::Create(std::move(t->spec), t->options, "tok.json");
  ASSERT_TRUE(bpe.ok()) << bpe.status().ToString();
  auto ids = (*bpe)->Encode("hi there<think>", {.parse_special = true});
  ASSERT_TRUE(ids.ok());
  std::vector<std::string> pieces;
  for (int32_t id : *ids) pieces.emplace_back((*bpe)->DecodePiece(-1, id));
  EXPECT_EQ(pieces, (std::vector<std::string>{"hi", " there", "<think>"}));
}

TEST(TokenizerJsonTest, TemplateProcessingDecidesBos) {
  nlohmann::json j = Base();
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors",
                          {{{"type", "ByteLevel"}},
                           {{"type", "TemplateProcessing"},
                            {"single",
                             {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}}}};
  auto t = ParseTokenizerJson(j.dump(), "tok.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->spec.add_bos);
  EXPECT_EQ(t->spec.bos_id, 262);  // 256 bytes, 6 merged pieces, then the added tokens
}

TEST(TokenizerJsonTest, NfcNormalizerAndKnownRegexNames) {
  nlohmann::json j =
      nlohmann::json::parse(MakeTokenizerJson(Spec(), true, std::string(kQwen2Regex)));
  j["normalizer"] = {{"type", "NFC"}};
  auto t = ParseTokenizerJson(j.dump(), "tok.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->options.pre.nfc);
  EXPECT_EQ(t->spec.pre, "qwen2");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+|\\S+";
  auto custom = ParseTokenizerJson(j.dump(), "tok.json");
  ASSERT_TRUE(custom.ok());
  EXPECT_EQ(custom->spec.pre, "");
  EXPECT_EQ(custom->options.pre.split_regexes, std::vector<std::string>{"\\s+|\\S+"});
}

TEST(TokenizerJsonTest, MalformedFilesAreClearErrors) {
  auto expect = [](const Status& s, StatusCode code, std::string_view needle) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find("bad.json"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  expect(ParseError("{\"model\": {"), StatusCode::kInvalidArgument, "not valid JSON");
  expect(ParseError("[1, 2]"), StatusCode::kInvalidArgument, "must be an object");
  expect(ParseError("{}"), StatusCode::kInvalidArgument, "no \"model\" object");

  nlohmann::json j = Base();
  j["model"]["vocab"]["x"] = "seven";
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "model.vocab['x'] must be an integer");
  j = Base();
  j["model"]["vocab"]["x"] = 3;  // id 3 already belongs to another piece
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "already belongs to");
  j = Base();
  j["model"]["vocab"]["x"] = -1;
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "outside 0..");
  j = Base();
  j["model"]["vocab"]["x"] = 5000000;
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "far beyond");
  j = Base();
  j["model"]["vocab"] = nlohmann::json::array();
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "model.vocab must be an object");
  j = Base();
  j["model"]["merges"].push_back({"a", "b", "c"});
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "pairs of strings");
  j = Base();
  j["model"]["merges"].push_back(7);
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "model.merges");
  j = Base();
  j["added_tokens"].push_back({{"content", "<x>"}});
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "id is missing");
  j = Base();
  j["added_tokens"].push_back({{"id", 1000}, {"content", ""}});
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "content is empty");
  j = Base();
  j["model"]["unk_token"] = "<nope>";
  expect(ParseError(j.dump()), StatusCode::kInvalidArgument, "unk_token '<nope>'");

  j = Base();
  j["model"]["type"] = "WordPiece";
  expect(ParseError(j.dump()), StatusCode::kUnimplemented, "WordPiece");
  j = Base();
  j["model"]["byte_fallback"] = true;
  expect(ParseError(j.dump()), StatusCode::kUnimplemented, "byte_fallback");  // with ByteLevel
  j = Base();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect(ParseError(j.dump()), StatusCode::kUnimplemented, "Lowercase");
  j = Base();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  expect(ParseError(j.dump()), StatusCode::kUnimplemented, "Metaspace");
  j = Base();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}};
  expect(ParseError(j.dump()), StatusCode::kUnimplemented, "no ByteLevel step");
  j = Base();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect(ParseError(j.dump()), StatusCode::kUnimplemented, "Removed");
  j = Base();
  j["decoder"] = {{"type", "WordPiece"}};
  expect(ParseError(j.dump()), StatusCode::kUnimplemented, "decoder 'WordPiece'");
}

TEST(TokenizerJsonTest, MergesReferencingUnknownTokensFailWhenBuilt) {
  nlohmann::json j = Base();
  j["model"]["merges"].push_back({"q", "zz"});
  auto t = ParseTokenizerJson(j.dump(), "bad.json");
  ASSERT_TRUE(t.ok());
  auto bpe = BpeTokenizer::Create(std::move(t->spec), t->options, "bad.json");
  ASSERT_FALSE(bpe.ok());
  EXPECT_NE(bpe.status().message().find("bad.json"), std::string::npos);
  EXPECT_NE(bpe.status().message().find("'zz'"), std::string::npos);
}

TEST(TokenizerJsonTest, DirectoryWithConfigFilesGivesTemplateBosAndEos) {
  const fs::path dir = TempDir("config");
  Write(dir / "tokenizer.json", MakeTokenizerJson(Spec(), true));
  Write(dir / "tokenizer_config.json",
        R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"},
            "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"})");
  Write(dir / "config.json", R"({"bos_token_id": 262, "eos_token_id": [263, 258, 99999]})");
  for (const fs::path& path : {dir, dir / "tokenizer.json"}) {
    auto t = LoadTokenizer(path.string());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->bos_id(), 262);
    EXPECT_EQ((*t)->eos_id(), 263);
    EXPECT_TRUE((*t)->add_bos_default());  // a bos token distinct from eos: Llama 3 style
    EXPECT_TRUE((*t)->IsEog(263));
    EXPECT_TRUE((*t)->IsEog(258));  // listed in config.json
    EXPECT_FALSE((*t)->IsEog(262));
    const ChatTemplateInfo chat = (*t)->chat_template();
    EXPECT_EQ(chat.bos_token, "<|begin_of_text|>");
    EXPECT_EQ(chat.eos_token, "<|eot_id|>");
    EXPECT_NE(chat.source.find("messages"), std::string_view::npos);
  }
  auto for_model = LoadTokenizerForModel(dir.string(), "");
  ASSERT_TRUE(for_model.ok()) << for_model.status().ToString();
  EXPECT_EQ((*for_model)->kind(), "bpe");
}

TEST(TokenizerJsonTest, ExplicitAddBosFalseAndNamedTemplates) {
  const fs::path dir = TempDir("qwen_like");
  Write(dir / "tokenizer.json", MakeTokenizerJson(Spec(), false));
  Write(dir / "tokenizer_config.json",
        R"({"add_bos_token": false, "bos_token": null, "eos_token": "<|eot_id|>",
            "chat_template": [{"name": "tool_use", "template": "T"},
                              {"name": "default", "template": "D"}]})");
  auto t = LoadTokenizer(dir.string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE((*t)->add_bos_default());
  EXPECT_EQ((*t)->chat_template().source, "D");
  EXPECT_EQ((*t)->chat_template().bos_token, "");
}

TEST(TokenizerJsonTest, ChatTemplateJinjaFileIsUsedWhenTheConfigHasNone) {
  const fs::path dir = TempDir("jinja_file");
  Write(dir / "tokenizer.json", MakeTokenizerJson(Spec(), true));
  Write(dir / "chat_template.jinja", "{{ messages[0].content }}");
  auto t = LoadTokenizer(dir.string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->chat_template().source, "{{ messages[0].content }}");
}

TEST(TokenizerJsonTest, LoaderErrorsNameTheFile) {
  const fs::path dir = TempDir("errors");
  auto none = LoadTokenizer(dir.string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("without a tokenizer.json"), std::string::npos);
  Write(dir / "tokenizer.json", "{\"model\": 3}");
  auto bad = LoadTokenizer(dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tokenizer.json"), std::string::npos);
  Write(dir / "tokenizer.json", MakeTokenizerJson(Spec(), true));
  Write(dir / "tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}");
  auto bad_config = LoadTokenizer(dir.string());
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.status().message().find("tokenizer_config.json"), std::string::npos);
  EXPECT_NE(bad_config.status().message().find("<|nope|>"), std::string::npos);
}

}  // namespace
}  // namespace loom::text
