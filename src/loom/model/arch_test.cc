// The architectures of Hugging Face directories (Llama, Mistral, Qwen2 with q/k/v biases, Qwen3
// with per-head q/k RMSNorm and head_dim != dim / heads) run by the engine against a plain scalar
// forward pass written here from the published model definitions (double precision, rotate-halves
// RoPE, causal grouped-query attention), on tiny random models; and tensor-parallel shards of them
// summed by threads.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>

#include "loom/model/hf_test_util.h"
#include "loom/model/thread_collective_test_util.h"
#include "loom/model/transformer.h"

namespace loom::model {
namespace {

using testing::HfWeights;
using testing::TempDir;
using testing::TinyHfSpec;
using Vec = std::vector<double>;

Vec RmsNorm(const Vec& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = w[i] * x[i] * inv;
  return out;
}

// y = W x (+ b), W (rows, cols) row-major.
Vec Linear(const std::vector<float>& w, const Vec& x, const std::vector<float>* b = nullptr) {
  const size_t cols = x.size(), rows = w.size() / cols;
  Vec y(rows);
  for (size_t r = 0; r < rows; ++r) {
    double s = b != nullptr ? (*b)[r] : 0.0;
    for (size_t c = 0; c < cols; ++c) s += w[r * cols + c] * x[c];
    y[r] = s;
  }
  return y;
}

// Hugging Face's rotate_half RoPE on each head of x.
void RopeHalves(Vec& x, int64_t heads, int64_t hd, int64_t pos, double theta) {
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = pos * std::pow(theta, -2.0 * i / hd);
      double& a = x[h * hd + i];
      double& b = x[h * hd + i + hd / 2];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = b0 * std::cos(angle) + a0 * std::sin(angle);
    }
  }
}

// Logits (vocab) of every position of `tokens`.
std::vector<Vec> ReferenceForward(const TinyHfSpec& s, const HfWeights& w,
                                  const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), hd = s.head_dim;
  const std::vector<float>& embed = w.at("model.embed_tokens.weight");
  std::vector<Vec> x(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    x[t].assign(embed.begin() + tokens[t] * s.dim, embed.begin() + (tokens[t] + 1) * s.dim);
  }
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto bias = [&](const char* name) {
      auto it = w.find(p + name);
      return it == w.end() ? nullptr : &it->second;
    };
    std::vector<Vec> q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      const Vec h = RmsNorm(x[t], w.at(p + "input_layernorm.weight"), s.rms_eps);
      q[t] = Linear(w.at(p + "self_attn.q_proj.weight"), h, bias("self_attn.q_proj.bias"));
      k[t] = Linear(w.at(p + "self_attn.k_proj.weight"), h, bias("self_attn.k_proj.bias"));
      v[t] = Linear(w.at(p + "self_attn.v_proj.weight"), h, bias("self_attn.v_proj.bias"));
      if (s.qk_norm) {
        for (int64_t hh = 0; hh < s.heads; ++hh) {
          Vec part(q[t].begin() + hh * hd, q[t].begin() + (hh + 1) * hd);
          part = RmsNorm(part, w.at(p + "self_attn.q_norm.weight"), s.rms_eps);
          std::copy(part.begin(), part.end(), q[t].begin() + hh * hd);
        }
        for (int64_t hh = 0; hh < s.kv_heads; ++hh) {
          Vec part(k[t].begin() + hh * hd, k[t].begin() + (hh + 1) * hd);
          part = RmsNorm(part, w.at(p + "self_attn.k_norm.weight"), s.rms_eps);
          std::copy(part.begin(), part.end(), k[t].begin() + hh * hd);
        }
      }
      RopeHalves(q[t], s.heads, hd, t, s.rope_theta);
      RopeHalves(k[t], s.kv_heads, hd, t, s.rope_theta);
    }
    for (int64_t t = 0; t < n; ++t) {
      Vec att(static_cast<size_t>(s.heads * hd), 0.0);
      for (int64_t hh = 0; hh < s.heads; ++hh) {
        const int64_t kvh = hh / (s.heads / s.kv_heads);
        Vec scores(static_cast<size_t>(t + 1));
        double max = -1e300;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[u][kvh * hd + i];
          scores[u] = d / std::sqrt(static_cast<double>(hd));
          max = std::max(max, scores[u]);
        }
        double sum = 0;
        for (double& sc : scores) sum += (sc = std::exp(sc - max));
        for (int64_t u = 0; u <= t; ++u) {
          for (int64_t i = 0; i < hd; ++i) att[hh * hd + i] += scores[u] / sum * v[u][kvh * hd + i];
        }
      }
      const Vec o = Linear(w.at(p + "self_attn.o_proj.weight"), att);
      for (int64_t i = 0; i < s.dim; ++i) x[t][i] += o[i];
      const Vec h = RmsNorm(x[t], w.at(p + "post_attention_layernorm.weight"), s.rms_eps);
      Vec g = Linear(w.at(p + "mlp.gate_proj.weight"), h);
      const Vec up = Linear(w.at(p + "mlp.up_proj.weight"), h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * up[i];
      const Vec down = Linear(w.at(p + "mlp.down_proj.weight"), g);
      for (int64_t i = 0; i < s.dim; ++i) x[t][i] += down[i];
    }
  }
  std::vector<Vec> logits(static_cast<size_t>(n));
  const std::vector<float>& head = w.at(s.tied ? "model.embed_tokens.weight" : "lm_head.weight");
  for (int64_t t = 0; t < n; ++t) {
    logits[t] = Linear(head, RmsNorm(x[t], w.at("model.norm.weight"), s.rms_eps));
  }
  return logits;
}

