#include "loom/text/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <random>
#include <set>
#include <vector>

// Counts heap allocations so that a test can check Sample() makes none.  Test binary only.
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // malloc'd by the operator new above
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace loom::text {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Sampler Make(int64_t vocab, SamplerConfig config) {
  auto s = Sampler::Create(vocab, config);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::vector<float> RandomLogits(std::mt19937_64& rng, int64_t n, float scale = 3.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(static_cast<size_t>(n));
  for (float& l : logits) l = normal(rng);
  // Some exact ties, to check the id tie-break.
  for (int64_t i = 0; i + 7 < n; i += 7)
    logits[static_cast<size_t>(i + 3)] = logits[static_cast<size_t>(i)];
  return logits;
}

// The whole chain by brute force: full sorts, no windows, straight from the documented order.
std::map<int32_t, float> Reference(std::vector<float> logits, const SamplerConfig& c,
                                   const std::vector<int32_t>& history) {
  const int64_t n = static_cast<int64_t>(logits.size());
  for (float& l : logits) {
    if (std::isnan(l)) l = kNegInf;
  }
  if (c.repeat_penalty != 1.0f) {
    std::set<int32_t> recent;
    const size_t from = history.size() > static_cast<size_t>(c.repeat_last_n)
                            ? history.size() - static_cast<size_t>(c.repeat_last_n)
                            : 0;
    for (size_t i = from; i < history.size(); ++i) recent.insert(history[i]);
    for (int32_t t : recent) {
      float& l = logits[static_cast<size_t>(t)];
      l = l > 0 ? l / c.repeat_penalty : l * c.repeat_penalty;
    }
  }
  if (c.temperature <= 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) {
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
    }
    return {{best, 1.0f}};
  }
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)];
    const float lb = logits[static_cast<size_t>(b)];
    return la != lb ? la > lb : a < b;
  });
  if (c.top_k > 0 && c.top_k < n) ids.resize(static_cast<size_t>(c.top_k));
  std::sort(ids.begin(), ids.end());  // the softmax adds in id order
  std::vector<float> scaled(static_cast<size_t>(n));
  float max_l = kNegInf;
  for (int32_t id : ids) {
    scaled[static_cast<size_t>(id)] = logits[static_cast<size_t>(id)] / c.temperature;
    max_l = std::max(max_l, scaled[static_cast<size_t>(id)]);
  }
  std::vector<double> e(static_cast<size_t>(n));
  double sum = 0;
  for (int32_t id : ids) {
    e[static_cast<size_t>(id)] = std::exp(double{scaled[static_cast<size_t>(id)]} - max_l);
    sum += e[static_cast<size_t>(id)];
  }
  std::map<int32_t, float> p;
  float max_p = 0;
  for (int32_t id : ids) {
    p[id] = static_cast<float>(static_cast<double>(static_cast<float>(e[static_cast<size_t>(id)])) /
                               sum);
    max_p = std::max(max_p, p[id]);
  }
  if (c.top_p < 1.0f) {
    // Cumulative probability in exact units of 2^-56, as documented.
    auto mass = [](float prob) { return static_cast<uint64_t>(double{prob} * 0x1p56); };
    std::sort(ids.begin(), ids.end(),
              [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
    const uint64_t target = static_cast<uint64_t>(double{c.top_p} * 0x1p56);
    uint64_t cum = 0;
    size_t keep = ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += mass(p[ids[i]]);
      if (cum >= target) {
        keep = i + 1;
        break;
      }
    }
    for (size_t i = keep; i < ids.size(); ++i) p.erase(ids[i]);
  }
  if (c.min_p > 0.0f) {
    std::map<int32_t, float> kept;
    for (auto [id, prob] : p) {
      if (prob >= c.min_p * max_p) kept[id] = prob;
    }
    p = kept;
  }
  return p;
}

std::map<int32_t, float> AsMap(std::span<const TokenProb> d) {
  std::map<int32_t, float> m;
  for (const TokenProb& t : d) m[t.id] = t.prob;
  return m;
}

