// RopeTable against values computed here from the published formulas: Llama 3.1's frequency
// scaling (meta-llama's apply_scaling), linear scaling, and per-pair frequency divisors as
// llama.cpp stores them in GGUF (rope_freqs.weight).
#include "loom/model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

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

}  // namespace
}  // namespace loom::model
