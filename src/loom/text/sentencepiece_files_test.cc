// SentencePiece-style tokenizer.json and tokenizer.model, and the files `loom convert` writes:
// what each normalizer / pre-tokenizer / decoder variant means for the ids, added tokens,
// malformed files, and that written files read back into the same tokenizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/text/bpe_test_vocab.h"
#include "loom/text/detokenizer.h"
#include "loom/text/sentencepiece.h"
#include "loom/text/sentencepiece_model.h"
#include "loom/text/test_vocab.h"
#include "loom/text/tokenizer_files.h"
#include "loom/text/tokenizer_json.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::text {
namespace {

using Json = nlohmann::json;
const std::string kSp = "\xE2\x96\x81";  // "▁"

// <unk> <s> </s>, byte pieces, then pieces (in "▁" spelling) with merges in the given order.
Json SpmJson(const std::vector<std::string>& pieces, const std::vector<std::string>& merges) {
  Json vocab = Json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  for (const std::string& p : pieces) vocab[p] = static_cast<int>(vocab.size());
  Json j;
  j["added_tokens"] = Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                   {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       Json::array({{{"type", "Prepend"}, {"prepend", kSp}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}})}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       Json::array({{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},    {"byte_fallback", true}, {"unk_token", "<unk>"},
                {"fuse_unk", true}, {"vocab", vocab},        {"merges", merges}};
  return j;
}

std::unique_ptr<Tokenizer> FromJson(const Json& j) {
  auto t = ParseTokenizerJson(j.dump(), "test.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return nullptr;
  FinishTokenizerJson(false, &*t);
  auto built = TokenizerFromJson(std::move(*t), "test.json");
  EXPECT_TRUE(built.ok()) << built.status().ToString();
  return built.ok() ? std::move(built).value() : nullptr;
}

std::vector<std::string> Pieces(const Tokenizer& t, std::string_view text, bool special = false) {
  auto ids = t.Encode(text, {.add_bos = false, .parse_special = special});
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  std::vector<std::string> out;
  if (ids.ok()) {
    for (int32_t id : *ids) out.emplace_back(t.PieceText(id));
  }
  return out;
}

const std::vector<std::string> kPieces = {kSp, "a", "b", kSp + "a", "a" + kSp, "ab", kSp + "ab"};

TEST(SentencePieceJsonTest, LegacyNormalizerPrependsToEveryRunAndMergesByRank) {
  // "a ▁" and "a b" outrank "▁ a": rank order, not piece order, decides.
  auto t = FromJson(SpmJson(kPieces, {"a " + kSp, "a b", kSp + " a", kSp + " ab"}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind(), "sentencepiece");
  EXPECT_TRUE(static_cast<const SentencePieceTokenizer&>(*t).ranked_merges());
  EXPECT_TRUE(t->add_bos_default());  // the template starts with <s>
  EXPECT_EQ(Pieces(*t, "ab"), (std::vector<std::string>{kSp + "ab"}));
  EXPECT_EQ(Pieces(*t, "a a"), (std::vector<std::string>{kSp, "a" + kSp, "a"}));
  // After a special token the next run gets its dummy prefix again (Hugging Face legacy,
  // llama.cpp).
  EXPECT_EQ(Pieces(*t, "<s>ab", true), (std::vector<std::string>{"<s>", kSp + "ab"}));
  EXPECT_EQ(Pieces(*t, "<s>ab", false),
            (std::vector<std::string>{kSp, "<0x3C>", "<0x73>", "<0x3E>", "ab"}));
  // Byte fallback, and the Strip decoder drops the prefix at the start of a stream.
  auto ids = t->Encode("a\xE4\xB8\xAD", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 4u);  // "▁a" and three byte pieces
  EXPECT_EQ(DetokenizeAll(*t, *ids), "a\xE4\xB8\xAD");
}

TEST(SentencePieceJsonTest, MetaspaceSchemesAndSplitting) {
  Json j = SpmJson(kPieces, {"a " + kSp, "a b", kSp + " a", kSp + " ab"});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "first"}};
  auto first = FromJson(j);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(Pieces(*first, "<s>ab", true), (std::vector<std::string>{"<s>", "ab"}));
  EXPECT_EQ(Pieces(*first, "ab"), (std::vector<std::string>{kSp + "ab"}));
  // A run that starts with a space gets no second one.
  EXPECT_EQ(Pieces(*first, " ab"), (std::vector<std::string>{kSp + "ab"}));
  EXPECT_EQ(Pieces(*first, "a a"), (std::vector<std::string>{kSp, "a" + kSp, "a"}));

  j["pre_tokenizer"]["split"] = true;  // words never merge with each other
  auto split = FromJson(j);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(Pieces(*split, "a a"), (std::vector<std::string>{kSp + "a", kSp + "a"}));

  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "never"}};
  auto never = FromJson(j);
  ASSERT_NE(never, nullptr);
  EXPECT_EQ(Pieces(*never, "ab"), (std::vector<std::string>{"ab"}));

