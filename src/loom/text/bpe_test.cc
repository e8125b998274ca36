// Byte-level BPE on synthetic vocabularies: merge order by rank, against a rescanning reference
// on random text, ignore_merges, added and special tokens, byte-exact round trips, streaming
// decode, validation errors, and the GGUF route (TokenizerFromSpec).
#include "loom/text/bpe.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "loom/text/bpe_test_vocab.h"
#include "loom/text/detokenizer.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::text {
namespace {

using testing::AddedToken;
using testing::MakeBpeSpec;
using testing::Spell;
using Merges = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<BpeTokenizer> Make(const model::TokenizerSpec& spec, bool ignore_merges = false) {
  auto options = BpeOptionsForPre(spec.pre, "test");
  EXPECT_TRUE(options.ok());
  options->ignore_merges = ignore_merges;
  auto t = BpeTokenizer::Create(spec, *options, "test");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// The pieces (as raw text) the ids stand for.
std::vector<std::string> Pieces(const Tokenizer& t, std::string_view text,
                                EncodeOptions options = {}) {
  auto ids = t.Encode(text, options);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  std::vector<std::string> out;
  if (!ids.ok()) return out;
  for (int32_t id : *ids) out.emplace_back(t.DecodePiece(-1, id));
  return out;
}

using Strings = std::vector<std::string>;

const Merges kHelloMerges = {{"h", "e"},     {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                             {" ", "w"},     {"o", "r"}, {" w", "or"}, {" wor", "l"},
                             {" worl", "d"}, {"b", "c"}, {"a", "b"},   {"a", "a"}};

TEST(BpeTest, MergesApplyInRankOrder) {
  auto t = Make(MakeBpeSpec(kHelloMerges));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Pieces(*t, "hello world"), (Strings{"hello", " world"}));
  // "b c" (rank 9) beats "a b" (rank 10) although "a b" is further left.
  EXPECT_EQ(Pieces(*t, "abc"), (Strings{"a", "bc"}));
  // The same pair twice: leftmost first.
  EXPECT_EQ(Pieces(*t, "aaa"), (Strings{"aa", "a"}));
  EXPECT_EQ(Pieces(*t, ""), Strings{});
}

TEST(BpeTest, MatchesTheRescanningReferenceOnRandomText) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "abcde \xC3\xA9";
  // Random merges over the alphabet, each joining two existing pieces.
  std::vector<std::string> pieces = {"a", "b", "c", "d", "e", " "};
  Merges merges;
  for (int i = 0; i < 60; ++i) {
    const std::string& x = pieces[rng() % pieces.size()];
    const std::string& y = pieces[rng() % pieces.size()];
    if (x.find(' ') != std::string::npos && x != " ") continue;
    merges.emplace_back(x, y);
    pieces.push_back(x + y);
  }
  auto t = Make(MakeBpeSpec(merges, {}, {}, "gpt-2"));
  ASSERT_NE(t, nullptr);
  for (int trial = 0; trial < 300; ++trial) {
    std::string word;
    const int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) word.push_back("abcde"[rng() % 5]);
    // One pre-token (letters only), so the reference applies to the whole text.
    EXPECT_EQ(Pieces(*t, word), testing::ReferenceBpe(word, merges)) << "word '" << word << "'";
  }
}

TEST(BpeTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  const Merges merges = {{"a", "b"}};
  const model::TokenizerSpec spec = MakeBpeSpec(merges, {"abc"});
  EXPECT_EQ(Pieces(*Make(spec, false), "abc"), (Strings{"ab", "c"}));
  EXPECT_EQ(Pieces(*Make(spec, true), "abc"), (Strings{"abc"}));
}

TEST(BpeTest, ControlTokensMatchOnlyWithParseSpecialAddedTokensAlways) {
  model::TokenizerSpec spec = MakeBpeSpec(kHelloMerges, {}, {{"<|eot|>", true}, {"<tool>", false}});
  const int32_t eot = static_cast<int32_t>(spec.tokens.size()) - 2;
  const int32_t tool = eot + 1;
  auto t = Make(spec);
  ASSERT_NE(t, nullptr);
  auto with = t->Encode("hello<|eot|><tool>", {.parse_special = true});
  ASSERT_TRUE(with.ok());
  ASSERT_EQ(with->size(), 3u);
  EXPECT_EQ((*with)[1], eot);
  EXPECT_EQ((*with)[2], tool);
  auto without = t->Encode("hello<|eot|><tool>", {.parse_special = false});
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(std::count(without->begin(), without->end(), eot), 0);
  EXPECT_EQ(without->back(), tool);  // non-special added tokens always match
  EXPECT_TRUE(t->IsControl(eot));
  EXPECT_FALSE(t->IsControl(tool));
  EXPECT_EQ(t->DecodePiece(-1, eot), "");
  EXPECT_EQ(t->DecodePiece(-1, tool), "<tool>");
  EXPECT_EQ(t->PieceText(eot), "<|eot|>");
}

TEST(BpeTest, AddedTokensCanStripWhitespaceAroundThem) {
  model::TokenizerSpec spec = MakeBpeSpec({}, {}, {{"<m>", true}});
  const int32_t m = static_cast<int32_t>(spec.tokens.size()) - 1;
  auto options = BpeOptionsForPre("llama-bpe", "test");
  ASSERT_TRUE(options.ok());
  options->lstrip_ids = {m};
  options->rstrip_ids = {m};
  auto t = BpeTokenizer::Create(spec, *options, "test");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Pieces(**t, "a  <m>\n b", {.parse_special = true}), (Strings{"a", "", "b"}));
}