const std::vector<int32_t> kTokens = {1, 5, 17, 39, 0, 22, 8};

// The engine's logits of every position of kTokens, one batch, for one shard.
std::vector<float> EngineLogits(const ModelFile& file, const ShardSpec& shard = {},
                                Collective* collective = nullptr) {
  auto w = BindWeights(file, shard);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return {};
  base::ThreadPool pool(1);
  auto t = Transformer::Create(*w, {}, pool);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  (*t)->set_collective(collective);
  const int64_t n = static_cast<int64_t>(kTokens.size());
  std::vector<int32_t> pos(kTokens.size()), slots(kTokens.size(), 0);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  std::vector<float> logits(static_cast<size_t>(n * file.hparams.vocab_size));
  const Status s = (*t)->Forward({kTokens, pos, slots, pos}, logits.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return logits;
}

double WorstDiff(const std::vector<float>& got, const std::vector<Vec>& want) {
  double worst = 0;
  size_t i = 0;
  for (const Vec& row : want) {
    for (double v : row)
      worst = std::max(worst, std::abs(got[i++] - v) / std::max(1.0, std::abs(v)));
  }
  return worst;
}

struct ArchCase {
  const char* name;
  TinyHfSpec spec;
};

TinyHfSpec Spec(const char* type, bool tied, bool biases, bool qk_norm, int64_t head_dim) {
  TinyHfSpec s;
  s.model_type = type;
  s.tied = tied;
  s.biases = biases;
  s.qk_norm = qk_norm;
  s.head_dim = head_dim;
  s.rope_theta = qk_norm || biases ? 1000000.0f : 10000.0f;
  return s;
}

class ArchTest : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ArchTest, EngineMatchesScalarReference) {
  TempDir dir;
  const TinyHfSpec& spec = GetParam().spec;
  const HfWeights w = testing::WriteTinyHfModel(dir.path(), spec);
  auto file = OpenModel(dir.path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const std::vector<Vec> want = ReferenceForward(spec, w, kTokens);
  const std::vector<float> got = EngineLogits(**file);
  ASSERT_EQ(got.size(), want.size() * want[0].size());
  // f32 sums against a double reference: ~1e-6 relative per operation over a few hundred.
  EXPECT_LT(WorstDiff(got, want), 2e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ArchTest,
    ::testing::Values(ArchCase{"llama", Spec("llama", false, false, false, 8)},
                      ArchCase{"llama_tied", Spec("llama", true, false, false, 8)},
                      ArchCase{"mistral", Spec("mistral", false, false, false, 8)},
                      ArchCase{"qwen2_biases", Spec("qwen2", true, true, false, 8)},
                      ArchCase{"qwen3_qk_norm_wide_heads", Spec("qwen3", false, false, true, 16)}),
    [](const ::testing::TestParamInfo<ArchCase>& info) { return info.param.name; });

// Removing the family's extra tensors changes the result: the engine really uses them.
TEST(ArchTest, QwenExtrasAreUsed) {
  TempDir dir;
  const TinyHfSpec spec = Spec("qwen2", true, true, false, 8);
  HfWeights w = testing::WriteTinyHfModel(dir.path(), spec);
  auto file = OpenModel(dir.path());
  ASSERT_TRUE(file.ok());
  for (auto& [name, values] : w) {
    if (name.find(".bias") != std::string::npos) std::fill(values.begin(), values.end(), 0.0f);
  }
  EXPECT_GT(WorstDiff(EngineLogits(**file), ReferenceForward(spec, w, kTokens)), 1e-2);
}

TEST(ArchTest, MissingBiasOrNormIsAnError) {
  for (const char* type : {"qwen2", "qwen3"}) {
    TempDir dir;
    testing::WriteTinyHfModel(dir.path(), Spec(type, false, false, false, 8));
    auto file = OpenModel(dir.path());
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto w = BindWeights(**file);
    ASSERT_FALSE(w.ok()) << type;
    EXPECT_NE(w.status().message().find(std::string(type) == "qwen2" ? "attn_q.bias"
                                                                     : "attn_q_norm.weight"),
              std::string::npos)
        << w.status().ToString();
  }
}

using testing::ThreadCollective;

TEST(ArchTest, TensorParallelShardsSliceBiasesAndNorms) {
  for (const TinyHfSpec& spec :
       {Spec("qwen2", true, true, false, 8), Spec("qwen3", false, false, true, 16)}) {
    TempDir dir;
    const HfWeights w = testing::WriteTinyHfModel(dir.path(), spec);
    auto file = OpenModel(dir.path());
    ASSERT_TRUE(file.ok());
    const std::vector<Vec> want = ReferenceForward(spec, w, kTokens);
    ThreadCollective group(2);
    std::vector<float> got[2];
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        ThreadCollective::Rank rank(&group, r);
        ShardSpec shard;
        shard.head_begin = r * spec.heads / 2;
        shard.n_heads = spec.heads / 2;
        shard.ffn_begin = r * spec.ffn / 2;
        shard.ffn_dim = spec.ffn / 2;
        got[r] = EngineLogits(**file, shard, &rank);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_LT(WorstDiff(got[0], want), 2e-4) << spec.model_type;
    EXPECT_EQ(got[0], got[1]);
  }
}

}  // namespace
}  // namespace loom::model
