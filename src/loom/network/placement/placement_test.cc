#include "loom/network/placement/placement.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace loom::network::placement {
namespace {

constexpr int64_t kGb = 1000 * 1000 * 1000;

// An 8 GB model with 128 KiB of KV per position and a 32k context.
ModelOffer Model(bool loaded, double decode_tps = 40, double prefill_tps = 400) {
  ModelOffer m;
  m.name = "llama-8b";
  m.weight_bytes = 8 * kGb;
  m.kv_bytes_per_token = 128 * 1024;
  m.context = 32768;
  m.loaded = loaded;
  m.decode_tps = decode_tps;
  m.prefill_tps = prefill_tps;
  return m;
}

Target Node(std::string id, int64_t mem_free_gb, ModelOffer model) {
  Target t;
  t.id = std::move(id);
  t.mem_free_bytes = mem_free_gb * kGb;
  t.max_concurrency = 4;
  t.mem_bandwidth_gbps = 800;  // bound for the 8 GB model: 100 tokens/s
  t.models.push_back(std::move(model));
  return t;
}

Request Req(int64_t prompt = 1000, int64_t max_tokens = 500) {
  Request r;
  r.model = "llama-8b";
  r.prompt_tokens = prompt;
  r.max_tokens = max_tokens;
  return r;
}

// "n<i>" (built by appending: GCC 12 warns falsely on "n" + std::to_string(i)).
std::string NumberedId(int i) {
  std::string id = "n";
  id += std::to_string(i);
  return id;
}

Decision PlaceSeeded(const Request& r, const std::vector<Target>& targets, uint64_t seed = 1) {
  std::mt19937_64 random(seed);
  return Place(r, targets, Tuning{}, random);
}

const Candidate* FindCandidate(const Decision& d, const std::string& id) {
  for (const Candidate& c : d.candidates) {
    if (c.target_id == id) return &c;
  }
  return nullptr;
}

TEST(PlacementTest, PicksTheWarmTargetOverAColdOne) {
  const std::vector<Target> targets = {Node("cold", 64, Model(false)),
                                       Node("warm", 64, Model(true))};
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed) << d.detail;
  EXPECT_EQ(d.target_id, "warm");
  ASSERT_EQ(d.candidates.size(), 2u);
  EXPECT_EQ(d.candidates[0].target_id, "warm");
  EXPECT_EQ(d.candidates[0].costs.cold_load_s, 0);
  const Candidate* cold = FindCandidate(d, "cold");
  ASSERT_NE(cold, nullptr);
  EXPECT_TRUE(cold->eligible);
  EXPECT_DOUBLE_EQ(cold->costs.cold_load_s, 2.0 + 8.0);  // fixed + 1 s per GB
}

TEST(PlacementTest, AFasterMeasuredTargetWins) {
  const std::vector<Target> targets = {Node("slow", 64, Model(true, 20, 200)),
                                       Node("fast", 64, Model(true, 60, 600))};
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "fast");
  EXPECT_NEAR(d.candidates[0].costs.decode_s, 500.0 / 60, 1e-9);
  EXPECT_NEAR(d.candidates[0].costs.prefill_s, 1000.0 / 600, 1e-9);
  EXPECT_EQ(d.candidates[0].speed_source, "measured");
}

TEST(PlacementTest, RunningLoadSlowsATargetDown) {
  Target busy_fast = Node("busy-fast", 64, Model(true, 60, 600));
  busy_fast.running = 3;  // 60 / (1 + 0.81) = 33 tokens/s, plus a queue
  const Target idle_slow = Node("idle-slow", 64, Model(true, 40, 400));
  const Decision d = PlaceSeeded(Req(), {busy_fast, idle_slow});
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "idle-slow");
  const Candidate* busy = FindCandidate(d, "busy-fast");
  ASSERT_NE(busy, nullptr);
  EXPECT_NEAR(busy->decode_tps, 60 / (1 + 0.27 * 3), 1e-9);
  const double decode_s = 500 / (60 / (1 + 0.27 * 3));
  EXPECT_NEAR(busy->costs.decode_s, decode_s, 1e-9);
  EXPECT_NEAR(busy->costs.queue_s, 3.0 / 4 * decode_s, 1e-9);
}

TEST(PlacementTest, AModelTooBigForOneNodeGoesToANodeWithMemory) {
  const std::vector<Target> targets = {Node("small", 8, Model(false)),
                                       Node("big", 16, Model(false))};
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "big");
  const Candidate* small = FindCandidate(d, "small");
  ASSERT_NE(small, nullptr);
  EXPECT_FALSE(small->eligible);
  // 8 GB of weights + 1500 x 128 KiB of KV; 8 GB x 0.95 usable.
  EXPECT_EQ(small->rejected, "needs 8.2 GB, 7.6 GB free (after the 5% reserve)");
}

