// Whole generations against the llama2.c reference outputs (../shared/golden): greedy 64-step
// runs of stories260K reproduce the reference token ids and text exactly, from the llama2.c
// checkpoint and from the GGUF file.
#include "loom/engine/generator.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/base/testing.h"
#include "loom/base/thread_pool.h"
#include "loom/model/transformer.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::engine {
namespace {

struct Case {
  const char* model;
  const char* tokenizer;  // "" = the model's own
};

class GoldenGenerationTest : public ::testing::TestWithParam<Case> {};

TEST_P(GoldenGenerationTest, Greedy64StepRunsMatchReferenceExactly) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string dir = shared + "/models/stories260K/";
  auto file = model::OpenModel(dir + GetParam().model);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const std::string tok_path = *GetParam().tokenizer ? dir + GetParam().tokenizer : "";
  auto tokenizer = text::LoadTokenizerForModel(**file, tok_path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  auto weights = model::BindWeights(**file);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  base::ThreadPool pool(2);
  model::TransformerOptions options;
  options.max_batch = 4;  // prompts of 5 tokens run in two chunks
  auto transformer = model::Transformer::Create(*weights, options, pool);
  ASSERT_TRUE(transformer.ok()) << transformer.status().ToString();
  Generator generator(**transformer, **tokenizer);

  std::ifstream in(shared + "/golden/stories260K_greedy.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& entry : golden["entries"]) {
    if (entry["steps"] != 64) continue;  // longer runs pass near-ties (see golden/README.md)
    const std::string prompt = entry["prompt"];
    auto ids = (*tokenizer)->Encode(prompt, /*add_bos=*/true);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, entry["prompt_token_ids"].get<std::vector<int32_t>>()) << prompt;

    GenerateOptions gen;
    gen.sampling.temperature = 0;
    // run.c's step count includes the prompt positions; its last prompt position already yields
    // the first generated token.
    gen.max_new_tokens = entry["steps"].get<int64_t>() - (static_cast<int64_t>(ids->size()) - 1);
    gen.detokenizer.llama2c_safe_printf = true;
    std::string streamed;
    auto result = generator.Generate(*ids, gen, [&](int32_t, std::string_view text) {
      streamed.append(text);
      return true;
    });
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(result->generated, entry["generated_token_ids"].get<std::vector<int32_t>>())
        << prompt;
    EXPECT_EQ(result->text, streamed);
    const std::string prompt_text =
        text::DetokenizeAll(**tokenizer, *ids, gen.detokenizer);
    EXPECT_EQ(prompt_text + result->text, entry["text"].get<std::string>()) << prompt;
    EXPECT_EQ(result->finish, FinishReason::kLength);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

INSTANTIATE_TEST_SUITE_P(BothFiles, GoldenGenerationTest,
                         ::testing::Values(Case{"stories260K.bin", "tok512.bin"},
                                           Case{"stories260K.gguf", ""}));

TEST(GeneratorTest, RejectsPromptsThatDoNotFitTheContext) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  auto file = model::OpenModel(shared + "/models/stories260K/stories260K.gguf");
  ASSERT_TRUE(file.ok());
  auto tokenizer = text::LoadTokenizerForModel(**file, "");
  ASSERT_TRUE(tokenizer.ok());
  auto weights = model::BindWeights(**file);
  ASSERT_TRUE(weights.ok());
  base::ThreadPool pool(1);
  model::TransformerOptions options;
  options.context = 4;
  auto transformer = model::Transformer::Create(*weights, options, pool);
  ASSERT_TRUE(transformer.ok());
  Generator generator(**transformer, **tokenizer);
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  EXPECT_EQ(generator.Generate(prompt, {}).status().code(), StatusCode::kOutOfRange);
  // A prompt that fits stops when the context is full.
  GenerateOptions gen;
  gen.max_new_tokens = 100;
  gen.sampling.temperature = 0;
  gen.stop_at_eog = false;
  auto result = generator.Generate(std::span(prompt).first(2), gen);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->finish, FinishReason::kContextFull);
  EXPECT_EQ(result->generated.size(), 3u);  // positions 2, 3 run; the token after 3 is sampled
}

}  // namespace
}  // namespace loom::engine
