// `loom convert` on the real stories260K model (../shared): the Hugging Face F32 form (with the
// Hugging Face q/k permutation, run with rotate-halves RoPE) reproduces the llama2.c golden outputs
// exactly; converting back gives the original bytes; quantized forms (GGUF Q8_0 / Q4_0 / K-quants,
// MLX 4 and 8 bits) match a reference built from their own dequantized weights (the converter's
// dequantize path, then the F32 engine).
#include "loom/model/convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/base/testing.h"
#include "loom/model/hf_model.h"
#include "loom/model/hf_test_util.h"
#include "loom/model/synth.h"
#include "loom/model/transformer.h"
#include "loom/model/weight_copy.h"

namespace loom::model {
namespace {

using testing::Engine;
using testing::TempDir;

Engine Load(const std::string& path) {
  Engine e = testing::LoadEngine(path, 512);
  EXPECT_NE(e.t, nullptr) << e.error;
  return e;
}

std::vector<float> Step(Transformer& t, int32_t token, int32_t pos) {
  std::vector<float> logits(static_cast<size_t>(t.hparams().vocab_size));
  const int32_t slot = 0, row = 0;
  const Status s = t.Forward({{&token, 1}, {&pos, 1}, {&slot, 1}, {&row, 1}}, logits.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return logits;
}

// llama2.c run.c's greedy loop: `steps` positions including the prompt; sampling BOS stops.
std::vector<int32_t> Greedy(Transformer& t, const std::vector<int32_t>& prompt, int64_t steps) {
  std::vector<int32_t> generated;
  int32_t token = prompt[0];
  for (int32_t pos = 0; pos < steps; ++pos) {
    const std::vector<float> logits = Step(t, token, pos);
    if (pos + 1 < static_cast<int32_t>(prompt.size())) {
      token = prompt[static_cast<size_t>(pos) + 1];
      continue;
    }
    token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (token == 1) break;
    generated.push_back(token);
  }
  return generated;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

Status Convert(const std::string& in, const std::string& out, ConvertOptions o) {
  auto m = OpenModel(in);
  if (!m.ok()) return m.status();
  return ConvertModel(**m, out, o);
}

ConvertOptions To(ConvertFormat f, std::optional<kernels::DType> type = std::nullopt) {
  ConvertOptions o;
  o.format = f;
  o.type = type;
  return o;
}

class StoriesHfTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StoriesHfTest, F32WithPermutedQkReproducesGoldenOutputs) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string src = shared + "/models/stories260K/" + GetParam();
  TempDir dir;
  ASSERT_TRUE(Convert(src, dir.path(), To(ConvertFormat::kHf)).ok());
  Engine hf = Load(dir.path());
  ASSERT_NE(hf.t, nullptr);
  EXPECT_EQ(hf.file->format, "hf");
  EXPECT_EQ(hf.file->hparams.rope_style, kernels::RopeStyle::kHalves);

  // The q rows really are reordered: HF row s*4 + i of a head is the source's row 2i + s.
  auto orig = OpenModel(src);
  ASSERT_TRUE(orig.ok());
  const TensorInfo& a = (*orig)->tensors.at("blk.2.attn_q.weight");
  const TensorInfo& b = hf.file->tensors.at("blk.2.attn_q.weight");
  std::vector<float> ra(64), rb(64);
  ReadRowF32(a, 8 + 2 * 1 + 1, ra.data());  // head 1, pair 1, second element
  ReadRowF32(b, 8 + 4 + 1, rb.data());
  EXPECT_EQ(ra, rb);
  ReadRowF32(b, 8 + 1, rb.data());
  EXPECT_NE(ra, rb);

  const nlohmann::json pos0 = ReadJson(shared + "/golden/stories260K_logits_pos0.json");
  const std::vector<float> logits = Step(*hf.t, 1, 0);
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double want = pos0["logits_pos0"][i].get<double>();
    worst = std::max(worst, std::abs(logits[i] - want) / std::max(1.0, std::abs(want)));
  }
  EXPECT_LT(worst, 1e-4);