TEST(Pcg32Test, MatchesThePublishedSequence) {
  // pcg32-demo from the PCG reference implementation: seed 42, stream 54.
  Pcg32 rng(42, 54);
  const uint32_t want[] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
  for (uint32_t w : want) EXPECT_EQ(rng.Next(), w);
  Pcg32 r2(1);
  for (int i = 0; i < 1000; ++i) {
    const double u = r2.NextDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(SamplerTest, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  Sampler s = Make(6, {.temperature = 0.0f});
  EXPECT_EQ(*s.Sample(std::vector<float>{0, 3, 1, 3, -2, 2}), 1);
  EXPECT_EQ(*s.Sample(std::vector<float>{5, 3, 1, 5, -2, 2}), 0);
  EXPECT_EQ(*s.Sample(std::vector<float>{kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, -1}), 5);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(*s.Sample(std::vector<float>{nan, 1, nan, 2, nan, nan}), 3);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  Sampler s = Make(4, {.temperature = 0.0f, .repeat_penalty = 2.0f, .repeat_last_n = 3});
  // Token 0 (3.0) was seen: 1.5 < token 1 (2.0).
  s.Accept(0);
  s.Accept(0);  // twice, penalized once: still 1.5 (2.25 / ... would differ if applied twice)
  EXPECT_EQ(*s.Sample(std::vector<float>{3.0f, 2.0f, -1.0f, -1.5f}), 1);
  auto d = s.Distribution(std::vector<float>{3.0f, 1.6f, -1.0f, -1.5f});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)[0].id, 1);  // 1.6 > 1.5
  // Negative logits are multiplied: -1.0 * 2 = -2 < -1.5.
  Sampler t = Make(2, {.temperature = 0.0f, .repeat_penalty = 2.0f, .repeat_last_n = 1});
  t.Accept(0);
  EXPECT_EQ(*t.Sample(std::vector<float>{-1.0f, -1.5f}), 1);
  // Only the last repeat_last_n tokens count: 0 has dropped out of the window.
  t.Accept(1);
  EXPECT_EQ(*t.Sample(std::vector<float>{-1.0f, -1.5f}), 0);
  t.ClearHistory();
  EXPECT_EQ(*t.Sample(std::vector<float>{-1.0f, -0.9f}), 1);
  t.Accept(-4);  // ignored
  t.Accept(99);  // ignored
  EXPECT_EQ(*t.Sample(std::vector<float>{-1.0f, -0.9f}), 1);
}

TEST(SamplerTest, TruncationSetsMatchBruteForce) {
  std::mt19937_64 rng(5);
  const SamplerConfig configs[] = {
      {.top_k = 1},
      {.top_k = 5},
      {.temperature = 0.7f, .top_k = 40},
      {.top_p = 0.0f},
      {.top_p = 0.5f},
      {.temperature = 1.3f, .top_p = 0.9f},
      {.top_p = 0.999f},
      {.min_p = 0.05f},
      {.temperature = 0.5f, .min_p = 0.3f},
      {.temperature = 0.9f, .top_k = 50, .top_p = 0.8f, .min_p = 0.02f},
      {.top_k = 20, .top_p = 0.95f, .min_p = 0.1f, .repeat_penalty = 1.3f, .repeat_last_n = 8},
      {.temperature = 0.0f, .repeat_penalty = 1.5f},
  };
  for (const SamplerConfig& base : configs) {
    for (int64_t vocab : {1, 2, 7, 100, 3000, 8000}) {
      for (int trial = 0; trial < 5; ++trial) {
        SamplerConfig c = base;
        Sampler s = Make(vocab, c);
        std::vector<int32_t> history;
        std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
        for (int i = 0; i < 12; ++i) {
          history.push_back(tok(rng));
          s.Accept(history.back());
        }
        const std::vector<float> logits = RandomLogits(rng, vocab, trial % 2 ? 1.0f : 4.0f);
        auto got = s.Distribution(logits);
        ASSERT_TRUE(got.ok());
        const std::map<int32_t, float> want = Reference(logits, c, history);
        const std::map<int32_t, float> have = AsMap(*got);
        for (size_t i = 1; i < got->size(); ++i) ASSERT_LT((*got)[i - 1].id, (*got)[i].id);
        ASSERT_EQ(have.size(), want.size()) << "vocab " << vocab << " top_k " << c.top_k
                                            << " top_p " << c.top_p << " min_p " << c.min_p;
        for (auto [id, p] : want) {
          ASSERT_EQ(have.count(id), 1u) << id;
          EXPECT_NEAR(have.at(id), p, 1e-6f) << id;
        }
      }
    }
  }
}

