// The mixture-of-experts block against a naive per-token reference (scalar kernels, one expert at a
// time) on ragged routings, routing rules, and expert row parts summed over ranks.  (Whole models:
// moe_model_test.cc.)
#include "loom/model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>
#include <thread>

#include "loom/kernels/quantize.h"
#include "loom/kernels/reference.h"
#include "loom/model/model_test_util.h"
#include "loom/model/synth.h"
#include "loom/model/thread_collective_test_util.h"
#include "loom/model/transformer.h"
#include "loom/model/weight_copy.h"

namespace loom::model {
namespace {

namespace k = loom::kernels;

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Deterministic values in [-scale, scale).
std::vector<float> Values(uint64_t seed, int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = Mix(seed * 1000003 + static_cast<uint64_t>(i));
    v[i] = scale * (static_cast<float>(r >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
  }
  return v;
}

// A matrix of `type` made from float values, owning its bytes.
struct OwnedMatrix {
  std::vector<std::byte> bytes;
  k::MatrixView view;
};

OwnedMatrix Quantized(k::DType type, const std::vector<float>& x, int64_t rows, int64_t cols) {
  OwnedMatrix m;
  const int64_t row_bytes = k::RowBytes(type, cols).value();
  m.bytes.resize(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    k::QuantizeRow(type, x.data() + r * cols, cols, m.bytes.data() + r * row_bytes);
  }
  m.view.type = type;
  m.view.rows = rows;
  m.view.cols = cols;
  m.view.data = m.bytes.data();
  m.view.row_stride = row_bytes;
  return m;
}

// The routing reference: the same rules as moe.h's Routing, by full sorts (stable: ties to the
// lower index): scores, group scores as the sum of each group's two best, the best groups, the
// best experts inside them.
std::vector<std::pair<int64_t, float>> NaiveRoute(const HParams& hp, const float* bias,
                                                  std::vector<float> p) {
  const int64_t n = hp.n_experts;
  if (hp.gating == HParams::Gating::kSoftmax) {
    k::reference::Softmax(p.data(), n);
  } else {
    for (float& v : p) v = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
  }
  std::vector<float> sel(p);
  if (bias != nullptr) {
    for (int64_t e = 0; e < n; ++e) sel[e] += bias[e];
  }
  std::vector<bool> allowed(static_cast<size_t>(n), true);
  if (hp.n_expert_groups > 1) {
    const int64_t per = n / hp.n_expert_groups;
    std::vector<float> score;
    for (int64_t g = 0; g < hp.n_expert_groups; ++g) {
      std::vector<float> in(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(in.begin(), in.end(), std::greater<>());
      score.push_back(in[0] + in[1]);
    }
    std::vector<int64_t> groups(static_cast<size_t>(hp.n_expert_groups));
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    for (int64_t e = 0; e < n; ++e) {
      allowed[e] = std::find(groups.begin(), groups.begin() + hp.n_expert_groups_used, e / per) !=
                   groups.begin() + hp.n_expert_groups_used;
    }
  }
  std::vector<int64_t> order;
  for (int64_t e = 0; e < n; ++e) {
    if (allowed[e]) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return sel[a] > sel[b]; });
  double sum = 0;
  for (int64_t j = 0; j < hp.n_experts_used; ++j) sum += p[order[j]];
  std::vector<std::pair<int64_t, float>> out;
  for (int64_t j = 0; j < hp.n_experts_used; ++j) {
    double w = p[order[j]];
    if (hp.expert_weights_norm) w /= sum;
    out.push_back({order[j], static_cast<float>(w * hp.expert_weights_scale)});
  }
  return out;
}

// The reference: each token alone, its experts one by one with the scalar kernels, routed by
// NaiveRoute, plus the shared experts when the layer has them (times their gate when it has one).
// An expert whose views are empty (data null: not held by this expert-parallel rank) adds nothing.
std::vector<float> NaiveMoe(const HParams& hp, const LayerWeights& L, const std::vector<float>& x,
                            int64_t n) {
  const int64_t dim = hp.dim;
  std::vector<float> y(static_cast<size_t>(n * dim), 0.0f);
  auto swiglu = [&](const k::MatrixView& gate, const k::MatrixView& up, const k::MatrixView& down,
                    const float* xi, float w, float* yi) {
    std::vector<float> g(static_cast<size_t>(gate.rows)), u(g.size()),
        out(static_cast<size_t>(dim));
    k::reference::MatMul(gate, xi, 1, g.data());
    k::reference::MatMul(up, xi, 1, u.data());
    k::reference::SwiGlu(g.data(), u.data(), gate.rows, g.data());
    k::reference::MatMul(down, g.data(), 1, out.data());
    for (int64_t d = 0; d < dim; ++d) yi[d] += w * out[d];
  };
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x.data() + i * dim;
    std::vector<float> logits(static_cast<size_t>(hp.n_experts));
    k::reference::MatMul(L.router, xi, 1, logits.data());
    for (const auto& [e, w] : NaiveRoute(hp, L.expert_bias, logits)) {
      const LayerWeights::Expert& ex = L.experts[static_cast<size_t>(e)];
      if (ex.gate.data == nullptr) continue;
      swiglu(ex.gate, ex.up, ex.down, xi, w, y.data() + i * dim);
    }
    if (L.shexp_gate.data != nullptr) {
      // Qwen2-MoE's gate: sigmoid of a dot product, in double.
      double g = 1.0;
      if (L.shexp_gate_inp != nullptr) {
        double dot = 0.0;
        for (int64_t d = 0; d < dim; ++d) dot += static_cast<double>(L.shexp_gate_inp[d]) * xi[d];
        g = 1.0 / (1.0 + std::exp(-dot));
      }
      swiglu(L.shexp_gate, L.shexp_up, L.shexp_down, xi, static_cast<float>(g), y.data() + i * dim);
    }
  }
  return y;
}

// One layer's experts of `type`; a router whose column 0 carries a per-expert bias (the inputs have
// x[0] = 1) so that tests can steer the routing: `bias`(n_experts).
struct TestLayer {
  HParams hp;
  OwnedMatrix router, gate, up, down;
  LayerWeights L;