TEST(PlacementTest, LoadedWeightsNeedNoFreeMemory) {
  // mem_free does not count loaded models: a warm 8 GB model on a node with 1 GB free still fits
  // a small KV cache.
  const Decision d = PlaceSeeded(Req(), {Node("warm", 1, Model(true))});
  EXPECT_TRUE(d.placed) << d.detail;
}

TEST(PlacementTest, AModelTooBigForEveryNodeGoesToAPodWhoseSummedMemoryFits) {
  Target pod = Node("pod", 12, Model(false, 0, 0));  // 2 ranks x 6 GB
  pod.ranks = 2;
  const std::vector<Target> targets = {Node("a", 6, Model(false)), Node("b", 7, Model(false)), pod};
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed) << d.detail;
  EXPECT_EQ(d.target_id, "pod");
  // Unmeasured on the pod: 0.5 x 800 GB/s / (8 GB / 2 ranks) = 100 tokens/s, prefill 10x.
  EXPECT_EQ(d.candidates[0].speed_source, "estimated");
  EXPECT_NEAR(d.candidates[0].decode_tps, 100, 1e-9);
  EXPECT_NEAR(d.candidates[0].prefill_tps, 1000, 1e-9);
}

TEST(PlacementTest, APodMustFitItsPerRankShare) {
  // 2 ranks x 4.2 GB: the per-rank share (4 GB of weights + KV) does not fit 4.2 x 0.95.
  Target pod = Node("pod", 0, Model(false));
  pod.ranks = 2;
  pod.mem_free_bytes = int64_t{8400} * 1000 * 1000;
  const Decision d = PlaceSeeded(Req(), {pod});
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.reason, "no_node_for_model");
  ASSERT_EQ(d.candidates.size(), 1u);
  EXPECT_EQ(d.candidates[0].rejected,
            "needs 4.1 GB per rank, 3.99 GB free per rank of 2 (after the 5% reserve)");
  // With 4.5 GB per rank it fits.
  pod.mem_free_bytes = 9 * kGb;
  EXPECT_TRUE(PlaceSeeded(Req(), {pod}).placed);
}

TEST(PlacementTest, ExcludedTargetsAreSkipped) {
  const std::vector<Target> targets = {Node("best", 64, Model(true, 80, 800)),
                                       Node("other", 64, Model(true, 20, 200))};
  Request r = Req();
  r.exclude = {"best"};
  const Decision d = PlaceSeeded(r, targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "other");
  const Candidate* best = FindCandidate(d, "best");
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->rejected, "excluded (failed this job)");

  r.exclude = {"best", "other"};
  const Decision none = PlaceSeeded(r, targets);
  EXPECT_FALSE(none.placed);
  EXPECT_EQ(none.reason, "no_node_for_model");
}

TEST(PlacementTest, UnavailableTargetsAreSkippedWithTheirReason) {
  std::vector<Target> targets;
  targets.push_back(Node("suspect", 64, Model(true, 90)));
  targets.back().state = TargetState::kSuspect;
  targets.push_back(Node("offline", 64, Model(true, 90)));
  targets.back().state = TargetState::kOffline;
  targets.push_back(Node("draining", 64, Model(true, 90)));
  targets.back().draining = true;
  targets.push_back(Node("paused", 64, Model(true, 90)));
  targets.back().paused = true;
  targets.push_back(Node("full", 64, Model(true, 90)));
  targets.back().running = 4;
  targets.push_back(Node("ok", 64, Model(true, 10)));
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "ok");
  EXPECT_EQ(d.holders, 6);
  EXPECT_EQ(d.eligible, 1);
  EXPECT_EQ(FindCandidate(d, "suspect")->rejected, "suspect (heartbeat late)");
  EXPECT_EQ(FindCandidate(d, "offline")->rejected, "offline");
  EXPECT_EQ(FindCandidate(d, "draining")->rejected, "draining");
  EXPECT_EQ(FindCandidate(d, "paused")->rejected, "paused");
  EXPECT_EQ(FindCandidate(d, "full")->rejected, "at concurrency 4/4");
  EXPECT_EQ(d.candidates[0].target_id, "ok");
}

TEST(PlacementTest, NoNodeForModelWhenNobodyHoldsItOrNobodyCouldFitIt) {
  ModelOffer other = Model(true);
  other.name = "qwen-7b";
  const Decision none = PlaceSeeded(Req(), {Node("a", 64, other)});
  EXPECT_FALSE(none.placed);
  EXPECT_EQ(none.reason, "no_node_for_model");
  EXPECT_TRUE(none.candidates.empty());  // only holders are candidates

  // Idle and still too small: it will never fit.
  const Decision tiny = PlaceSeeded(Req(), {Node("tiny", 4, Model(false))});
  EXPECT_EQ(tiny.reason, "no_node_for_model");

  // The context is the consumer's error.
  const Decision context = PlaceSeeded(Req(30000, 5000), {Node("a", 64, Model(true))});
  EXPECT_FALSE(context.placed);
  EXPECT_EQ(context.reason, "no_node_for_model");
  EXPECT_NE(context.detail.find("context"), std::string::npos) << context.detail;
  EXPECT_NE(context.candidates[0].rejected.find("context 32768"), std::string::npos);
}

