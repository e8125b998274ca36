// Multi-head latent attention (mla.h) against a naive reference that decompresses every cached
// latent into full per-head keys and values (scalar kernels) and attends in the ordinary way;
// ragged batches of two sequences (a prompt and another sequence's tokens in one batch, then
// batched decode), both weight layouts (attn_kv_b, and attn_k_b / attn_v_b), queries through the
// rank-q_lora_rank bottleneck or attn_q directly, F32 and Q8_0, 1 or 3 threads.
#include "loom/model/mla.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/kernels/quantize.h"
#include "loom/kernels/reference.h"
#include "loom/model/rope.h"
#include "loom/model/transformer.h"

namespace loom::model {
namespace {

namespace k = loom::kernels;

std::vector<float> Values(uint64_t seed, int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
  }
  return v;
}

struct OwnedMatrix {
  std::vector<std::byte> bytes;
  k::MatrixView view;
};

OwnedMatrix Make(k::DType type, const std::vector<float>& x, int64_t rows, int64_t cols) {
  OwnedMatrix m;
  const int64_t row_bytes = k::RowBytes(type, cols).value();
  m.bytes.resize(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    k::QuantizeRow(type, x.data() + r * cols, cols, m.bytes.data() + r * row_bytes);
  }
  m.view = {
      .type = type, .rows = rows, .cols = cols, .data = m.bytes.data(), .row_stride = row_bytes};
  return m;
}

// The matrix's values as floats (what the kernels compute with).
std::vector<float> Dequantized(const k::MatrixView& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) k::reference::DequantizeRow(m, r, out.data() + r * m.cols);
  return out;
}

constexpr int64_t kDim = 64, kHeads = 4, kNope = 32, kRope = 8, kV = 16, kQRank = 32, kRank = 32,
                  kCtx = 16;

HParams MlaParams() {
  HParams hp;
  hp.arch = "deepseek2";
  hp.dim = kDim;
  hp.n_heads = kHeads;
  hp.n_kv_heads = kHeads;
  hp.head_dim = kNope + kRope;
  hp.v_head_dim = kV;
  hp.rope_dim = kRope;
  hp.q_lora_rank = kQRank;
  hp.kv_lora_rank = kRank;
  hp.rope_style = k::RopeStyle::kInterleaved;
  // YaRN as DeepSeek-V3 has it (mscale_all_dim 1): scores scaled by (1 + 0.1 ln 4)^2.
  hp.rope_scaling.type = RopeScalingType::kYarn;
  hp.rope_scaling.factor = 4.0f;
  hp.rope_scaling.original_context = 8;
  hp.rope_scaling.yarn_log_mul = 1.0f;
  return hp;
}

struct MlaLayer {
  OwnedMatrix q, q_a, q_b, kv_a, kv_b, k_b, v_b;
  std::vector<float> q_a_norm, kv_a_norm;
  LayerWeights L;

  // split: the attn_k_b / attn_v_b layout, made from the same attn_kv_b values.  lite: attn_q
  // instead of the query bottleneck (q_lora_rank 0, DeepSeek-V2-Lite).
  MlaLayer(k::DType type, bool split, bool lite) {
    q_a = Make(type, Values(1, kQRank * kDim, 0.3f), kQRank, kDim);
    q_b = Make(type, Values(2, kHeads * (kNope + kRope) * kQRank, 0.3f), kHeads * (kNope + kRope),
               kQRank);
    kv_a = Make(type, Values(3, (kRank + kRope) * kDim, 0.3f), kRank + kRope, kDim);
    const std::vector<float> kvb = Values(4, kHeads * (kNope + kV) * kRank, 0.3f);
    kv_b = Make(type, kvb, kHeads * (kNope + kV), kRank);
    q_a_norm = Values(5, kQRank, 0.2f);
    kv_a_norm = Values(6, kRank, 0.2f);
    for (float& v : q_a_norm) v += 1.0f;
    for (float& v : kv_a_norm) v += 1.0f;
    if (lite) {
      q = Make(type, Values(7, kHeads * (kNope + kRope) * kDim, 0.3f), kHeads * (kNope + kRope),
               kDim);
      L.wq = q.view;
    } else {
      L.wq_a = q_a.view;
      L.q_a_norm = q_a_norm.data();
      L.wq_b = q_b.view;
    }
    L.wkv_a = kv_a.view;
    L.kv_a_norm = kv_a_norm.data();
    if (!split) {
      L.wkv_b = kv_b.view;
      return;
    }
    std::vector<float> kb(static_cast<size_t>(kHeads * kRank * kNope));
    std::vector<float> vb(static_cast<size_t>(kHeads * kV * kRank));
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t r = 0; r < kRank; ++r) {
        for (int64_t j = 0; j < kNope; ++j) {
          kb[(h * kRank + r) * kNope + j] = kvb[(h * (kNope + kV) + j) * kRank + r];
        }
      }
      for (int64_t c = 0; c < kV; ++c) {
        for (int64_t r = 0; r < kRank; ++r) {
          vb[(h * kV + c) * kRank + r] = kvb[(h * (kNope + kV) + kNope + c) * kRank + r];
        }
      }
    }
    k_b = Make(type, kb, kHeads * kRank, kNope);
    v_b = Make(type, vb, kHeads * kV, kRank);
    L.wk_b = k_b.view;
    L.wv_b = v_b.view;
  }
};