  TestLayer(k::DType type, int64_t dim, int64_t f, int64_t n_experts, int64_t used,
            const std::vector<float>& bias) {
    hp.dim = dim;
    hp.n_experts = n_experts;
    hp.n_experts_used = used;
    hp.expert_ffn_dim = f;
    std::vector<float> r = Values(1, n_experts * dim, 0.5f);
    for (int64_t e = 0; e < n_experts; ++e) r[e * dim] = bias[e];
    router = Quantized(k::DType::kF32, r, n_experts, dim);
    gate = Quantized(type, Values(2, n_experts * f * dim, 0.3f), n_experts * f, dim);
    up = Quantized(type, Values(3, n_experts * f * dim, 0.3f), n_experts * f, dim);
    down = Quantized(type, Values(4, n_experts * dim * f, 0.3f), n_experts * dim, f);
    L.router = router.view;
    for (int64_t e = 0; e < n_experts; ++e) {
      L.experts.push_back({gate.view.RowRange(e * f, f), up.view.RowRange(e * f, f),
                           down.view.RowRange(e * dim, dim)});
    }
  }
};

std::vector<float> Inputs(int64_t n, int64_t dim) {
  std::vector<float> x = Values(5, n * dim, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i * dim] = 1.0f;  // the router's bias feature
  return x;
}

// How near the reference's down-product inputs for token xi (its chosen experts' SwiGLU outputs)
// come to a rounding midpoint of QuantizeActivations, in quantization steps; infinity when the
// down matrices take float activations.  The block computes those inputs with SIMD sums in another
// order than the reference (a few float roundings apart, ~1e-4 steps), so a value nearer a
// midpoint than that is a near-tie: either side may round it the other way, and one step of one
// value moves the token's whole output by that step times a column of down (~1e-2, far past the
// tolerance of float reordering), on one target's rounding and not another's.
double DownInputMargin(const HParams& hp, const LayerWeights& L, const float* xi) {
  double margin = std::numeric_limits<double>::infinity();
  std::vector<float> logits(static_cast<size_t>(hp.n_experts));
  k::reference::MatMul(L.router, xi, 1, logits.data());
  for (const auto& [e, w] : NaiveRoute(hp, L.expert_bias, logits)) {
    const LayerWeights::Expert& ex = L.experts[static_cast<size_t>(e)];
    if (ex.gate.data == nullptr || !k::reference::UsesQuantizedActivations(ex.down.type)) continue;
    std::vector<float> g(static_cast<size_t>(ex.gate.rows)), u(g.size());
    k::reference::MatMul(ex.gate, xi, 1, g.data());
    k::reference::MatMul(ex.up, xi, 1, u.data());
    k::reference::SwiGlu(g.data(), u.data(), ex.gate.rows, g.data());
    for (int64_t b = 0; b < ex.gate.rows; b += k::reference::kQ8Block) {
      float amax = 0.0f;
      for (int64_t j = b; j < b + k::reference::kQ8Block; ++j)
        amax = std::max(amax, std::abs(g[j]));
      if (amax == 0.0f) continue;
      const float inv = 1.0f / (amax / 127.0f);  // QuantizeActivations' arithmetic
      for (int64_t j = b; j < b + k::reference::kQ8Block; ++j) {
        const double steps = static_cast<double>(g[j] * inv);
        margin = std::min(margin, std::abs(steps - std::floor(steps) - 0.5));
      }
    }
  }
  return margin;
}

// Inputs(n, dim) with every token whose down-product inputs have a near-tie (DownInputMargin
// under 1e-3 steps, ~10 times the two sides' difference) drawn again, from other seeds, until it
// has none.  Without this one of the unsteered Q6_K tokens lands 4e-5 steps from a midpoint.
std::vector<float> InputsWithoutNearTies(const TestLayer& t, int64_t n, int64_t dim) {
  constexpr double kMargin = 1e-3;
  std::vector<float> x = Inputs(n, dim);
  for (int64_t i = 0; i < n; ++i) {
    float* xi = x.data() + i * dim;
    int attempt = 0;
    while (DownInputMargin(t.hp, t.L, xi) < kMargin) {
      ++attempt;
      if (attempt > 200) {
        ADD_FAILURE() << "token " << i << ": no input without a near-tie in 200 draws";
        break;
      }
      const std::vector<float> v =
          Values(1000 + static_cast<uint64_t>(i) * 1000 + attempt, dim, 1.0f);
      std::copy(v.begin(), v.end(), xi);
      xi[0] = 1.0f;  // the router's bias feature
    }
  }
  return x;
}

struct Case {
  k::DType type;
  int64_t n;
  std::vector<float> bias;  // per expert
  const char* what;
};

class MoeBlockTest : public ::testing::TestWithParam<k::DType> {};

TEST_P(MoeBlockTest, MatchesNaiveReferenceOnRaggedRoutings) {
  const k::DType type = GetParam();
  // K-quant rows are whole 256-value blocks.
  const bool kquant = k::Traits(type).block_elems == 256;
  const int64_t dim = kquant ? 256 : 64, f = kquant ? 512 : 96, n_experts = 6, used = 2;
  const std::vector<Case> cases = {
      // Experts 4 and 5 are never chosen, expert 1 by every token; 7 tokens, some experts few.
      {type, 7, {0, 8, 0, 0, -8, -8}, "experts without tokens, one expert with all"},
      {type, 1, {0, 0, 0, 0, 0, 0}, "a single token (decode)"},
      {type, 13, {0, 0, 0, 0, 0, 0}, "an unsteered batch"},
      {type, 5, {-8, -8, 8, 8, -8, -8}, "two experts take every token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TestLayer t(type, dim, f, n_experts, used, c.bias);
    const std::vector<float> x = InputsWithoutNearTies(t, c.n, dim);
    const std::vector<float> want = NaiveMoe(t.hp, t.L, x, c.n);
    std::vector<float> one_thread;
    for (int threads : {1, 3}) {
      base::ThreadPool pool(threads);
      k::Workspace ws;
      MoeScratch s;
      s.Allocate(t.hp, 16);
      std::vector<float> y = x;  // in place, as the transformer calls it
      ASSERT_TRUE(MoeForward(t.hp, t.L, y.data(), c.n, y.data(), s, ws, pool).ok());
      double scale = 0;
      for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
      ASSERT_GT(scale, 0.0);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], want[i], 1e-4 * scale) << "element " << i << ", threads " << threads;
      }
      // Threads split rows, never a row's sum: the same bits for any thread count.
      if (threads == 1) one_thread = y;
      EXPECT_EQ(y, one_thread) << "threads " << threads;
      // The routing really was as steered.
      std::vector<int64_t> count(static_cast<size_t>(n_experts), 0);
      for (int64_t p = 0; p < c.n * used; ++p) ++count[static_cast<size_t>(s.chosen[p])];
      for (int64_t e = 0; e < n_experts; ++e) {
        if (c.bias[e] < 0) {
          EXPECT_EQ(count[e], 0) << "expert " << e;
        } else if (c.bias[e] > 0) {
          EXPECT_EQ(count[e], c.n) << "expert " << e;
        }
      }
    }
  }
}