  // Older files: add_prefix_space instead of prepend_scheme.
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSp}, {"add_prefix_space", true}};
  auto old = FromJson(j);
  ASSERT_NE(old, nullptr);
  EXPECT_EQ(Pieces(*old, "<s>ab", true), (std::vector<std::string>{"<s>", kSp + "ab"}));
}

TEST(SentencePieceJsonTest, AddedTokensMatchAlwaysOrWithSpecialsOnly) {
  Json j = SpmJson(kPieces, {"a b", kSp + " ab"});
  const int tool = 3 + 256 + static_cast<int>(kPieces.size());
  j["added_tokens"].push_back(
      {{"id", tool}, {"content", "<tool>"}, {"special", false}, {"lstrip", true}});
  j["added_tokens"].push_back({{"id", tool + 1}, {"content", "<|end|>"}, {"special", true}});
  auto t = FromJson(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), tool + 2);
  // Non-special: matched even without parse_special, swallowing the spaces before it (lstrip).
  EXPECT_EQ(Pieces(*t, "ab  <tool>ab"),
            (std::vector<std::string>{kSp + "ab", "<tool>", kSp + "ab"}));
  EXPECT_FALSE(t->IsControl(tool));
  EXPECT_EQ(t->DecodePiece(-1, tool), "<tool>");
  EXPECT_TRUE(t->IsControl(tool + 1));
  EXPECT_EQ(Pieces(*t, "<|end|>", true), (std::vector<std::string>{"<|end|>"}));
  EXPECT_NE(Pieces(*t, "<|end|>", false).size(), 1u);
}

TEST(SentencePieceJsonTest, UnsupportedVariantsAreClearErrors) {
  const Json base = SpmJson(kPieces, {"a b"});
  auto expect = [](Json j, StatusCode code, const std::string& needle) {
    auto t = ParseTokenizerJson(j.dump(), "bad.json");
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_EQ(t.status().code(), code) << t.status().ToString();
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().ToString();
  };
  Json j = base;
  j["normalizer"]["normalizers"].push_back({{"type", "NFKC"}});
  expect(j, StatusCode::kUnimplemented, "normalizer 'NFKC'");
  j = base;
  j["normalizer"]["normalizers"][1]["content"] = "_";
  expect(j, StatusCode::kUnimplemented, "Replace");
  j = base;
  j["normalizer"] = nullptr;
  expect(j, StatusCode::kUnimplemented, "Metaspace");
  j = base;
  j["decoder"]["decoders"][3]["start"] = 2;
  expect(j, StatusCode::kUnimplemented, "Strip");
  j = base;
  j["decoder"] = {{"type", "WordPiece"}};
  expect(j, StatusCode::kUnimplemented, "decoder 'WordPiece'");
  j = base;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  expect(j, StatusCode::kUnimplemented, "replacement '_'");
  j = base;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
  expect(j, StatusCode::kInvalidArgument, "sometimes");
  j = base;
  j["model"]["merges"] = Json::array({"a zz"});
  auto parsed = ParseTokenizerJson(j.dump(), "bad.json");
  ASSERT_TRUE(parsed.ok());
  auto built = TokenizerFromJson(std::move(*parsed), "bad.json");
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("merge 0 'a zz'"), std::string::npos);
}

TEST(SentencePieceModelTest, WrittenModelsReadBackExactly) {
  model::TokenizerSpec spec = testing::MakeSpec({{" ", 0}, {"a", -1}, {" a", -2}}, true);
  spec.token_types.push_back(4);  // a user-defined piece
  spec.tokens.push_back("<tool>");
  spec.scores.push_back(0);
  spec.pad_id = -1;
  spec.add_space_prefix = false;
  auto bytes = SerializeSentencePieceModel(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto back = ParseSentencePieceModel(
      {reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()}, "x.model");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tokens, spec.tokens);
  EXPECT_EQ(back->scores, spec.scores);
  EXPECT_EQ(back->token_types, spec.token_types);
  EXPECT_EQ(back->bos_id, 1);
  EXPECT_EQ(back->eos_id, 2);
  EXPECT_EQ(back->unk_id, 0);
  EXPECT_EQ(back->pad_id, -1);
  EXPECT_FALSE(back->add_space_prefix);
  EXPECT_TRUE(LooksLikeSentencePieceModel(
      {reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()}));

  // A llama2.c vocabulary (real spaces, "\n<s>\n") is respelled the SentencePiece way.
  model::TokenizerSpec l2c = testing::MakeSpec({{" ", 0}, {"a", -1}, {" a", -2}}, false);
  auto l2c_bytes = SerializeSentencePieceModel(l2c);
  ASSERT_TRUE(l2c_bytes.ok());
  auto l2c_back = ParseSentencePieceModel(
      {reinterpret_cast<const std::byte*>(l2c_bytes->data()), l2c_bytes->size()}, "y.model");
  ASSERT_TRUE(l2c_back.ok()) << l2c_back.status().ToString();
  EXPECT_EQ(l2c_back->tokens[1], "<s>");
  EXPECT_EQ(l2c_back->tokens.back(), kSp + "a");
}

