// RopeTable against values computed here from the published formulas: Llama 3.1's frequency
// scaling (meta-llama's apply_scaling), linear scaling, YaRN (ggml's ramp and magnitude), and
// per-pair frequency divisors as llama.cpp stores them in GGUF (rope_freqs.weight).
#include "loom/model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <vector>

#include "loom/model/model_test_util.h"

namespace loom::model {
namespace {

constexpr int64_t kHeadDim = 128;
constexpr double kTheta = 500000.0;

RopeScaling Llama31() {
  RopeScaling s;
  s.type = RopeScalingType::kLlama3;
  s.factor = 8.0f;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_context = 8192;
  return s;
}

// Llama 3.1's reference apply_scaling, written out for one frequency.
double Llama31Freq(double freq) {
  const double scale = 8, low = 1, high = 4, old_ctx = 8192;
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  const double wavelen = 2 * std::numbers::pi / freq;
  if (wavelen < high_wavelen) return freq;
  if (wavelen > low_wavelen) return freq / scale;
  const double smooth = (old_ctx / wavelen - low) / (high - low);
  return (1 - smooth) * freq / scale + smooth * freq;
}

double BaseFreq(int64_t i) { return std::pow(kTheta, -2.0 * i / kHeadDim); }

// `rel` bounds the relative error of the table's frequencies (angles grow with the position).
void ExpectTable(const RopeTable& t, const std::function<double(int64_t)>& freq, double rel = 0.0) {
  std::vector<float> cs(kHeadDim);
  for (int64_t pos : {0, 1, 7, 1000, 65000}) {
    t.CosSin(pos, cs.data());
    for (int64_t i = 0; i < kHeadDim / 2; ++i) {
      const double angle = static_cast<double>(pos) * freq(i);
      const double tol = 2e-6 + rel * angle;
      ASSERT_NEAR(cs[2 * i], std::cos(angle), tol) << "pos " << pos << " pair " << i;
      ASSERT_NEAR(cs[2 * i + 1], std::sin(angle), tol) << "pos " << pos << " pair " << i;
    }
  }
}

TEST(RopeTest, Llama3ScalingMatchesThePublishedFormula) {
  const RopeTable t(kHeadDim, static_cast<float>(kTheta), Llama31());
  ExpectTable(t, [](int64_t i) { return Llama31Freq(BaseFreq(i)); });
  // All three bands occur at this size: kept, divided by the factor, interpolated.
  int kept = 0, divided = 0, smoothed = 0;
  for (int64_t i = 0; i < kHeadDim / 2; ++i) {
    const double r = Llama31Freq(BaseFreq(i)) / BaseFreq(i);
    kept += r == 1.0;
    divided += r == 1.0 / 8;
    smoothed += r != 1.0 && r != 1.0 / 8;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeTest, LinearScalingDividesEveryFrequency) {
  RopeScaling s;
  s.type = RopeScalingType::kLinear;
  s.factor = 4.0f;
  const RopeTable t(kHeadDim, static_cast<float>(kTheta), s);
  ExpectTable(t, [](int64_t i) { return BaseFreq(i) / 4; });
}

TEST(RopeTest, FrequencyFactorsAsLlamaCppStoresThemGiveTheLlama3Table) {
  // convert_hf_to_gguf.py: rope_factors = 1 / ((1 - smooth) / factor + smooth) in the band.
  RopeScaling s;
  for (int64_t i = 0; i < kHeadDim / 2; ++i) {
    s.freq_factors.push_back(static_cast<float>(BaseFreq(i) / Llama31Freq(BaseFreq(i))));
  }
  const RopeTable t(kHeadDim, static_cast<float>(kTheta), s);
  // The divisors are f32, as in the file: 6e-8 relative.
  ExpectTable(
      t, [](int64_t i) { return Llama31Freq(BaseFreq(i)); }, 1.2e-7);
}

TEST(RopeTest, GgufRopeFreqsOfTheWrongSizeOrValueAreRejected) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{4}, std::vector<int64_t>{3}}) {
    testing::TestModelSpec spec;  // head_dim 8: rope_freqs needs 4 values
    spec.extra_tensors = [&](GgufWriter& w) {
      (void)w.AddTensor("rope_freqs.weight", kernels::DType::kF32, shape);
    };
    const std::vector<std::byte> bytes = testing::TestGguf(spec);
    auto m = OpenModelFromBytes(bytes, "llama3.gguf");
    ASSERT_FALSE(m.ok());
    // Zeros are not valid divisors; 3 values are not head_dim / 2.
    EXPECT_NE(m.status().message().find("rope_freqs.weight"), std::string::npos)
        << m.status().ToString();
  }
}

// YaRN on 8 rotated values (4 pairs), theta 10000, factor 4 over an original context of 128: the
// ramp's ends are pair floor(8 ln(128 / (32 * 2 pi)) / (2 ln 10000)) = 0 (clamped) and
// ceil(8 ln(128 / (1 * 2 pi)) / (2 ln 10000)) = 2, so pair 0 keeps its frequency, pair 1 is half
// interpolated, pairs 2 and 3 are divided by 4; cos and sin are scaled by 1 + 0.1 ln 4.
TEST(RopeTable, YarnRampsBetweenExtrapolationAndInterpolation) {
  RopeScaling s;
  s.type = RopeScalingType::kYarn;
  s.factor = 4.0f;
  s.original_context = 128;
  const RopeTable table(8, 10000.0f, s);
  const double mscale = 1.0 + 0.1 * std::log(4.0);
  EXPECT_NEAR(table.mscale(), mscale, 1e-12);
  const double pos = 37;
  std::vector<float> cs(8);
  table.CosSin(static_cast<int64_t>(pos), cs.data());
  const double base[] = {1.0, std::pow(10000.0, -0.25), std::pow(10000.0, -0.5),
                         std::pow(10000.0, -0.75)};
  const double want[] = {base[0], base[1] * (0.5 / 4 + 0.5), base[2] / 4, base[3] / 4};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(cs[2 * i], std::cos(pos * want[i]) * mscale, 1e-6) << i;
    EXPECT_NEAR(cs[2 * i + 1], std::sin(pos * want[i]) * mscale, 1e-6) << i;
  }
  // DeepSeek's reading (mscale_all_dim 1): the rotation is not scaled, the scores are by
  // (1 + 0.1 ln 4)^2.
  s.yarn_log_mul = 1.0f;
  EXPECT_NEAR(RopeTable(8, 10000.0f, s, true).mscale(), 1.0, 1e-12);
  EXPECT_NEAR(YarnMscale(s, true).mla_scores, mscale * mscale, 1e-12);
  EXPECT_NEAR(YarnMscale(s, false).rope, 1.0, 1e-12);  // mscale / mscale_all_dim, both 1
}

}  // namespace
}  // namespace loom::model