// Qwen3-MoE's proportions in miniature (many experts, 8 of them per token: one decode step is
// 16 gate/up products in one pass and 8 downs in another) and experts this process does not hold
// (an expert-parallel rank's empty views): they add nothing, for decode and for batches.
TEST_P(MoeBlockTest, ManyExpertsAndExpertsNotHeldMatchTheReference) {
  const k::DType type = GetParam();
  const bool kquant = k::Traits(type).block_elems == 256;
  const int64_t dim = kquant ? 256 : 64, f = kquant ? 256 : 96, n_experts = 16, used = 8;
  std::vector<float> bias(static_cast<size_t>(n_experts), 0.0f);
  bias[3] = 8;  // every token's choice, and (below) not held
  for (bool drop : {false, true}) {
    TestLayer t(type, dim, f, n_experts, used, bias);
    if (drop) {
      for (int64_t e : {0, 3, 7, 8, 13}) t.L.experts[static_cast<size_t>(e)] = {};
    }
    for (int64_t n : {1, 2, 9}) {
      SCOPED_TRACE(std::to_string(n) + " tokens" + (drop ? ", 5 experts not held" : ""));
      const std::vector<float> x = Inputs(n, dim);
      const std::vector<float> want = NaiveMoe(t.hp, t.L, x, n);
      double scale = 0;
      for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
      ASSERT_GT(scale, 0.0);
      std::vector<float> one_thread;
      for (int threads : {1, 3}) {
        base::ThreadPool pool(threads, /*spin_microseconds=*/0);
        k::Workspace ws;
        MoeScratch s;
        s.Allocate(t.hp, 16);
        std::vector<float> y = x;
        ASSERT_TRUE(MoeForward(t.hp, t.L, y.data(), n, y.data(), s, ws, pool).ok());
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_NEAR(y[i], want[i], 1e-4 * scale) << "element " << i << ", threads " << threads;
        }
        if (threads == 1) one_thread = y;
        EXPECT_EQ(y, one_thread) << "threads " << threads;
      }
    }
  }
}