TEST(BpeTest, AnyBytesRoundTripExactly) {
  auto t = Make(MakeBpeSpec(kHelloMerges));
  ASSERT_NE(t, nullptr);
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text.push_back(static_cast<char>(rng() % 256));
    auto ids = t->Encode(text, {.parse_special = true});
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    std::string back;
    int32_t prev = -1;
    for (int32_t id : *ids) {
      back.append(t->DecodePiece(prev, id));
      prev = id;
    }
    EXPECT_EQ(back, text);
  }
}

TEST(BpeTest, StreamingDecodeHoldsSplitCharactersBack) {
  auto t = Make(MakeBpeSpec({}));  // no merges: every byte is a token
  ASSERT_NE(t, nullptr);
  auto ids = t->Encode("\xC3\xA9!", false);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);
  StreamingDetokenizer detok(*t);
  EXPECT_EQ(detok.Push((*ids)[0]), "");
  EXPECT_EQ(detok.Push((*ids)[1]), "\xC3\xA9");
  EXPECT_EQ(detok.Push((*ids)[2]), "!");
}

TEST(BpeTest, BosEosAndEndOfTurnTokens) {
  model::TokenizerSpec spec =
      MakeBpeSpec(kHelloMerges, {}, {{"<|begin_of_text|>", true}, {"<|eot_id|>", true}});
  spec.bos_id = static_cast<int32_t>(spec.tokens.size()) - 2;
  spec.eos_id = 0;
  spec.add_bos = true;
  auto t = Make(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->add_bos_default());
  auto ids = t->Encode("hello", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), spec.bos_id);
  EXPECT_TRUE(t->IsEog(0));
  EXPECT_TRUE(t->IsEog(spec.bos_id + 1));  // <|eot_id|> by name
  EXPECT_FALSE(t->IsEog(spec.bos_id));
  EXPECT_EQ(t->chat_template().bos_token, "<|begin_of_text|>");
}

TEST(BpeTest, InvalidVocabulariesAreErrorsNamingTheSource) {
  auto expect_error = [](model::TokenizerSpec spec, std::string_view needle) {
    auto t = BpeTokenizer::Create(spec, BpeOptions{}, "m.gguf");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("m.gguf"), std::string::npos) << t.status().ToString();
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().ToString();
  };
  model::TokenizerSpec unknown_part = MakeBpeSpec(kHelloMerges);
  unknown_part.merges.push_back("zz " + Spell("q"));
  expect_error(unknown_part, "not in the vocabulary ('zz')");
  model::TokenizerSpec missing_result = MakeBpeSpec({});
  missing_result.merges.push_back("a b");
  expect_error(missing_result, "makes 'ab'");
  model::TokenizerSpec no_space = MakeBpeSpec({});
  no_space.merges.push_back("ab");
  expect_error(no_space, "two tokens separated by one space");
  model::TokenizerSpec bad_bos = MakeBpeSpec({});
  bad_bos.bos_id = 100000;
  expect_error(bad_bos, "bos id 100000");
  model::TokenizerSpec bad_type = MakeBpeSpec({});
  bad_type.token_types[5] = 9;
  expect_error(bad_type, "unknown type 9");
  model::TokenizerSpec short_types = MakeBpeSpec({});
  short_types.token_types.pop_back();
  expect_error(short_types, "token types for");
  model::TokenizerSpec empty;
  empty.model = "gpt2";
  expect_error(empty, "empty");
}

TEST(BpeTest, GgufSpecsBuildThroughTheLoaderByPreName) {
  model::TokenizerSpec spec = MakeBpeSpec(kHelloMerges, {}, {}, "qwen2");
  auto t = TokenizerFromSpec(spec, "q.gguf");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->kind(), "bpe");
  EXPECT_EQ(Pieces(**t, "hello 42"), (Strings{"hello", " ", "4", "2"}));  // qwen2: single digits
  spec.pre = "starcoder";
  auto unknown = TokenizerFromSpec(spec, "q.gguf");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(unknown.status().message().find("starcoder"), std::string::npos);
}

TEST(SentencePieceParseSpecialTest, ControlPiecesMatchOnlyWhenAsked) {
  // The SentencePiece tokenizer honours parse_special too (Llama 2 / Mistral chat templates).
  model::TokenizerSpec spec;
  spec.model = "llama";
  spec.tokens = {"<unk>", "<s>", "</s>",          "\xE2\x96\x81",
                 "h",     "i",   "\xE2\x96\x81h", "\xE2\x96\x81hi"};
  spec.scores = {0, 0, 0, -1, -1, -1, -2, -3};
  spec.token_types = {2, 3, 3, 1, 1, 1, 1, 1};
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  auto t = TokenizerFromSpec(spec, "spm");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto with = (*t)->Encode("<s>hi</s>hi", {.parse_special = true});
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, (std::vector<int32_t>{1, 7, 2, 7}));  // the prefix follows each special
  auto without = (*t)->Encode("<s>hi", {.parse_special = false});
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(std::count(without->begin(), without->end(), 1), 0);
}

}  // namespace
}  // namespace loom::text
