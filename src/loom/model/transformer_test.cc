// The forward pass against the llama2.c reference (../shared/golden) on the real stories260K model,
// from both of its files, plus batching invariants: prompt processing in one batch, token by token,
// and several sequences in one batch all give the same logits.
#include "loom/model/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/base/testing.h"
#include "loom/model/model_test_util.h"

namespace loom::model {
namespace {

using testing::Loaded;

Loaded Load(const std::string& path, base::ThreadPool& pool, TransformerOptions options = {}) {
  auto file = OpenModel(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return {};
  return testing::Load(std::move(*file), pool, options);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Relative difference with a floor so that logits near zero are compared absolutely.
double RelDiff(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

// Runs `tokens` one position at a time in slot 0 and returns the logits of every position.
std::vector<std::vector<float>> RunSequential(Transformer& t, const std::vector<int32_t>& tokens) {
  const int64_t vocab = t.hparams().vocab_size;
  std::vector<std::vector<float>> out;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const int32_t tok = tokens[p], pos = static_cast<int32_t>(p), slot = 0, row = 0;
    std::vector<float> logits(static_cast<size_t>(vocab));
    Status s = t.Forward({{&tok, 1}, {&pos, 1}, {&slot, 1}, {&row, 1}}, logits.data());
    EXPECT_TRUE(s.ok()) << s.ToString();
    out.push_back(std::move(logits));
  }
  return out;
}

class GoldenLogitsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenLogitsTest, MatchesLlama2cReferenceWithin1e4Relative) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  base::ThreadPool pool(2);
  Loaded m = Load(shared + "/models/stories260K/" + GetParam(), pool);
  ASSERT_NE(m.model, nullptr);

  // All 512 logits at position 0 (input BOS).
  const nlohmann::json pos0 = ReadJson(shared + "/golden/stories260K_logits_pos0.json");
  const auto& want0 = pos0["logits_pos0"];
  auto got0 = RunSequential(*m.model, {1});
  ASSERT_EQ(want0.size(), got0[0].size());
  double worst = 0;
  for (size_t i = 0; i < want0.size(); ++i) {
    worst = std::max(worst, RelDiff(got0[0][i], want0[i].get<double>()));
  }
  EXPECT_LT(worst, 1e-4);

  // Top-5 logits at positions 0..2 of every golden prompt.
  const nlohmann::json golden = ReadJson(shared + "/golden/stories260K_greedy.json");
  for (const auto& entry : golden["entries"]) {
    std::vector<int32_t> tokens;
    for (const auto& first : entry["first_logits_top5"]) tokens.push_back(first["input_token"]);
    auto logits = RunSequential(*m.model, tokens);
    for (size_t p = 0; p < tokens.size(); ++p) {
      for (const auto& pair : entry["first_logits_top5"][p]["top5"]) {
        const int id = pair[0];
        const double want = pair[1];
        EXPECT_LT(RelDiff(logits[p][static_cast<size_t>(id)], want), 1e-4)
            << "prompt '" << entry["prompt"] << "' pos " << p << " token " << id;
      }
      // The reference's top token is our argmax too.
      const int top = entry["first_logits_top5"][p]["top5"][0][0];
      EXPECT_EQ(std::max_element(logits[p].begin(), logits[p].end()) - logits[p].begin(), top);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothFiles, GoldenLogitsTest,
                         ::testing::Values("stories260K.bin", "stories260K.gguf"));

TEST(TransformerTest, BatchedPromptEqualsTokenByToken) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  base::ThreadPool pool(2);
  TransformerOptions options;
  options.max_batch = 16;
  Loaded m = Load(shared + "/models/stories260K/stories260K.gguf", pool, options);
  ASSERT_NE(m.model, nullptr);
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298};
  auto sequential = RunSequential(*m.model, tokens);

  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> pos(tokens.size()), slots(tokens.size(), 0), rows(tokens.size());
  for (int64_t i = 0; i < n; ++i) pos[i] = rows[i] = static_cast<int32_t>(i);
  const int64_t vocab = m.model->hparams().vocab_size;
  std::vector<float> logits(static_cast<size_t>(n * vocab));
  ASSERT_TRUE(m.model->Forward({tokens, pos, slots, rows}, logits.data()).ok());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t v = 0; v < vocab; ++v) {
      ASSERT_LT(RelDiff(logits[i * vocab + v], sequential[i][v]), 1e-5) << i << " " << v;
    }
  }
}

TEST(TransformerTest, SequencesInOneBatchDoNotInterfere) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  base::ThreadPool pool(2);
  TransformerOptions options;
  options.n_slots = 3;
  Loaded m = Load(shared + "/models/stories260K/stories260K.gguf", pool, options);
  ASSERT_NE(m.model, nullptr);
  const std::vector<int32_t> a = {1, 403, 407, 261};
  const std::vector<int32_t> b = {1, 317, 269};
  auto want_a = RunSequential(*m.model, a);
  auto want_b = RunSequential(*m.model, b);

  // Interleave: slot 2 holds a, slot 1 holds b; one batch carries a's prompt and b's prompt.
  std::vector<int32_t> tokens, pos, slots;
  for (size_t i = 0; i < a.size(); ++i)
    tokens.push_back(a[i]), pos.push_back(i), slots.push_back(2);
  for (size_t i = 0; i < b.size(); ++i)
    tokens.push_back(b[i]), pos.push_back(i), slots.push_back(1);
  const std::vector<int32_t> rows = {3, 6};  // last of a, last of b
  const int64_t vocab = m.model->hparams().vocab_size;
  std::vector<float> logits(2 * vocab);
  ASSERT_TRUE(m.model->Forward({tokens, pos, slots, rows}, logits.data()).ok());
  for (int64_t v = 0; v < vocab; ++v) {
    ASSERT_LT(RelDiff(logits[v], want_a[3][v]), 1e-5);
    ASSERT_LT(RelDiff(logits[vocab + v], want_b[2][v]), 1e-5);
  }
}

TEST(TransformerTest, RejectsOutOfRangeInputs) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  base::ThreadPool pool(1);
  TransformerOptions options;
  options.context = 8;
  Loaded m = Load(shared + "/models/stories260K/stories260K.gguf", pool, options);
  ASSERT_NE(m.model, nullptr);
  std::vector<float> logits(512);
  const int32_t zero = 0, row = 0;
  const int32_t bad_token = 512, bad_pos = 8, bad_slot = 1, ok_token = 1;
  EXPECT_EQ(
      m.model->Forward({{&bad_token, 1}, {&zero, 1}, {&zero, 1}, {&row, 1}}, logits.data()).code(),
      StatusCode::kOutOfRange);
  EXPECT_EQ(m.model->Forward({{&ok_token, 1}, {&bad_pos, 1}, {&zero, 1}, {&row, 1}}, logits.data())
                .code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(m.model->Forward({{&ok_token, 1}, {&zero, 1}, {&bad_slot, 1}, {&row, 1}}, logits.data())
                .code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace loom::model