// Expert parallelism by row parts: each of P ranks holds rows of every expert (gate and up of
// expert_ffn_dim, down of dim, ragged when P does not divide them), gathers the activations with
// one all-reduce, and outputs its rows of y; summed over the ranks (the transformer's all-reduce
// after the block) that is one process's output bit for bit.
TEST_P(MoeBlockTest, RowPartsSummedOverRanksEqualOneProcessBitForBit) {
  const k::DType type = GetParam();
  const bool kquant = k::Traits(type).block_elems == 256;
  const int64_t dim = kquant ? 256 : 64, f = kquant ? 512 : 96, n_experts = 6, used = 2;
  for (int64_t n : {1, 7, 13}) {
    TestLayer t(type, dim, f, n_experts, used, {0, 0, 0, 0, 0, 0});
    const std::vector<float> x = Inputs(n, dim);
    base::ThreadPool one_pool(2);
    k::Workspace one_ws;
    MoeScratch one_s;
    one_s.Allocate(t.hp, 16);
    std::vector<float> want = x;
    ASSERT_TRUE(MoeForward(t.hp, t.L, want.data(), n, want.data(), one_s, one_ws, one_pool).ok());
    for (int parts : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << n << " tokens, " << parts << " parts");
      testing::ThreadCollective group(parts);
      std::vector<std::vector<float>> got(static_cast<size_t>(parts), x);
      std::vector<Status> status(static_cast<size_t>(parts));
      std::vector<std::thread> ranks;
      for (int p = 0; p < parts; ++p) {
        ranks.emplace_back([&, p] {
          LocalDims d;
          d.n_experts = n_experts;
          d.expert_part = p;
          d.expert_parts = parts;
          const ExpertRows r = ExpertRowsOf(t.hp, d);
          LayerWeights L;
          L.router = t.L.router;
          for (const LayerWeights::Expert& e : t.L.experts) {
            L.experts.push_back({e.gate.RowRange(r.ffn_begin, r.ffn),
                                 e.up.RowRange(r.ffn_begin, r.ffn),
                                 e.down.RowRange(r.dim_begin, r.dim)});
          }
          base::ThreadPool pool(p == 0 ? 2 : 1);
          k::Workspace ws;
          MoeScratch s;
          s.Allocate(t.hp, 16);
          testing::ThreadCollective::Rank rank(&group, p);
          std::vector<float>& y = got[static_cast<size_t>(p)];
          Status st = MoeForward(t.hp, L, y.data(), n, y.data(), s, ws, pool, &r, &rank);
          // The caller's all-reduce after the block (every rank joins it, failed or not).
          const Status sum = rank.AllReduceSum(y.data(), n * dim);
          status[static_cast<size_t>(p)] = st.ok() ? sum : st;
        });
      }
      for (std::thread& r : ranks) r.join();
      for (int p = 0; p < parts; ++p) {
        ASSERT_TRUE(status[static_cast<size_t>(p)].ok()) << status[static_cast<size_t>(p)].message();
        EXPECT_EQ(got[static_cast<size_t>(p)], want) << "rank " << p;
      }
    }
  }
  // Row parts without a collective: an error, not a crash.
  TestLayer t(type, dim, f, n_experts, used, {0, 0, 0, 0, 0, 0});
  LocalDims d;
  d.n_experts = n_experts;
  d.expert_parts = 2;
  const ExpertRows r = ExpertRowsOf(t.hp, d);
  base::ThreadPool pool(1);
  k::Workspace ws;
  MoeScratch s;
  s.Allocate(t.hp, 16);
  std::vector<float> y = Inputs(1, dim);
  EXPECT_FALSE(MoeForward(t.hp, t.L, y.data(), 1, y.data(), s, ws, pool, &r, nullptr).ok());
}