TEST(SamplerTest, DrawFrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, -3.0f};
  for (const SamplerConfig& c : {SamplerConfig{.temperature = 1.0f, .seed = 9},
                                 SamplerConfig{.temperature = 0.6f, .top_p = 0.9f, .seed = 10}}) {
    Sampler s = Make(8, c);
    auto dist = s.Distribution(logits);
    ASSERT_TRUE(dist.ok());
    std::map<int32_t, double> expected;
    double total = 0;
    for (const TokenProb& t : *dist) total += t.prob;
    for (const TokenProb& t : *dist) expected[t.id] = t.prob / total;
    constexpr int kDraws = 200000;
    std::map<int32_t, int> counts;
    for (int i = 0; i < kDraws; ++i) ++counts[*s.Sample(logits)];
    double chi2 = 0;
    for (auto [id, p] : expected) {
      const double e = p * kDraws;
      const double d = counts[id] - e;
      chi2 += d * d / e;
    }
    for (auto [id, n] : counts) EXPECT_EQ(expected.count(id), 1u) << "drew excluded token " << id;
    // At most 7 degrees of freedom: the 99.9999th percentile is about 40.
    EXPECT_LT(chi2, 40.0) << "temperature " << c.temperature;
  }
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::mt19937_64 rng(1);
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 200; ++i) steps.push_back(RandomLogits(rng, 500, 2.0f));
  auto run = [&](uint64_t seed) {
    Sampler s = Make(500, {.temperature = 0.9f,
                           .top_k = 40,
                           .top_p = 0.95f,
                           .min_p = 0.01f,
                           .repeat_penalty = 1.1f,
                           .seed = seed});
    std::vector<int32_t> out;
    for (const auto& l : steps) {
      out.push_back(*s.Sample(l));
      s.Accept(out.back());
    }
    return out;
  };
  EXPECT_EQ(run(1234), run(1234));
  EXPECT_NE(run(1234), run(1235));
}

TEST(SamplerTest, SampleDoesNotAllocate) {
  std::mt19937_64 rng(2);
  const std::vector<float> logits = RandomLogits(rng, 32000);
  for (const SamplerConfig& c : {SamplerConfig{.temperature = 0.0f, .repeat_penalty = 1.1f},
                                 SamplerConfig{.temperature = 0.8f,
                                 .top_k = 40,
                                 .top_p = 0.95f,
                                 .min_p = 0.05f,
                                 .repeat_penalty = 1.1f},
                                 SamplerConfig{.temperature = 1.0f, .top_p = 0.999f}}) {
    Sampler s = Make(32000, c);
    for (int i = 0; i < 64; ++i) s.Accept(i * 7);
    const int64_t before = g_allocations.load();
    int64_t sum = 0;
    for (int i = 0; i < 20; ++i) {
      auto t = s.Sample(logits);
      sum += t.ok() ? *t : -1;
      s.Accept(static_cast<int32_t>(sum % 32000));
    }
    EXPECT_EQ(g_allocations.load() - before, 0);
    EXPECT_GT(sum, 0);
  }
}

TEST(SamplerTest, RejectsBadConfigurationsAndLogitCounts) {
  EXPECT_FALSE(Sampler::Create(0, {}).ok());
  EXPECT_FALSE(Sampler::Create(10, {.top_k = -1}).ok());
  EXPECT_FALSE(Sampler::Create(10, {.top_p = -0.1f}).ok());
  EXPECT_FALSE(Sampler::Create(10, {.top_p = 1.5f}).ok());
  EXPECT_FALSE(Sampler::Create(10, {.min_p = -0.1f}).ok());
  EXPECT_FALSE(Sampler::Create(10, {.repeat_penalty = 0.0f}).ok());
  EXPECT_FALSE(Sampler::Create(10, {.repeat_last_n = -2}).ok());
  EXPECT_FALSE(Sampler::Create(10, {.temperature = std::numeric_limits<float>::infinity()}).ok());
  Sampler s = Make(10, {});
  auto r = s.Sample(std::vector<float>(9, 0.0f));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("9 logits"), std::string::npos);
}

}  // namespace
}  // namespace loom::text