TEST(PlacementTest, OverCapacityWhenSomeCouldButNoneCanNow) {
  Target full = Node("full", 64, Model(true));
  full.running = 4;
  Target suspect = Node("suspect", 64, Model(true));
  suspect.state = TargetState::kSuspect;
  Target busy_small = Node("busy-small", 4, Model(false));  // short of memory while running
  busy_small.running = 1;
  const Decision d = PlaceSeeded(Req(), {full, suspect, busy_small});
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.reason, "over_capacity");
  EXPECT_EQ(d.candidates.size(), 3u);

  // A busy target short of memory may free it: over capacity, not no node.
  EXPECT_EQ(PlaceSeeded(Req(), {busy_small}).reason, "over_capacity");
}

TEST(PlacementTest, NearTiesGoToTheShorterQueue) {
  // With max_tokens 0 there is no decode or queue time: the totals are the prompts' times, and b
  // is 1% slower (within 2%) but has no queue while a has two waiting.
  Target a = Node("a", 64, Model(true, 40, 400));
  a.waiting = 2;
  const Target b = Node("b", 64, Model(true, 40, 396));
  const Decision d = PlaceSeeded(Req(1000, 0), {a, b});
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "b");
}

TEST(PlacementTest, ExactTiesAreBrokenAtRandom) {
  const std::vector<Target> targets = {Node("a", 64, Model(true)), Node("b", 64, Model(true))};
  std::set<std::string> winners;
  for (uint64_t seed = 0; seed < 64; ++seed)
    winners.insert(PlaceSeeded(Req(), targets, seed).target_id);
  EXPECT_EQ(winners, (std::set<std::string>{"a", "b"}));
  // The same seed gives the same answer.
  EXPECT_EQ(PlaceSeeded(Req(), targets, 7).target_id, PlaceSeeded(Req(), targets, 7).target_id);
}

TEST(PlacementTest, AnAbsurdClaimedSpeedIsClampedToTheBandwidthBound) {
  // 800 GB/s over 8 GB of weights: at most 100 tokens/s, whatever was measured.
  const std::vector<Target> targets = {Node("liar", 64, Model(true, 5000, 5000)),
                                       Node("honest", 64, Model(true, 95, 5000))};
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "liar");  // still the faster one, but only by the bound
  EXPECT_EQ(d.candidates[0].speed_source, "clamped");
  EXPECT_NEAR(d.candidates[0].decode_tps, 100, 1e-9);
  EXPECT_NEAR(d.candidates[0].costs.decode_s, 5.0, 1e-9);
}

TEST(PlacementTest, CandidatesAreBoundedBestFirstThenRejects) {
  std::vector<Target> targets;
  // Each 5% faster than the one before (no near ties, no bandwidth bound); odd ones offline.
  double speed = 10;
  for (int i = 0; i < 100; ++i, speed *= 1.05) {
    targets.push_back(Node(NumberedId(i), 64, Model(true, speed)));
    targets.back().mem_bandwidth_gbps = 0;
    if (i % 2 == 1) targets.back().state = TargetState::kOffline;
  }
  const Decision d = PlaceSeeded(Req(0, 500), targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "n98");
  EXPECT_EQ(d.holders, 100);
  EXPECT_EQ(d.eligible, 50);
  ASSERT_EQ(d.candidates.size(), static_cast<size_t>(kMaxCandidates));
  for (size_t i = 1; i < 50; ++i) {
    ASSERT_TRUE(d.candidates[i].eligible);
    EXPECT_LE(d.candidates[i - 1].costs.total_s, d.candidates[i].costs.total_s);
  }
  for (size_t i = 50; i < d.candidates.size(); ++i) {
    EXPECT_FALSE(d.candidates[i].eligible);
    EXPECT_EQ(d.candidates[i].rejected, "offline");
  }
}