  const nlohmann::json golden = ReadJson(shared + "/golden/stories260K_greedy.json");
  int checked = 0;
  for (const auto& entry : golden["entries"]) {
    if (entry["steps"] != 64) continue;
    Engine fresh = Load(dir.path());  // an empty KV cache per prompt
    const auto prompt = entry["prompt_token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(Greedy(*fresh.t, prompt, 64),
              entry["generated_token_ids"].get<std::vector<int32_t>>())
        << entry["prompt"];
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

INSTANTIATE_TEST_SUITE_P(BothSources, StoriesHfTest,
                         ::testing::Values("stories260K.bin", "stories260K.gguf"));

TEST(ConvertTest, HfBackToGgufGivesTheOriginalTensorsBitForBit) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string src = shared + "/models/stories260K/stories260K.gguf";
  TempDir dir;
  ASSERT_TRUE(Convert(src, dir / "hf", To(ConvertFormat::kHf)).ok());
  ASSERT_TRUE(Convert(dir / "hf", dir / "back.gguf", To(ConvertFormat::kGguf)).ok());
  auto a = OpenModel(src);
  auto b = OpenModel(dir / "back.gguf");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*b)->hparams.rope_style, kernels::RopeStyle::kInterleaved);
  ASSERT_EQ((*a)->tensors.size(), (*b)->tensors.size());
  for (const auto& [name, t] : (*a)->tensors) {
    const TensorInfo& u = (*b)->tensors.at(name);
    ASSERT_EQ(t.shape, u.shape) << name;
    ASSERT_EQ(t.size_bytes, u.size_bytes) << name;
    EXPECT_EQ(std::memcmp(t.data, u.data, static_cast<size_t>(t.size_bytes)), 0) << name;
  }
}

// Logits of a fixed token sequence (positions 0..n-1, one at a time).
std::vector<std::vector<float>> RunTokens(Transformer& t, const std::vector<int32_t>& tokens) {
  std::vector<std::vector<float>> out;
  for (size_t p = 0; p < tokens.size(); ++p) {
    out.push_back(Step(t, tokens[p], static_cast<int32_t>(p)));
  }
  return out;
}

const std::vector<int32_t> kStoryTokens = {1,   403, 407, 261, 378, 432, 383, 286,
                                           261, 376, 298, 315, 421, 395, 317, 269};

struct Agreement {
  double worst_rel = 0;  // max |a - b| / max |b| over each position's logits
  int top1_same = 0;
  // Positions whose top-1 differs although the reference's top-1 leads its runner-up by more
  // than twice that position's largest logit difference (a flip that is not a near-tie).
  int top1_clear_flips = 0;
  int positions = 0;
};

Agreement Compare(const std::vector<std::vector<float>>& got,
                  const std::vector<std::vector<float>>& want) {
  Agreement a;
  for (size_t p = 0; p < want.size(); ++p) {
    double scale = 0, diff = 0;
    for (size_t i = 0; i < want[p].size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(want[p][i])));
      diff = std::max(diff, static_cast<double>(std::abs(got[p][i] - want[p][i])));
    }
    a.worst_rel = std::max(a.worst_rel, diff / scale);
    const auto top = [](const std::vector<float>& v) {
      return std::max_element(v.begin(), v.end()) - v.begin();
    };
    const bool same = top(got[p]) == top(want[p]);
    a.top1_same += same;
    if (!same) {
      std::vector<float> sorted = want[p];
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      a.top1_clear_flips += sorted[0] - sorted[1] > 2 * diff;
    }
    ++a.positions;
  }
  return a;
}

// Runs a quantized model and its dequantized F32 twin (converted back by the converter) on the
// same tokens.  The weights are identical; what differs is the kernels' arithmetic on quantized
// weights (quantized dot products, 8-bit activations for GGUF block types).
Agreement QuantizedVsDequantized(const std::string& quantized, const std::string& f32_out,
                                 ConvertFormat f32_format) {
  EXPECT_TRUE(Convert(quantized, f32_out, To(f32_format, kernels::DType::kF32)).ok());
  Engine q = Load(quantized);
  Engine f = Load(f32_out);
  if (q.t == nullptr || f.t == nullptr) return {};
  return Compare(RunTokens(*q.t, kStoryTokens), RunTokens(*f.t, kStoryTokens));
}

struct QuantCase {
  const char* name;
  const char* type;  // GGUF weight type, or "" for MLX
  int bits;
  int64_t group;
  double tolerance;  // worst |diff| / max |logit| per position
};

