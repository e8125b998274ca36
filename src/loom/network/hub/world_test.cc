#include "loom/network/hub/world.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

namespace loom::network::hub::world {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(PseudonymTest, DeterministicShapedAndNotTheId) {
  const std::string id = "node-0123456789abcdef";
  const std::string name = Pseudonym(id);
  EXPECT_EQ(Pseudonym(id), name);  // the same machine keeps its name (across restarts too)
  EXPECT_TRUE(std::regex_match(name, std::regex("[a-z]+-[a-z]+-[0-9]{4}"))) << name;
  EXPECT_THAT(name, Not(HasSubstr("0123456789abcdef")));
  EXPECT_NE(Pseudonym("node-0123456789abcdee"), name);
}

TEST(PseudonymTest, FewCollisionsAcrossAFleet) {
  // 10,000 ids in a space of 64 * 64 * 10,000 names: a handful of collisions at most (the hub
  // gives a colliding later id a suffix).
  std::set<std::string> names;
  for (int i = 0; i < 10000; ++i) names.insert(Pseudonym("node-" + std::to_string(1000000 + i)));
  EXPECT_GE(names.size(), 9990u);
  // Every adjective and animal gets used: the name spreads over the whole space.
  std::set<std::string> adjectives, animals;
  for (const std::string& n : names) {
    adjectives.insert(n.substr(0, n.find('-')));
    animals.insert(n.substr(n.find('-') + 1, n.rfind('-') - n.find('-') - 1));
  }
  EXPECT_EQ(adjectives.size(), 64u);
  EXPECT_EQ(animals.size(), 64u);
}

TEST(MemoryTierTest, RoundsToTheNearestTier) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(MemoryTierGb(0), 0);
  EXPECT_EQ(MemoryTierGb(kGiB / 4), 0);
  EXPECT_EQ(MemoryTierGb(kGiB), 1);
  EXPECT_EQ(MemoryTierGb(7 * kGiB), 8);        // 90% of 8 GB lent
  EXPECT_EQ(MemoryTierGb(14 * kGiB), 16);
  EXPECT_EQ(MemoryTierGb(16 * kGiB), 16);
  EXPECT_EQ(MemoryTierGb(20 * kGiB), 24);
  EXPECT_EQ(MemoryTierGb(60 * kGiB), 64);
  EXPECT_EQ(MemoryTierGb(115 * kGiB), 128);
  EXPECT_EQ(MemoryTierGb(180 * kGiB), 192);
  EXPECT_EQ(MemoryTierGb(500 * kGiB), 512);
  EXPECT_EQ(MemoryTierGb(5000 * kGiB), 5120);
  EXPECT_EQ(MemoryTierGb(-5), 0);
}

TEST(LocationTest, RoundsToWholeDegrees) {
  using protocol::Location;
  EXPECT_EQ(RoundLocation(Location{.lat = 52.52, .lon = 13.405}), (Location{.lat = 53, .lon = 13}));
  EXPECT_EQ(RoundLocation(Location{.lat = -33.87, .lon = 151.21}),
            (Location{.lat = -34, .lon = 151}));
  EXPECT_EQ(RoundLocation(Location{.lat = 90, .lon = 179.6}), (Location{.lat = 90, .lon = -180}));
  EXPECT_EQ(RoundLocation(Location{.lat = -89.9, .lon = -180}),
            (Location{.lat = -90, .lon = -180}));
  // No negative zero in what is shown.
  const Location zero = RoundLocation(Location{.lat = -0.2, .lon = -0.3});
  EXPECT_EQ(nlohmann::json::parse(MachineJson(Machine{.location = zero}))["location"].dump(),
            "[0.0,0.0]");
  EXPECT_THAT(MachineJson(Machine{.location = zero}), HasSubstr("\"location\":[0.0,0.0]"));
  EXPECT_THAT(MachineJson(Machine{.location = Location{.lat = -34, .lon = 151}}),
              HasSubstr("\"location\":[-34.0,151.0]"));
}