INSTANTIATE_TEST_SUITE_P(Types, MoeBlockTest,
                         ::testing::Values(k::DType::kF32, k::DType::kF16, k::DType::kBF16,
                                           k::DType::kQ8_0, k::DType::kQ4_0, k::DType::kQ4_K,
                                           k::DType::kQ5_K, k::DType::kQ6_K),
                         [](const auto& info) { return std::string(k::Traits(info.param).name); });

TEST(RouteTopKTest, RenormalisesTheChosenProbabilities) {
  const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  float probs[5];
  int32_t experts[3];
  float weights[3];
  RouteTopK(logits, 5, 3, probs, experts, weights);
  EXPECT_EQ(experts[0], 1);  // a tie goes to the lower index
  EXPECT_EQ(experts[1], 3);
  EXPECT_EQ(experts[2], 4);
  const double e2 = std::exp(2.0), e1 = std::exp(1.0);
  EXPECT_NEAR(weights[0], e2 / (2 * e2 + e1), 1e-6);
  EXPECT_NEAR(weights[2], e1 / (2 * e2 + e1), 1e-6);
}

// DeepSeek-V3's routing (sigmoid, choice bias, groups, scaled weights) and shared expert, on
// ragged batches, against the reference.
TEST(MoeBlockTest, DeepseekRoutingAndSharedExpertMatchTheReference) {
  const int64_t dim = 64, f = 32, n_experts = 8, used = 2;
  for (k::DType type : {k::DType::kF32, k::DType::kQ8_0}) {
    for (const Case& c : std::vector<Case>{
             {type, 1, {0, 0, 0, 0, 0, 0, 0, 0}, "a single token (decode)"},
             {type, 7, {0, 0, 0, 0, -8, -8, 0, 0}, "a group without tokens"},
             {type, 13, {0, 0, 0, 0, 0, 0, 0, 0}, "an unsteered batch"},
         }) {
      SCOPED_TRACE(std::string(c.what) + " " + std::string(k::Traits(type).name));
      TestLayer t(type, dim, f, n_experts, used, c.bias);
      t.hp.gating = HParams::Gating::kSigmoid;
      t.hp.n_expert_groups = 4;
      t.hp.n_expert_groups_used = 2;
      t.hp.expert_weights_norm = true;
      t.hp.expert_weights_scale = 2.5f;
      t.hp.n_shared_experts = 1;
      const std::vector<float> choice_bias = Values(6, n_experts, 0.2f);
      t.L.expert_bias = choice_bias.data();
      const OwnedMatrix sg = Quantized(type, Values(7, f * dim, 0.3f), f, dim);
      const OwnedMatrix su = Quantized(type, Values(8, f * dim, 0.3f), f, dim);
      const OwnedMatrix sd = Quantized(type, Values(9, dim * f, 0.3f), dim, f);
      t.L.shexp_gate = sg.view;
      t.L.shexp_up = su.view;
      t.L.shexp_down = sd.view;
      const std::vector<float> x = Inputs(c.n, dim);
      const std::vector<float> want = NaiveMoe(t.hp, t.L, x, c.n);
      for (int threads : {1, 3}) {
        base::ThreadPool pool(threads);
        k::Workspace ws;
        MoeScratch s;
        s.Allocate(t.hp, 16);
        std::vector<float> y = x;
        ASSERT_TRUE(MoeForward(t.hp, t.L, y.data(), c.n, y.data(), s, ws, pool).ok());
        double scale = 0;
        for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
        ASSERT_GT(scale, 0.0);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_NEAR(y[i], want[i], 1e-4 * scale) << "element " << i << ", threads " << threads;
        }
        // A steered-off group is never chosen.
        for (int64_t p = 0; p < c.n * used; ++p) {
          if (c.bias[4] < 0) {
            EXPECT_NE(s.chosen[p] / 2, 2) << p;
          }
        }
      }
    }
  }
}