// The naive reference: per token in batch order, full keys k_h = [Wk_h c, kr] and values
// v_h = Wv_h c (Wk_h, Wv_h the halves of head h's attn_kv_b rows) kept per sequence, then
// softmax(scale q_h . k_h) over the sequence's positions so far.
class NaiveMla {
 public:
  NaiveMla(const HParams& hp, const MlaLayer& m)
      : hp_(hp), m_(m), rope_(kRope, 10000.0f, hp.rope_scaling, true) {
    kvb_ = Dequantized(m.kv_b.view);
  }

  std::vector<float> Token(const float* x, int32_t slot, int32_t pos) {
    std::vector<float> qa(kQRank), q(kHeads * (kNope + kRope)), kv(kRank + kRope), cs(kRope);
    if (m_.L.wq.data != nullptr) {
      k::reference::MatMul(m_.L.wq, x, 1, q.data());
    } else {
      k::reference::MatMul(m_.L.wq_a, x, 1, qa.data());
      k::reference::RmsNorm(qa.data(), m_.L.q_a_norm, kQRank, hp_.rms_eps, qa.data());
      k::reference::MatMul(m_.L.wq_b, qa.data(), 1, q.data());
    }
    k::reference::MatMul(m_.L.wkv_a, x, 1, kv.data());
    k::reference::RmsNorm(kv.data(), m_.L.kv_a_norm, kRank, hp_.rms_eps, kv.data());
    rope_.CosSin(pos, cs.data());
    k::reference::Rope(kv.data() + kRank, 1, kRope, cs.data(), hp_.rope_style);
    auto& seq = seqs_[slot];
    seq.keys.resize(static_cast<size_t>((pos + 1) * kHeads * (kNope + kRope)));
    seq.values.resize(static_cast<size_t>((pos + 1) * kHeads * kV));
    for (int64_t h = 0; h < kHeads; ++h) {
      k::reference::Rope(q.data() + h * (kNope + kRope) + kNope, 1, kRope, cs.data(),
                         hp_.rope_style);
      float* key = seq.keys.data() + (pos * kHeads + h) * (kNope + kRope);
      float* value = seq.values.data() + (pos * kHeads + h) * kV;
      for (int64_t j = 0; j < kNope + kV; ++j) {
        double acc = 0;
        for (int64_t r = 0; r < kRank; ++r) {
          acc += static_cast<double>(kvb_[(h * (kNope + kV) + j) * kRank + r]) * kv[r];
        }
        if (j < kNope) {
          key[j] = static_cast<float>(acc);
        } else {
          value[j - kNope] = static_cast<float>(acc);
        }
      }
      for (int64_t j = 0; j < kRope; ++j) key[kNope + j] = kv[kRank + j];
    }
    const double mscale = 1.0 + 0.1 * std::log(4.0);
    const double scale = mscale * mscale / std::sqrt(static_cast<double>(kNope + kRope));
    std::vector<float> out(static_cast<size_t>(kHeads * kV), 0.0f);
    for (int64_t h = 0; h < kHeads; ++h) {
      std::vector<double> s(static_cast<size_t>(pos + 1));
      double max = -INFINITY, sum = 0;
      for (int64_t p = 0; p <= pos; ++p) {
        double dot = 0;
        for (int64_t j = 0; j < kNope + kRope; ++j) {
          dot += static_cast<double>(q[h * (kNope + kRope) + j]) *
                 seq.keys[(p * kHeads + h) * (kNope + kRope) + j];
        }
        s[p] = scale * dot;
        max = std::max(max, s[p]);
      }
      for (double& v : s) sum += (v = std::exp(v - max));
      for (int64_t p = 0; p <= pos; ++p) {
        for (int64_t c = 0; c < kV; ++c) {
          out[h * kV + c] += static_cast<float>(s[p] / sum * seq.values[(p * kHeads + h) * kV + c]);
        }
      }
    }
    return out;
  }

