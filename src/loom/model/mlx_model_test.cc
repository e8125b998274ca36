// MLX affine quantization: the bit packing (LSB-first along a row, values straddling bytes for 3,
// 5 and 6 bits), the quantizer's error bound, config.json "quantization" with per-module
// overrides, and quantized modules in model directories.
#include "loom/model/mlx_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "loom/model/hf_test_util.h"

namespace loom::model {
namespace {

using testing::TempDir;
using testing::TestTensor;

// Values 0..(2^bits - 1) cycling, packed by hand into a bit stream, LSB first.
std::vector<std::byte> HandPacked(int bits, int64_t n, std::vector<uint32_t>* values) {
  std::vector<std::byte> out(static_cast<size_t>(n * bits / 8));
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t v = static_cast<uint32_t>((k * 5 + 3) % (1 << bits));
    values->push_back(v);
    for (int b = 0; b < bits; ++b) {
      if (v >> b & 1u) {
        const int64_t bit = k * bits + b;
        out[bit / 8] |= static_cast<std::byte>(1u << (bit % 8));
      }
    }
  }
  return out;
}

TEST(MlxPackingTest, DequantizeReadsLsbFirstBitStreams) {
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    const MlxQuantParams p{bits, 32};
    std::vector<uint32_t> values;
    const std::vector<std::byte> packed = HandPacked(bits, 64, &values);
    const float scales[2] = {0.5f, -2.0f}, biases[2] = {1.0f, 3.0f};
    std::vector<float> out(64);
    MlxDequantizeRow(packed.data(), reinterpret_cast<const std::byte*>(scales),
                     reinterpret_cast<const std::byte*>(biases), kernels::DType::kF32, p, 64,
                     out.data());
    for (int64_t k = 0; k < 64; ++k) {
      const int g = static_cast<int>(k / 32);
      ASSERT_EQ(out[k], scales[g] * static_cast<float>(values[k]) + biases[g]) << bits << " " << k;
    }
  }
  // 4 bits, values -15..0: the minimum is the edge of larger magnitude, so scale 1, bias -15,
  // q = x + 15, and the first word of q = 0..7 is 0x76543210 read as a little-endian u32.
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 16 - 15);
  std::byte packed[16], s[4], b[4];
  MlxQuantizeRow(x, 32, {4, 32}, kernels::DType::kF32, packed, s, b);
  uint32_t word;
  std::memcpy(&word, packed, 4);
  EXPECT_EQ(word, 0x76543210u);
  EXPECT_EQ(LoadFloat(kernels::DType::kF32, s), 1.0f);
  EXPECT_EQ(LoadFloat(kernels::DType::kF32, b), -15.0f);
  // With the maximum as that edge, the scale is negative: q = 15 - x for x = 0..15.
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 16);
  MlxQuantizeRow(x, 32, {4, 32}, kernels::DType::kF32, packed, s, b);
  std::memcpy(&word, packed, 4);
  EXPECT_EQ(word, 0x89ABCDEFu);
  EXPECT_EQ(LoadFloat(kernels::DType::kF32, s), -1.0f);
  EXPECT_EQ(LoadFloat(kernels::DType::kF32, b), 15.0f);
}