class StoriesQuantizedTest : public ::testing::TestWithParam<QuantCase> {};

TEST_P(StoriesQuantizedTest, MatchesItsDequantizedReference) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const QuantCase& c = GetParam();
  TempDir dir;
  ConvertOptions o;
  std::string out;
  if (*c.type != '\0') {
    auto type = ParseWeightType(c.type);
    if (!type.ok()) GTEST_SKIP() << "the kernels have no " << c.type << " type yet";
    o = To(ConvertFormat::kGguf, *type);
    out = dir / "q.gguf";
  } else {
    if (!MlxDType(c.bits).ok()) GTEST_SKIP() << "the kernels have no MLX types yet";
    o = To(ConvertFormat::kMlx, kernels::DType::kBF16);
    o.mlx = {c.bits, c.group};
    out = dir / "mlx";
  }
  const Status s = Convert(shared + "/models/stories260K/stories260K.gguf", out, o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto m = OpenModel(out);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // Every matrix whose rows divide into blocks/groups is quantized (ffn_down's 172 columns do not).
  const TensorInfo& q = (*m)->tensors.at("blk.0.attn_q.weight");
  EXPECT_NE(q.type, kernels::DType::kF32);
  const Agreement a =
      QuantizedVsDequantized(out, dir / "f32", *c.type ? ConvertFormat::kGguf : ConvertFormat::kHf);
  std::printf("%s: worst |diff| / max|logit| %.2e, top-1 agrees at %d of %d positions\n", c.name,
              a.worst_rel, a.top1_same, a.positions);
  EXPECT_LT(a.worst_rel, c.tolerance);
  EXPECT_GE(a.top1_same, a.positions - 1);
  // Copied out of the mapping (values and, for MLX, scales and biases), the weights give the same
  // logits bit for bit.
  Engine mapped = Load(out), copied = Load(out);
  ASSERT_TRUE(mapped.t && copied.t);
  ASSERT_TRUE(CopyMatricesToMemory(copied.weights.get()).ok());
  EXPECT_EQ(RunTokens(*copied.t, kStoryTokens), RunTokens(*mapped.t, kStoryTokens));
}

// Tolerances: the GGUF block types multiply 8-bit quantized activations (absmax / 127 per 32
// values, as llama.cpp does), a relative error of up to 0.4% per activation that the 5 layers
// compound; measured worst cases are printed and stay well under these bounds.
INSTANTIATE_TEST_SUITE_P(Types, StoriesQuantizedTest,
                         ::testing::Values(QuantCase{"gguf_q8_0", "q8_0", 0, 0, 3e-2},
                                           QuantCase{"gguf_q4_0", "q4_0", 0, 0, 3e-2},
                                           // 64-value rows: K-quants fall back to q8_0 here;
                                           // KQuantTest below quantizes 256-value rows.
                                           QuantCase{"gguf_q4_k", "q4_k", 0, 0, 3e-2},
                                           QuantCase{"mlx_4bit_g32", "", 4, 32, 3e-2},
                                           QuantCase{"mlx_8bit_g64", "", 8, 64, 3e-2}),
                         [](const ::testing::TestParamInfo<QuantCase>& info) {
                           return info.param.name;
                         });

TEST(ConvertTest, MlxQuantizationErrorIsWithinOneStepOfEachGroup) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  if (!MlxDType(4).ok()) GTEST_SKIP() << "the kernels have no MLX types yet";
  const std::string src = shared + "/models/stories260K/stories260K.gguf";
  TempDir dir;
  ConvertOptions o = To(ConvertFormat::kMlx, kernels::DType::kF32);
  o.mlx = {4, 32};
  ASSERT_TRUE(Convert(src, dir.path(), o).ok());
  auto a = OpenModel(src);
  auto b = OpenModel(dir.path());
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  const TensorInfo& t = (*b)->tensors.at("blk.1.ffn_up.weight");  // not permuted
  ASSERT_EQ(MlxBits(t.type), 4);
  std::vector<float> x(64), y(64);
  for (int64_t r = 0; r < 172; ++r) {
    ReadRowF32((*a)->tensors.at("blk.1.ffn_up.weight"), r, x.data());
    ReadRowF32(t, r, y.data());
    for (int64_t g = 0; g < 2; ++g) {
      const auto [lo, hi] = std::minmax_element(x.begin() + g * 32, x.begin() + g * 32 + 32);
      for (int64_t i = g * 32; i < (g + 1) * 32; ++i) {
        ASSERT_LE(std::abs(x[i] - y[i]), (*hi - *lo) / 15 + 1e-6f) << r << " " << i;
      }
    }
  }
}