 private:
  struct Seq {
    std::vector<float> keys, values;
  };
  const HParams& hp_;
  const MlaLayer& m_;
  RopeTable rope_;
  std::vector<float> kvb_;
  Seq seqs_[2];
};

struct Step {
  std::vector<int32_t> slots, positions;
};

class MlaTest : public ::testing::TestWithParam<std::tuple<k::DType, bool, bool>> {};

TEST_P(MlaTest, AbsorbedAttentionOverTheLatentCacheMatchesTheNaiveReference) {
  const auto [type, split, lite] = GetParam();
  HParams hp = MlaParams();
  if (lite) hp.q_lora_rank = 0;
  const MlaLayer m(type, split, lite);
  // Sequence 0: a 4-token prompt with sequence 1's first two tokens in the same batch, then
  // batched decode of both, then sequence 1 alone.
  const std::vector<Step> steps = {
      {{0, 0, 0, 0, 1, 1}, {0, 1, 2, 3, 0, 1}}, {{1, 0}, {2, 4}}, {{0, 1}, {5, 3}}, {{1}, {4}}};
  for (int threads : {1, 3}) {
    SCOPED_TRACE(threads);
    NaiveMla naive(hp, m);
    base::ThreadPool pool(threads);
    k::Workspace ws;
    auto cache = KvCache::Create(1, 2, kCtx, kRank + kRope, 0);
    ASSERT_TRUE(cache.ok());
    EXPECT_EQ(cache->bytes(), 2 * kCtx * (kRank + kRope) * 4);  // the latent cache only
    MlaScratch s;
    s.Allocate(hp, 8, pool.size(), kCtx);
    RopeTable rope(kRope, 10000.0f, hp.rope_scaling, true);
    uint64_t seed = 100;
    for (const Step& st : steps) {
      const int64_t n = static_cast<int64_t>(st.slots.size());
      const std::vector<float> x = Values(seed++, n * kDim, 1.0f);
      std::vector<int32_t> tokens(static_cast<size_t>(n), 0);
      std::vector<float> cs(static_cast<size_t>(n * kRope));
      for (int64_t i = 0; i < n; ++i) rope.CosSin(st.positions[i], cs.data() + i * kRope);
      const Batch b{tokens, st.positions, st.slots, {}};
      std::vector<float> att(static_cast<size_t>(n * kHeads * kV));
      MlaForward(hp, m.L, hp.n_heads, b, x.data(), cs.data(), kRope, *cache, 0, att.data(), s, ws,
                 pool);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> want =
            naive.Token(x.data() + i * kDim, st.slots[i], st.positions[i]);
        double scale = 0;
        for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
        ASSERT_GT(scale, 0.0);
        // Q8_0 activations are rounded to 8 bits before the products (as llama.cpp does).
        const double tol = (type == k::DType::kF32 ? 1e-4 : 3e-2) * scale;
        for (int64_t j = 0; j < kHeads * kV; ++j) {
          ASSERT_NEAR(att[i * kHeads * kV + j], want[j], tol)
              << "slot " << st.slots[i] << " position " << st.positions[i] << " value " << j;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MlaTest,
                         ::testing::Combine(::testing::Values(k::DType::kF32, k::DType::kQ8_0),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(k::Traits(std::get<0>(info.param)).name) +
                                  (std::get<1>(info.param) ? "_k_b_v_b" : "_kv_b") +
                                  (std::get<2>(info.param) ? "_attn_q" : "_q_lora");
                         });

TEST(MlaTest, ScoreScaleIsYarnsMscaleSquaredOverTheKeyHead) {
  HParams hp = MlaParams();
  const double m = 1.0 + 0.1 * std::log(4.0);
  EXPECT_NEAR(MlaScoreScale(hp), m * m / std::sqrt(40.0), 1e-6);
  hp.rope_scaling.type = RopeScalingType::kNone;
  EXPECT_NEAR(MlaScoreScale(hp), 1.0 / std::sqrt(40.0), 1e-7);
  // The key per position is the latent and the rope key: (kv_lora_rank + rope_dim) values.
  EXPECT_EQ(hp.kv_values_per_token_layer(), kRank + kRope);
}

}  // namespace
}  // namespace loom::model