// MLX makes the edge of larger magnitude (and so zero) exact by rounding the scale; values at the
// other edge may then be clipped, by at most one step of (max - min) / (2^bits - 1).
TEST(MlxPackingTest, QuantizeErrorIsWithinOneStepAndZeroIsExact) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int64_t g : {32, 64, 128}) {
      for (kernels::DType st :
           {kernels::DType::kF32, kernels::DType::kBF16, kernels::DType::kF16}) {
        const MlxQuantParams p{bits, g};
        const int64_t n = 256;
        std::vector<float> x(n), y(n);
        for (float& v : x) v = normal(rng) * 0.1f;
        x[5] = 0.0f;
        const int64_t sb = kernels::Traits(st).block_bytes;
        std::vector<std::byte> packed(static_cast<size_t>(MlxPackedRowBytes(bits, n)));
        std::vector<std::byte> scales(static_cast<size_t>(n / g * sb)), biases(scales.size());
        MlxQuantizeRow(x.data(), n, p, st, packed.data(), scales.data(), biases.data());
        MlxDequantizeRow(packed.data(), scales.data(), biases.data(), st, p, n, y.data());
        for (int64_t i = 0; i < n; ++i) {
          const auto [lo, hi] =
              std::minmax_element(x.begin() + i / g * g, x.begin() + i / g * g + g);
          const float step = (*hi - *lo) / static_cast<float>((1 << bits) - 1);
          // Plus the rounding of scale and bias to the scale type.
          const float slack = st == kernels::DType::kF32 ? 1e-6f : 0.02f * std::abs(x[i]) + 2e-3f;
          ASSERT_LE(std::abs(x[i] - y[i]), step + slack)
              << bits << " bits, group " << g << ", " << kernels::Traits(st).name << ", " << i;
        }
        if (st == kernels::DType::kF32) {
          EXPECT_NEAR(y[5], 0.0f, 1e-6f) << bits;
        }
      }
    }
  }
}

TEST(MlxConfigTest, OverridesAndDefaults) {
  const auto q = nlohmann::json::parse(R"({"group_size": 64, "bits": 4, "mode": "affine",
      "model.embed_tokens": {"group_size": 32, "bits": 8},
      "model.layers.0.mlp.down_proj": false,
      "lm_head": {"bits": 6}})");
  auto c = ParseMlxQuantization(q, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->For("model.layers.3.self_attn.q_proj")->bits, 4);
  EXPECT_EQ(c->For("model.embed_tokens")->bits, 8);
  EXPECT_EQ(c->For("model.embed_tokens")->group_size, 32);
  EXPECT_EQ(c->For("lm_head")->group_size, 64);  // unspecified: the default
  EXPECT_FALSE(c->For("model.layers.0.mlp.down_proj").has_value());

  for (const char* bad : {R"({"group_size": 64})", R"({"group_size": 48, "bits": 4})",
                          R"({"group_size": 64, "bits": 4, "mode": "mxfp4"})",
                          R"({"group_size": 64, "bits": 4, "x": {"bits": 1}})", "[1]"}) {
    auto r = ParseMlxQuantization(nlohmann::json::parse(bad), "config.json");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("config.json"), std::string::npos);
  }
}

// A tiny MLX directory: q_proj quantized (4 bits, group 32) by hand, everything else float.
class MlxDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TinyHfSpec spec;
    weights_ = testing::WriteTinyHfModel(dir_.path(), spec);
    config_ = testing::TinyConfigJson(spec);
    config_.insert(config_.size() - 1,
                   R"(, "quantization": {"group_size": 32, "bits": 4,
                       "model.layers.1.self_attn.q_proj": {"group_size": 32, "bits": 8}})");
    testing::WriteText(dir_ / "config.json", config_);
  }

  // Rewrites model.safetensors with the q_proj of every layer quantized; `edit` may break it.
  void Quantize(const std::function<void(std::map<std::string, TestTensor>&)>& edit = {}) {
    std::map<std::string, TestTensor> t;
    for (const auto& [name, values] : weights_) {
      TestTensor tt;
      tt.values = values;
      tt.shape = {static_cast<int64_t>(values.size())};
      if (name.find("proj") != std::string::npos || name.find("embed") != std::string::npos ||
          name.find("lm_head") != std::string::npos) {
        const int64_t cols = name.find("down_proj") != std::string::npos ? 48 : 32;
        tt.shape = {static_cast<int64_t>(values.size()) / cols, cols};
      }
      if (name.find("q_proj.weight") != std::string::npos) {
        const int bits = name.find("layers.1.") != std::string::npos ? 8 : 4;
        const int64_t rows = 32, cols = 32;
        TestTensor w{StDType::kU32, {rows, cols * bits / 32}, {}, {}};
        TestTensor s{StDType::kF32, {rows, 1}, {}, {}}, b = s;
        w.words.resize(static_cast<size_t>(rows * cols * bits / 32));
        s.values.resize(rows);
        b.values.resize(rows);
        for (int64_t r = 0; r < rows; ++r) {
          MlxQuantizeRow(values.data() + r * cols, cols, {bits, 32}, kernels::DType::kF32,
                         reinterpret_cast<std::byte*>(w.words.data()) + r * cols * bits / 8,
                         reinterpret_cast<std::byte*>(s.values.data() + r),
                         reinterpret_cast<std::byte*>(b.values.data() + r));
        }
        const std::string module = name.substr(0, name.size() - 7);
        t[module + ".weight"] = w;
        t[module + ".scales"] = s;
        t[module + ".biases"] = b;
        continue;
      }
      t[name] = tt;
    }
    if (edit) edit(t);
    testing::WriteSafetensors(dir_ / "model.safetensors", t);
  }

  TempDir dir_;
  testing::HfWeights weights_;
  std::string config_;
};