TEST(ReliabilityTest, FractionOfTheWindowShortenedToTheEnrolment) {
  const int64_t day = int64_t{86400} * 1000;
  const int64_t now = 100 * day;
  EXPECT_DOUBLE_EQ(*Reliability(15 * day, 0, now), 0.5);          // 15 of the last 30 days
  EXPECT_DOUBLE_EQ(*Reliability(day / 2, now - day, now), 0.5);   // enrolled a day ago
  EXPECT_DOUBLE_EQ(*Reliability(40 * day, 0, now), 1.0);          // clamped
  EXPECT_FALSE(Reliability(0, now, now).has_value());
}

TEST(MachineJsonTest, ShowsThePublicFieldsAndUnknownsAsNull) {
  Machine m;
  m.name = "calm-otter-0042";
  m.state = State::kServing;
  m.chip = "Apple M2 Max";
  m.memory_gb = 64;
  m.models = {"stories260K"};
  m.tokens_per_s = 123.456;
  m.reliability = 0.98765;
  m.tokens_served = 5000;
  m.location = protocol::Location{.lat = 48, .lon = 2};
  m.pod = protocol::PodInfo{.tp = 2, .pp = 2};
  const nlohmann::json j = nlohmann::json::parse(MachineJson(m));
  EXPECT_EQ(j["name"], "calm-otter-0042");
  EXPECT_EQ(j["state"], "serving");
  EXPECT_EQ(j["slot"], "spare");
  EXPECT_EQ(j["memory_gb"], 64);
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 123.5);
  EXPECT_DOUBLE_EQ(j["reliability_30d"].get<double>(), 0.988);
  EXPECT_TRUE(j["verification_pass_rate"].is_null());
  EXPECT_EQ(j["pod"]["ranks"], 4);
  EXPECT_EQ(j["location"].dump(), "[48.0,2.0]");
  EXPECT_EQ(j.size(), 12u);  // nothing else: no id, key, name, address or account

  const nlohmann::json offline = nlohmann::json::parse(MachineJson(Machine{.name = "x"}));
  EXPECT_EQ(offline["state"], "offline");
  EXPECT_TRUE(offline["chip"].is_null());
  EXPECT_TRUE(offline["memory_gb"].is_null());
  EXPECT_TRUE(offline["reliability_30d"].is_null());
  EXPECT_TRUE(offline["location"].is_null());
  EXPECT_TRUE(offline["pod"].is_null());
}

TEST(MachineJsonTest, EscapesWhatNodesReport) {
  Machine m;
  m.name = "n";
  m.chip = "Chip \"X\" \\ \x01 \u00e9";
  m.models = {"a/b", "c\"d"};
  const std::string text = MachineJson(m);
  const nlohmann::json j = nlohmann::json::parse(text);  // valid JSON
  EXPECT_EQ(j["chip"], m.chip);
  EXPECT_EQ(j["models"][1], "c\"d");
  EXPECT_EQ(j["tokens_per_s"].dump(), "0.0");
}

TEST(TotalsJsonTest, CapacityAgainstDemand) {
  Totals t{.machines_online = 3, .machines_serving = 1, .machines_offline = 2,
           .memory_bytes = int64_t{48} << 30, .tokens_per_day = 1234};
  const nlohmann::json j = TotalsJson(
      t, {ModelLine{.name = "m", .holders = 3, .loaded = 2, .tokens_per_s = 10.04,
                    .requests_last_hour = 7, .queued = 1}});
  EXPECT_EQ(j["machines_online"], 3);
  EXPECT_EQ(j["machines_offline"], 2);
  EXPECT_EQ(j["tokens_per_day"], 1234);
  ASSERT_EQ(j["models"].size(), 1u);
  EXPECT_EQ(j["models"][0]["holders"], 3);
  EXPECT_DOUBLE_EQ(j["models"][0]["tokens_per_s"].get<double>(), 10.0);
  EXPECT_EQ(j["models"][0]["requests_last_hour"], 7);
  EXPECT_EQ(j["models"][0]["queued"], 1);
}

}  // namespace
}  // namespace loom::network::hub::world