TEST(SentencePieceModelTest, MalformedModelsAreClearErrors) {
  model::TokenizerSpec spec = testing::MakeSpec({{" ", 0}, {"a", -1}}, true);
  const std::string good = *SerializeSentencePieceModel(spec);
  auto parse = [](const std::string& bytes) {
    return ParseSentencePieceModel({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()},
                                   "bad.model");
  };
  for (size_t cut : {size_t{1}, size_t{7}, good.size() / 2, good.size() - 1}) {
    auto r = parse(good.substr(0, cut));
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_NE(r.status().message().find("bad.model"), std::string::npos) << r.status().ToString();
  }
  EXPECT_FALSE(parse("").ok());
  EXPECT_FALSE(parse(std::string("\x0B\x00", 2)).ok());  // wire type 3 (a group)
  // A Unigram model: trainer_spec { model_type: UNIGRAM }.
  auto unigram = parse(good + std::string("\x12\x02\x18\x01", 4));
  ASSERT_FALSE(unigram.ok());
  EXPECT_EQ(unigram.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(unigram.status().message().find("Unigram"), std::string::npos);
  // normalizer_spec { precompiled_charsmap: "x" }: normalization rules are not supported.
  auto charsmap = parse(good + std::string("\x1A\x03\x12\x01x", 5));
  ASSERT_FALSE(charsmap.ok());
  EXPECT_EQ(charsmap.status().code(), StatusCode::kUnimplemented);
  // A piece with type 9.
  auto type = parse(std::string("\x0A\x05\x0A\x01"
                                "a\x18\x09",
                                7) +
                    good);
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("type 9"), std::string::npos) << type.status().ToString();
}

TEST(TokenizerFilesTest, ConfigCarriesTheChatTemplateAndTokens) {
  model::TokenizerSpec spec = testing::MakeSpec({{" ", 0}, {"a", -1}}, true);
  spec.chat_template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}";
  auto json = TokenizerJsonText(spec);
  auto config = TokenizerConfigText(spec);
  ASSERT_TRUE(json.ok() && config.ok());
  auto t = ParseTokenizerJson(*json, "tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(ApplyTokenizerConfig(*config, "tokenizer_config.json", &*t).ok());
  EXPECT_EQ(t->spec.chat_template, spec.chat_template);
  EXPECT_EQ(t->options.chat_bos_token, "<s>");
  EXPECT_EQ(t->options.chat_eos_token, "</s>");
  EXPECT_EQ(t->spec.bos_id, 1);
  EXPECT_EQ(t->spec.eos_id, 2);
  auto tok = TokenizerFromJson(std::move(*t), "tokenizer.json");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->chat_template().source, spec.chat_template);
}

TEST(TokenizerFilesTest, ByteLevelTokenizerJsonReadsBackWithTheSameIds) {
  model::TokenizerSpec spec = testing::MakeBpeSpec(
      {{"h", "i"}, {" ", "t"}, {" t", "h"}, {" th", "e"}}, {}, {{"<|eot|>", true}}, "llama-bpe");
  auto json = TokenizerJsonText(spec);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  auto parsed = ParseTokenizerJson(*json, "tokenizer.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->spec.pre, "llama-bpe");
  auto from_json = TokenizerFromJson(std::move(*parsed), "tokenizer.json");
  auto from_spec = TokenizerFromSpec(spec, "spec");
  ASSERT_TRUE(from_json.ok() && from_spec.ok()) << from_json.status().ToString();
  for (const char* text : {"hi the there", "  hi\n<|eot|>x", "\xE4\xB8\xAD the"}) {
    for (bool special : {false, true}) {
      auto a = (*from_json)->Encode(text, {.parse_special = special});
      auto b = (*from_spec)->Encode(text, {.parse_special = special});
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(*a, *b) << text;
    }
  }
}

}  // namespace
}  // namespace loom::text