TEST(RouteTest, SigmoidBiasGroupsAndScaleMatchTheReference) {
  HParams hp;
  hp.n_experts = 16;
  hp.n_experts_used = 4;
  hp.gating = HParams::Gating::kSigmoid;
  hp.n_expert_groups = 4;
  hp.n_expert_groups_used = 2;
  hp.expert_weights_norm = true;
  hp.expert_weights_scale = 2.5f;
  const std::vector<float> bias = Values(11, hp.n_experts, 0.3f);
  int in_best_groups = 0;
  for (int64_t token = 0; token < 200; ++token) {
    const std::vector<float> logits = Values(100 + token, hp.n_experts, 3.0f);
    std::vector<float> probs(16), select(16), weights(4);
    std::vector<int32_t> experts(4);
    Route(RoutingOf(hp, bias.data()), logits.data(), probs.data(), select.data(), experts.data(),
          weights.data());
    const auto want = NaiveRoute(hp, bias.data(), logits);
    for (int j = 0; j < 4; ++j) {
      ASSERT_EQ(experts[j], want[j].first) << "token " << token << " choice " << j;
      ASSERT_NEAR(weights[j], want[j].second, 1e-6) << "token " << token << " choice " << j;
    }
    float sum = 0;
    for (float w : weights) sum += w;
    EXPECT_NEAR(sum, 2.5f, 1e-5);
    // The groups limit the choice: at most 2 of the 4 groups appear.
    std::vector<bool> seen(4, false);
    for (int32_t e : experts) seen[e / 4] = true;
    in_best_groups += std::count(seen.begin(), seen.end(), true) <= 2;
  }
  EXPECT_EQ(in_best_groups, 200);
}