// K-quants need rows of 256 values: a random model of that width (stories260K's 64 would make
// every matrix fall back to another type).
class KQuantTest : public ::testing::TestWithParam<const char*> {};

TEST_P(KQuantTest, MatchesItsDequantizedReference) {
  auto type = ParseWeightType(GetParam());
  if (!type.ok()) GTEST_SKIP() << "the kernels have no " << GetParam() << " type yet";
  TempDir dir;
  testing::TinyHfSpec spec;
  spec.dim = 256;
  spec.ffn = 512;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.vocab = 600;
  testing::WriteTinyHfModel(dir.path(), spec);
  ASSERT_TRUE(Convert(dir.path(), dir / "q.gguf", To(ConvertFormat::kGguf, *type)).ok());
  auto m = OpenModel(dir / "q.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->tensors.at("blk.1.ffn_down.weight").type, *type);
  EXPECT_EQ((*m)->tensors.at("token_embd.weight").type, *type);
  ASSERT_TRUE(Convert(dir / "q.gguf", dir / "f.gguf", To(ConvertFormat::kGguf)).ok());
  Engine q = Load(dir / "q.gguf");
  Engine f = Load(dir / "f.gguf");
  ASSERT_TRUE(q.t != nullptr && f.t != nullptr);
  const std::vector<int32_t> tokens = {1, 5, 17, 399, 0, 22, 8, 9, 530, 2};
  const Agreement a = Compare(RunTokens(*q.t, tokens), RunTokens(*f.t, tokens));
  std::printf("%s: worst |diff| / max|logit| %.2e, top-1 agrees at %d of %d positions\n",
              GetParam(), a.worst_rel, a.top1_same, a.positions);
  EXPECT_LT(a.worst_rel, 3e-2);
  // A random model has near-ties; the top-1 may flip only where the logits' difference could
  // have flipped it.
  EXPECT_EQ(a.top1_clear_flips, 0);
  EXPECT_GE(a.top1_same, a.positions - 2);
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantTest, ::testing::Values("q4_k", "q5_k", "q6_k"));

// Small Hugging Face models of the other families through GGUF and back into the engine.
std::vector<std::vector<float>> TinyLogits(const std::string& path) {
  Engine e = Load(path);
  if (e.t == nullptr) return {};
  return RunTokens(*e.t, {1, 5, 17, 39, 0, 22, 8, 9, 30, 2});
}

TEST(ConvertTest, Llama3RopeScalingBecomesRopeFreqsInGguf) {
  TempDir dir;
  testing::TinyHfSpec spec;  // head_dim 8: wavelengths 6.3, 63, 628, 6283 positions
  testing::WriteTinyHfModel(dir.path(), spec);
  std::string config = testing::TinyConfigJson(spec);
  // Original context 64: the pairs fall in all three bands (kept, interpolated, divided).
  config.insert(config.size() - 1,
                R"(, "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64})");
  testing::WriteText(dir / "config.json", config);
  ASSERT_TRUE(Convert(dir.path(), dir / "m.gguf", To(ConvertFormat::kGguf)).ok());
  auto g = OpenModel(dir / "m.gguf");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<float>& f = (*g)->hparams.rope_scaling.freq_factors;
  ASSERT_EQ(f.size(), 4u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_GT(f[1], 1.0f);
  EXPECT_LT(f[1], 4.0f);
  EXPECT_FLOAT_EQ(f[3], 4.0f);
  const Agreement a = Compare(TinyLogits(dir / "m.gguf"), TinyLogits(dir.path()));
  EXPECT_LT(a.worst_rel, 1e-5);
  EXPECT_EQ(a.top1_same, a.positions);
  // And back: config.json says llama3 again.
  ASSERT_TRUE(Convert(dir / "m.gguf", dir / "hf", To(ConvertFormat::kHf)).ok());
  EXPECT_LT(Compare(TinyLogits(dir / "hf"), TinyLogits(dir.path())).worst_rel, 1e-5);
}

TEST(ConvertTest, QwenGgufKeepsTheHalvesLayout) {
  for (const char* type : {"qwen2", "qwen3"}) {
    TempDir dir;
    testing::TinyHfSpec spec;
    spec.model_type = type;
    spec.biases = std::string(type) == "qwen2";
    spec.qk_norm = !spec.biases;
    testing::WriteTinyHfModel(dir.path(), spec);
    ASSERT_TRUE(Convert(dir.path(), dir / "m.gguf", To(ConvertFormat::kGguf)).ok());
    auto g = OpenModel(dir / "m.gguf");
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ((*g)->hparams.arch, type);
    EXPECT_EQ((*g)->hparams.rope_style, kernels::RopeStyle::kHalves);
    const Agreement a = Compare(TinyLogits(dir / "m.gguf"), TinyLogits(dir.path()));
    EXPECT_LT(a.worst_rel, 1e-6) << type;
  }
}

TEST(ConvertTest, RejectsBadRequests) {
  TempDir dir;
  testing::WriteTinyHfModel(dir.path(), testing::TinyHfSpec{});
  auto m = OpenModel(dir.path());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(ConvertModel(**m, dir.path(), To(ConvertFormat::kHf)).code(),
            StatusCode::kInvalidArgument);  // onto itself
  EXPECT_EQ(ConvertModel(**m, dir / "x", To(ConvertFormat::kHf, kernels::DType::kQ8_0)).code(),
            StatusCode::kInvalidArgument);
  ConvertOptions o = To(ConvertFormat::kMlx);
  o.mlx.bits = 7;
  EXPECT_EQ(ConvertModel(**m, dir / "y", o).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseWeightType("q9_9").ok());
  EXPECT_EQ(*ParseWeightType("Q8_0"), kernels::DType::kQ8_0);
  EXPECT_FALSE(ParseConvertFormat("onnx").ok());
}

TEST(ConvertTest, DenseYarnGoesToGgufButHasNoConfigJsonFormYet) {
  TempDir dir;
  SynthOptions o;
  o.shape = *FindSynthShape("tiny");
  o.yarn_factor = 4.0f;
  o.threads = 1;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  auto m = OpenModelFromBytes(bytes, "synth.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(ConvertModel(**m, dir / "out.gguf", To(ConvertFormat::kGguf)).ok());
  auto back = OpenModel(dir / "out.gguf");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const RopeScaling& a = (*m)->hparams.rope_scaling;
  const RopeScaling& b = (*back)->hparams.rope_scaling;
  EXPECT_EQ(b.type, RopeScalingType::kYarn);
  EXPECT_EQ(b.factor, a.factor);
  EXPECT_EQ(b.original_context, a.original_context);
  EXPECT_EQ(b.yarn_log_mul, a.yarn_log_mul);
  const Status s = ConvertModel(**m, dir / "hf", To(ConvertFormat::kHf));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
  EXPECT_NE(s.message().find("YaRN RoPE scaling of llama models has no config.json form"),
            std::string::npos)
      << s.ToString();
}

TEST(ConvertTest, PermutationIndicesAreInverse) {
  using kernels::RopeStyle;
  for (int64_t hd : {2, 8, 128}) {
    for (int64_t i = 0; i < hd; ++i) {
      const int64_t j = RopePermuteIndex(RopeStyle::kInterleaved, RopeStyle::kHalves, hd, i);
      EXPECT_EQ(RopePermuteIndex(RopeStyle::kHalves, RopeStyle::kInterleaved, hd, j), i);
    }
  }
  // GGUF pair (x[2i], x[2i+1]) is Hugging Face's (x[i], x[i + hd/2]).
  EXPECT_EQ(RopePermuteIndex(kernels::RopeStyle::kHalves, kernels::RopeStyle::kInterleaved, 8, 5),
            6);  // GGUF index 5 = pair 2, second: HF index 4 + 2
  EXPECT_EQ(RopePermuteIndex(kernels::RopeStyle::kInterleaved, kernels::RopeStyle::kHalves, 8, 6),
            5);
}

}  // namespace
}  // namespace loom::model
