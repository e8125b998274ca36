#include "loom/network/verify/verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace loom::network::verify {
namespace {

TEST(VerifyTest, SamplingIsDeterministicPerSeedAndKeyed) {
  for (int i = 0; i < 100; ++i) {
    const std::string id = "cmpl-" + std::to_string(i) + "-1";
    EXPECT_EQ(SampleValue("seed-a", id), SampleValue("seed-a", id));
    const double v = SampleValue("seed-a", id);
    EXPECT_GE(v, 0.0);
    EXPECT_LT(v, 1.0);
    EXPECT_EQ(Sampled("seed-a", id, v), false);  // strictly below the rate
    EXPECT_EQ(Sampled("seed-a", id, std::nextafter(v, 2.0)), true);
  }
  // Another seed decides differently: of 1000 ids at rate 1/2, the two seeds disagree on about
  // half (a node that learned one hub's decisions learns nothing of another's).
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "att-" + std::to_string(i);
    differ += Sampled("seed-a", id, 0.5) != Sampled("seed-b", id, 0.5);
  }
  EXPECT_GT(differ, 400);
  EXPECT_LT(differ, 600);
  EXPECT_FALSE(Sampled("s", "x", 0.0));
  EXPECT_TRUE(Sampled("s", "x", 1.0));
}

TEST(VerifyTest, SamplingRespectsTheRate) {
  for (double rate : {0.02, 0.1, 0.5, 0.9}) {
    const int n = 20000;
    int hits = 0;
    for (int i = 0; i < n; ++i) hits += Sampled("hub-seed", "cmpl-x" + std::to_string(i), rate);
    // Binomial: within 5 standard deviations of n * rate.
    const double sd = std::sqrt(n * rate * (1 - rate));
    EXPECT_NEAR(hits, n * rate, 5 * sd) << "rate " << rate;
  }
}

TEST(VerifyTest, RateFallsWithPassesToTheFloorAndResetsOnAFailure) {
  RateConfig c;
  store::NodeReputation r;
  EXPECT_DOUBLE_EQ(CheckRate(r, c), 0.5);
  double last = CheckRate(r, c);
  for (int i = 0; i < 40; ++i) {
    EXPECT_FALSE(Record(&r, true, 1000 + i, c));
    const double now = CheckRate(r, c);
    EXPECT_LE(now, last);
    EXPECT_GE(now, c.floor);
    last = now;
  }
  EXPECT_DOUBLE_EQ(last, c.floor);
  EXPECT_EQ(r.checks_passed, 40);
  EXPECT_EQ(r.streak, 40);
  EXPECT_EQ(r.last_result, "passed");
  EXPECT_FALSE(Record(&r, false, 2000, c));
  EXPECT_DOUBLE_EQ(CheckRate(r, c), 0.5);
  EXPECT_EQ(r.streak, 0);
  EXPECT_EQ(r.last_result, "failed");
  EXPECT_EQ(r.checks_failed, 1);
}

TEST(VerifyTest, RepeatedFailuresInAWindowMakeANodeUntrusted) {
  RateConfig c;
  c.failure_window_ms = 1000;
  store::NodeReputation r;
  // Two failures, then the window passes: the count starts over.
  EXPECT_FALSE(Record(&r, false, 0, c));
  EXPECT_FALSE(Record(&r, false, 500, c));
  EXPECT_FALSE(Record(&r, false, 5000, c));
  EXPECT_EQ(r.window_failures, 1);
  EXPECT_FALSE(r.untrusted);
  EXPECT_FALSE(Record(&r, true, 5100, c));  // a pass between does not clear the window
  EXPECT_FALSE(Record(&r, false, 5200, c));
  EXPECT_TRUE(Record(&r, false, 5300, c));  // the third in 1 s
  EXPECT_TRUE(r.untrusted);
  EXPECT_EQ(r.untrusted_ms, 5300);
  EXPECT_DOUBLE_EQ(CheckRate(r, c), 1.0);
  EXPECT_FALSE(Record(&r, false, 5400, c));  // already untrusted: not news
}

TEST(VerifyTest, GreedyTokensMustBeTheArgmaxUpToATie) {
  Thresholds t;
  Verdict ok = Compare(true, 0, {-0.1, -2.0, -0.7}, {-0.1, -1.97, -0.7}, t);
  EXPECT_TRUE(ok.passed) << ok.reason;
  EXPECT_EQ(ok.mismatches, 0);
  Verdict bad = Compare(true, 0, {-0.1, -3.0, -0.7}, {-0.1, -1.0, -0.7}, t);
  EXPECT_FALSE(bad.passed);
  EXPECT_EQ(bad.mismatches, 1);
  EXPECT_NE(bad.reason.find("at 1"), std::string::npos) << bad.reason;
  // The same scores under sampling are plausible.
  EXPECT_TRUE(Compare(false, 1.0, {-0.1, -3.0, -0.7}, {-0.1, -1.0, -0.7}, t).passed);
  // Scores that do not cover the tokens fail; no tokens pass.
  EXPECT_FALSE(Compare(true, 0, {-0.1}, {}, t).passed);
  EXPECT_TRUE(Compare(true, 0, {}, {}, t).passed);
}

TEST(VerifyTest, SampledTokensMustBePlausible) {
  Thresholds t;
  // Honest sampling: mostly likely tokens, an occasional unlikely one.
  std::vector<double> honest(32, -1.5), best(32, -0.5);
  honest[7] = -12;
  Verdict v = Compare(false, 1.0, honest, best, t);
  EXPECT_TRUE(v.passed) << v.reason;
  EXPECT_NEAR(v.mean_logprob, (31 * -1.5 - 12) / 32, 1e-12);
  EXPECT_DOUBLE_EQ(v.min_logprob, -12);
  // Random tokens: far below the mean threshold.
  std::vector<double> random(32, -9.0);
  Verdict r = Compare(false, 1.0, random, best, t);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.reason.find("mean"), std::string::npos) << r.reason;
  // At temperature 2 the thresholds double: -9 a token is plausible then.
  EXPECT_TRUE(Compare(false, 2.0, random, best, t).passed);
  // Too few tokens for a mean: only the minimum applies.
  EXPECT_TRUE(
      Compare(false, 1.0, std::vector<double>(4, -9.0), std::vector<double>(4, 0), t).passed);
  // One impossible token fails however short.
  Verdict one = Compare(false, 1.0, {-0.5, -40}, {-0.5, -0.1}, t);
  EXPECT_FALSE(one.passed);
  EXPECT_NE(one.reason.find("log-probability -40"), std::string::npos) << one.reason;
}

TEST(VerifyTest, DecodingOfARequest) {
  using nlohmann::json;
  EXPECT_TRUE(DecodingOf(json{{"temperature", 0}}).greedy);
  EXPECT_TRUE(DecodingOf(json{{"top_p", 0}}).greedy);
  EXPECT_FALSE(DecodingOf(json::object()).greedy);  // OpenAI's default temperature is 1
  EXPECT_DOUBLE_EQ(DecodingOf(json::object()).temperature, 1.0);
  EXPECT_FALSE(DecodingOf(json{{"temperature", 0}, {"repetition_penalty", 1.3}}).greedy);
  EXPECT_DOUBLE_EQ(DecodingOf(json{{"temperature", 0.7}}).temperature, 0.7);
}

}  // namespace
}  // namespace loom::network::verify