TEST(MoeBlockTest, Qwen2MoeGatedSharedExpertMatchesTheReference) {
  const int64_t dim = 64, f = 32, sf = 96, n_experts = 8, used = 2;
  for (k::DType type : {k::DType::kF32, k::DType::kQ8_0}) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{13}}) {
      SCOPED_TRACE(std::to_string(n) + " tokens, " + std::string(k::Traits(type).name));
      TestLayer t(type, dim, f, n_experts, used, std::vector<float>(n_experts, 0.0f));
      t.hp.expert_weights_norm = false;
      t.hp.n_shared_experts = 1;
      t.hp.shared_ffn_dim = sf;
      ASSERT_EQ(t.hp.shared_ffn(), sf);
      const OwnedMatrix sg = Quantized(type, Values(7, sf * dim, 0.3f), sf, dim);
      const OwnedMatrix su = Quantized(type, Values(8, sf * dim, 0.3f), sf, dim);
      const OwnedMatrix sd = Quantized(type, Values(9, dim * sf, 0.3f), dim, sf);
      // Logits of a few units: gates spread over (0, 1).
      const std::vector<float> gate_inp = Values(10, dim, 0.6f);
      t.L.shexp_gate = sg.view;
      t.L.shexp_up = su.view;
      t.L.shexp_down = sd.view;
      const std::vector<float> x = Inputs(n, dim);
      LayerWeights ungated = t.L;
      const std::vector<float> plain = NaiveMoe(t.hp, ungated, x, n);
      t.L.shexp_gate_inp = gate_inp.data();
      const std::vector<float> want = NaiveMoe(t.hp, t.L, x, n);
      double scale = 0, gate_effect = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(want[i])));
        gate_effect = std::max(gate_effect, static_cast<double>(std::abs(want[i] - plain[i])));
      }
      ASSERT_GT(scale, 0.0);
      ASSERT_GT(gate_effect, 0.05 * scale);
      for (int threads : {1, 3}) {
        base::ThreadPool pool(threads);
        k::Workspace ws;
        MoeScratch s;
        s.Allocate(t.hp, 16);
        std::vector<float> y = x;  // in place, as the transformer calls it
        ASSERT_TRUE(MoeForward(t.hp, t.L, y.data(), n, y.data(), s, ws, pool).ok());
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_NEAR(y[i], want[i], 1e-4 * scale) << "element " << i << ", threads " << threads;
        }
        // Not renormalised: the k weights are softmax probabilities summing below one.
        for (int64_t i = 0; i < n; ++i) {
          float sum = 0;
          for (int64_t j = 0; j < used; ++j) sum += s.weight[i * used + j];
          EXPECT_LT(sum, 0.999f) << "token " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::model