TEST_F(MlxDirectoryTest, QuantizedModulesBecomeMlxTensorsWithPerModuleBits) {
  if (!MlxDType(4).ok()) GTEST_SKIP() << "the kernels have no MLX types yet";
  Quantize();
  auto m = OpenModel(dir_.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->format, "mlx");
  const TensorInfo& q0 = (*m)->tensors.at("blk.0.attn_q.weight");
  const TensorInfo& q1 = (*m)->tensors.at("blk.1.attn_q.weight");
  EXPECT_EQ(MlxBits(q0.type), 4);
  EXPECT_EQ(MlxBits(q1.type), 8);
  EXPECT_EQ(q0.shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(q0.group_size, 32);
  EXPECT_EQ(q0.scale_type, kernels::DType::kF32);
  EXPECT_EQ((*m)->tensors.at("blk.0.attn_k.weight").type, kernels::DType::kF32);
  // The row reads back as the quantizer's reconstruction of the original weights.
  std::vector<float> row(32);
  MlxDequantizeTensorRow(q1, 3, row.data());
  const std::vector<float>& orig = weights_.at("model.layers.1.self_attn.q_proj.weight");
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(row[i], orig[3 * 32 + i], 0.02f);
  const kernels::MatrixView v = q0.matrix();
  EXPECT_EQ(v.rows, 32);
  EXPECT_EQ(v.cols, 32);
}

TEST_F(MlxDirectoryTest, InconsistentQuantizedModulesAreRejected) {
  struct Case {
    const char* what;
    std::function<void(std::map<std::string, TestTensor>&)> edit;
    const char* expect;
  };
  const std::string q = "model.layers.0.self_attn.q_proj";
  const Case cases[] = {
      {"no biases", [&](auto& t) { t.erase(q + ".biases"); }, "has .scales but no .biases"},
      {"orphan biases", [&](auto& t) { t.erase(q + ".scales"); }, "has .biases but no .scales"},
      {"scales rows",
       [&](auto& t) {
         t[q + ".scales"].shape = {16, 2};
         t[q + ".biases"].shape = {16, 2};
       },
       "scales have 16 rows"},
      {"words",
       [&](auto& t) {
         t[q + ".weight"].shape = {32, 8};  // 8-bit packing where config.json says 4 bits
         t[q + ".weight"].words.resize(32 * 8);
       },
       "8 packed words per row do not hold 1 groups of 32 values at 4 bits"},
      {"bias dtype", [&](auto& t) { t[q + ".biases"].dtype = StDType::kBF16; }, "biases are BF16"},
  };
  for (const Case& c : cases) {
    Quantize(c.edit);
    auto m = OpenModel(dir_.path());
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << m.status().ToString();
  }
  // Quantized tensors without a quantization block in config.json.
  Quantize();
  testing::WriteText(dir_ / "config.json", testing::TinyConfigJson(testing::TinyHfSpec{}));
  auto m = OpenModel(dir_.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("has no \"quantization\""), std::string::npos);
}

}  // namespace
}  // namespace loom::model