TEST(PlacementTest, DecisionToJsonHasEveryCandidateWithItsCosts) {
  Target offline = Node("offline", 64, Model(true));
  offline.state = TargetState::kOffline;
  const std::vector<Target> targets = {Node("warm", 64, Model(true)),
                                       Node("cold", 64, Model(false)), offline};
  const Decision d = PlaceSeeded(Req(), targets);
  const nlohmann::json j = DecisionToJson(d);
  EXPECT_EQ(j.at("placed"), true);
  EXPECT_EQ(j.at("target_id"), "warm");
  EXPECT_EQ(j.at("holders"), 3);
  EXPECT_EQ(j.at("eligible"), 2);
  ASSERT_EQ(j.at("candidates").size(), 3u);
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const nlohmann::json& c = j.at("candidates")[i];
    EXPECT_EQ(c.at("target_id"), d.candidates[i].target_id);
    EXPECT_EQ(c.at("eligible"), d.candidates[i].eligible);
    EXPECT_EQ(c.at("rejected"), d.candidates[i].rejected);
    const nlohmann::json& costs = c.at("costs");
    EXPECT_DOUBLE_EQ(costs.at("cold_load_s").get<double>(), d.candidates[i].costs.cold_load_s);
    EXPECT_DOUBLE_EQ(costs.at("queue_s").get<double>(), d.candidates[i].costs.queue_s);
    EXPECT_DOUBLE_EQ(costs.at("prefill_s").get<double>(), d.candidates[i].costs.prefill_s);
    EXPECT_DOUBLE_EQ(costs.at("decode_s").get<double>(), d.candidates[i].costs.decode_s);
    EXPECT_DOUBLE_EQ(costs.at("total_s").get<double>(), d.candidates[i].costs.total_s);
  }
  EXPECT_EQ(j.at("candidates")[1].at("costs").at("cold_load_s"), 10.0);
  EXPECT_EQ(j.at("candidates")[2].at("rejected"), "offline");
}

TEST(PlacementTest, AHolderIndexGivesTheSameDecisionAsTheFullScan) {
  std::mt19937_64 rng(3);
  std::vector<Target> targets;
  std::vector<int32_t> holders;
  for (int i = 0; i < 300; ++i) {
    ModelOffer m = Model(rng() % 2 == 0, 10 + static_cast<double>(rng() % 50));
    if (rng() % 3 == 0) m.name = "other-model";
    targets.push_back(Node(NumberedId(i), 4 + static_cast<int64_t>(rng() % 40), m));
    targets.back().running = static_cast<int32_t>(rng() % 5);
    targets.back().waiting = static_cast<int32_t>(rng() % 3);
    if (rng() % 10 == 0) targets.back().state = TargetState::kSuspect;
    if (m.name == "llama-8b") holders.push_back(i);
  }
  for (int64_t max_tokens : {0, 100, 2000}) {
    const Decision full = PlaceSeeded(Req(500, max_tokens), targets, 9);
    std::mt19937_64 random(9);
    const Decision indexed = Place(Req(500, max_tokens), targets, holders, Tuning{}, random);
    EXPECT_EQ(DecisionToJson(full), DecisionToJson(indexed));
  }
  // A stale index: out of range, or a target that does not list the model, is skipped.
  const std::vector<int32_t> stale = {-1, 0, 1, 2, 100000};
  std::mt19937_64 random(1);
  const Decision d = Place(Req(), targets, stale, Tuning{}, random);
  int32_t listed = 0;
  for (int i = 0; i < 3; ++i)
    listed += targets[static_cast<size_t>(i)].models[0].name == "llama-8b";
  EXPECT_EQ(d.holders, listed);
}

}  // namespace
}  // namespace loom::network::placement

namespace loom::network::placement {
namespace {

TEST(PlaceTest, AReservedSlotGoesFirstEvenWhenASpareTargetIsFaster) {
  ModelOffer slow = Model(true, 20);
  slow.reserved = true;
  std::vector<Target> targets = {Node("spare", 64, Model(true, 80)), Node("slot", 64, slow)};
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "slot");
  EXPECT_NE(d.detail.find("reserved slot"), std::string::npos) << d.detail;
  // The spare target stays a candidate, after it.
  ASSERT_EQ(d.candidates.size(), 2u);
  EXPECT_EQ(d.candidates[1].target_id, "spare");
  EXPECT_TRUE(d.candidates[1].eligible);
}

TEST(PlaceTest, ABusyReservedSlotLeavesTheRequestToSpareTargets) {
  ModelOffer reserved = Model(true, 80);
  reserved.reserved = true;
  std::vector<Target> targets = {Node("spare", 64, Model(true, 20)), Node("slot", 64, reserved)};
  targets[1].running = targets[1].max_concurrency;  // full
  const Decision d = PlaceSeeded(Req(), targets);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.target_id, "spare");
}

TEST(PlaceTest, AmongReservedSlotsTheFastestWins) {
  ModelOffer a = Model(true, 30), b = Model(true, 60);
  a.reserved = b.reserved = true;
  std::vector<Target> targets = {Node("a", 64, a), Node("b", 64, b),
                                 Node("spare", 64, Model(true, 90))};
  EXPECT_EQ(PlaceSeeded(Req(), targets).target_id, "b");
}

}  // namespace
}  // namespace loom::network::placement
