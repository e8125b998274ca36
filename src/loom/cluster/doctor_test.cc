// `loom doctor`'s logic without a terminal, a daemon or a measurement: the chip table, the
// sections built from given facts and a given daemon view, and the model advice on a synthetic
// model whose best split is tensor parallel on fast links and a pipeline on slow ones.
#include "loom/cluster/doctor.h"

#include <gtest/gtest.h>

#include <sstream>

#include "loom/model/synth.h"
#include "loom/parallel/plan.h"

namespace loom::cluster {
namespace {

using json = nlohmann::json;

TEST(DoctorChipTest, ThunderboltFiveAndRdmaOnlyWhereTheTableSays) {
  struct Case {
    const char* name;
    const char* chip;
    int thunderbolt;
    bool rdma;
    bool in_table;
  };
  for (const Case& c : {
           Case{"Apple M4 Max", "Apple M4 Max", 5, true, true},
           Case{"Apple M4 Pro", "Apple M4 Pro", 5, true, true},
           Case{"Apple M3 Ultra", "Apple M3 Ultra", 5, true, true},
           Case{"apple m5 pro", "Apple M5 Pro", 5, true, true},
           Case{"M5 Max", "Apple M5 Max", 5, true, true},
           Case{"Apple M4", "Apple M4", 4, false, true},
           Case{"Apple M3 Max", "Apple M3 Max", 4, false, true},
           Case{"Apple M2 Ultra", "Apple M2 Ultra", 4, false, true},
           Case{"Apple M1", "Apple M1", 4, false, true},
           Case{"Apple M5", "Apple M5", 4, false, true},
           // Not in the table: the family rule (Pro/Max/Ultra from the M3 Ultra on: Thunderbolt 5).
           Case{"Apple M7 Ultra", "Apple M7 Ultra", 5, true, false},
           Case{"Apple M4 Ultra", "Apple M4 Ultra", 5, true, false},
           Case{"Apple M9", "Apple M9", 4, false, false},
           Case{"Apple M4 Max (16 cores)", "Apple M4 Max", 5, true, true},
       }) {
    const AppleChip chip = LookupAppleChip(c.name);
    EXPECT_EQ(chip.chip, c.chip) << c.name;
    EXPECT_EQ(chip.thunderbolt, c.thunderbolt) << c.name;
    EXPECT_EQ(chip.rdma, c.rdma) << c.name;
    EXPECT_EQ(chip.in_table, c.in_table) << c.name;
  }
  EXPECT_EQ(LookupAppleChip("Apple M3 Ultra").memory_gbytes_per_s, 819);
  EXPECT_EQ(LookupAppleChip("Apple M4 Max").memory_note, "410 / 546 GB/s by bin");
}

TEST(DoctorChipTest, UnknownChipsAreUnknown) {
  for (const char* name : {"Apple A17 Pro", "Apple M4 Maxx", "Apple M4X", "AMD EPYC 9B45",
                           "Intel(R) Xeon(R) Platinum 8481C", "", "Apple", "M", "Apple M0"}) {
    const AppleChip chip = LookupAppleChip(name);
    EXPECT_EQ(chip.thunderbolt, 0) << name;
    EXPECT_FALSE(chip.rdma) << name;
    EXPECT_FALSE(chip.in_table) << name;
    EXPECT_TRUE(chip.chip.empty()) << name;
    const json section = ChipSection(chip, /*given=*/true, {});
    EXPECT_FALSE(section["known"].get<bool>());
    EXPECT_TRUE(section["thunderbolt"].is_null());
    EXPECT_NE(section["advice"][0].get<std::string>().find("does not know"), std::string::npos);
  }
  EXPECT_TRUE(IsAppleName("Apple M4"));
  EXPECT_FALSE(IsAppleName("AMD EPYC 9B45"));
}

TEST(DoctorChipTest, MacOsVersionFromUnameAndWhetherRdmaIsPossible) {
  EXPECT_EQ(MacOsFromUname("Darwin 25.2.0 arm64").major, 26);
  EXPECT_EQ(MacOsFromUname("Darwin 25.2.0 arm64").minor, 2);
  EXPECT_EQ(MacOsFromUname("Darwin 24.4.0 arm64").major, 15);
  EXPECT_EQ(MacOsFromUname("Darwin 24.4.0 arm64").minor, 4);
  EXPECT_EQ(MacOsFromUname("Linux 6.1.0 x86_64").major, 0);
  auto advice = [](MacOsVersion v) {
    std::string all;
    const json section = ChipSection(LookupAppleChip("Apple M4 Pro"), false, v);
    for (const json& a : section["advice"]) {
      all += a.get<std::string>() + "\n";
    }
    return all;
  };
  EXPECT_NE(advice({26, 1}).find("needs macOS 26.2 or later"), std::string::npos);
  EXPECT_NE(advice({26, 2}).find("new enough for RDMA"), std::string::npos);
  // A chip named with --chip says nothing about this machine's macOS.
  const json given = ChipSection(LookupAppleChip("Apple M4 Pro"), true, {26, 1});
  EXPECT_FALSE(given.contains("macos"));
  EXPECT_EQ(given["source"], "--chip");
}

TEST(DoctorChipTest, AdviceSaysWhatThunderboltMeansForTensorParallelism) {
  const json tb5 = ChipSection(LookupAppleChip("Apple M3 Ultra"), true, {});
  const json tb4 = ChipSection(LookupAppleChip("Apple M4"), true, {});
  EXPECT_TRUE(tb5["rdma_capable"].get<bool>());
  EXPECT_EQ(tb5["thunderbolt"], 5);
  EXPECT_FALSE(tb4["rdma_capable"].get<bool>());
  EXPECT_EQ(tb4["thunderbolt"], 4);
  EXPECT_NE(tb5["advice"][0].get<std::string>().find("Thunderbolt 5"), std::string::npos);
  EXPECT_NE(tb4["advice"][0].get<std::string>().find("no RDMA"), std::string::npos);
  for (const json* s : {&tb5, &tb4}) {
    bool says = false;
    for (const json& a : (*s)["advice"]) {
      says = says || a.get<std::string>().find("over TCP links prefer a pipeline split") !=
                         std::string::npos;
    }
    EXPECT_TRUE(says) << s->dump();
  }
}

TEST(DoctorMachineTest, RdmaDevicesOrTcp) {
  Facts f;
  f.name = "m";
  f.cores = 4;
  f.read_bytes_per_s = 20e9;
  json none = MachineSection(f, 40e9);
  EXPECT_EQ(none["advice"][0],
            "RDMA devices: none: tensor parallelism between machines will use TCP.");
  EXPECT_DOUBLE_EQ(none["read_gbytes_per_s"]["all_cores"].get<double>(), 40);
  // 40 GB/s over a 10 GB model: 4 tokens/s at most.
  EXPECT_NE(none["advice"][1].get<std::string>().find("at most 4.0 tokens/s"), std::string::npos);
  f.rdma = {"mlx5_0"};
  EXPECT_NE(MachineSection(f, 0)["advice"][0].get<std::string>().find("mlx5_0"), std::string::npos);
}

json Link(const std::string& a, const std::string& b, const std::string& interface,
          double latency_us, double gbytes_per_s) {
  return {{"a", a},
          {"b", b},
          {"a_name", "n" + a},
          {"b_name", "n" + b},
          {"a_host", "10.0.0.1"},
          {"b_host", "10.0.0.2"},
          {"interface", interface},
          {"latency_us", latency_us},
          {"gbytes_per_s", gbytes_per_s}};
}

TEST(DoctorClusterTest, NoDaemonSaysHowToStartOne) {
  const json c = ClusterSection(UnavailableError("no daemon"), "/run/x.sock");
  EXPECT_FALSE(c["daemon"].get<bool>());
  const std::string advice = c["advice"][0];
  EXPECT_NE(advice.find("/run/x.sock"), std::string::npos);
  EXPECT_NE(advice.find("loom cluster join --secret"), std::string::npos);
}

TEST(DoctorClusterTest, LinksByPairWithTheFastestMarked) {
  const json slow = Link("aa11", "bb22", "eth0", 300, 0.1);
  const json fast = Link("aa11", "bb22", "tb0", 40, 2.0);
  const json other = Link("aa11", "cc33", "eth0", 120, 1.0);
  const json third = Link("bb22", "cc33", "eth0", 80, 1.0);
  const json view = {
      {"v", 1},
      {"id", "aa11"},
      {"name", "naa11"},
      {"members",
       json::array(
           {{{"id", "aa11"},
             {"name", "naa11"},
             {"state", "self"},
             {"facts", {{"cores", 8}, {"read_gbytes_per_s", 30.0}}}},
            {{"id", "bb22"}, {"name", "nbb22"}, {"state", "up"}, {"address", "10.0.0.2"}},
            {{"id", "cc33"}, {"name", "ncc33"}, {"state", "up"}, {"address", "10.0.0.3"}}})},
      {"links", json::array({slow, fast, other, third})},
      {"fastest", json::array({fast, other, third})},
      {"probing", false},
      {"probes_pending", 0},
      {"departed", json::array()},
      {"refused_by", {{"10.0.0.9:7470", "wrong secret"}}}};
  const json c = ClusterSection(view, "/run/x.sock");
  ASSERT_TRUE(c["daemon"].get<bool>());
  EXPECT_EQ(c["members"].size(), 3u);
  ASSERT_EQ(c["pairs"].size(), 3u);
  const json& ab = c["pairs"][0];
  EXPECT_EQ(ab["links"].size(), 2u);
  EXPECT_EQ(ab["fastest"]["interface"], "tb0");
  EXPECT_FALSE(ab["links"][0]["fastest"].get<bool>());
  EXPECT_TRUE(ab["links"][1]["fastest"].get<bool>());
  EXPECT_FALSE(c["measuring"].get<bool>());
  std::string all;
  for (const json& a : c["advice"]) all += a.get<std::string>() + "\n";
  EXPECT_NE(all.find("slowest pair is naa11 and ncc33: 120 us"), std::string::npos) << all;
  EXPECT_NE(all.find("wrong secret"), std::string::npos) << all;
  EXPECT_EQ(all.find("still being measured"), std::string::npos) << all;
  // A pair without a measured link yet: the advice says to come back.
  json partial = view;
  partial["fastest"].erase(2);
  partial["links"].erase(3);
  const json p = ClusterSection(partial, "/run/x.sock");
  EXPECT_NE(p["advice"][0].get<std::string>().find("still being measured (2 of 3 pairs done)"),
            std::string::npos)
      << p.dump();
}

TEST(DoctorClusterTest, AnAnswerOfTheWrongShapeDoesNotThrow) {
  const json c = ClusterSection(json{{"members", 3}, {"links", json::array({1, "x"})}}, "/s");
  EXPECT_TRUE(c["daemon"].get<bool>());
  EXPECT_TRUE(c["members"].empty());
}

// The synthetic "tiny" shape (5 layers, 8 heads over 4 KV heads).
class DoctorModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model::SynthOptions o;
    o.shape = *model::FindSynthShape("tiny");
    o.threads = 1;
    ASSERT_TRUE(model::WriteSynthModelToMemory(o, &bytes_).ok());
    auto file = model::OpenModelFromBytes(bytes_, "tiny.gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    file_ = std::move(*file);
    parallel::PlanRequest whole;
    whole.context = kContext;
    auto one = parallel::MakePlan(*file_, whole);
    ASSERT_TRUE(one.ok());
    need_ = one->rank(0).weight_bytes + one->rank(0).kv_bytes;
  }

  // Two ranks of 10 GB/s that each hold 80% of the model: one machine is not enough.
  ModelAdviceInputs Inputs(double latency_us) const {
    ModelAdviceInputs in;
    in.model = "tiny.gguf";
    in.cost.ranks = 2;
    in.cost.context = kContext;
    in.cost.rank.decode_bytes_per_s = 10e9;
    in.cost.rank.prompt_flops = 50e9;
    in.cost.rank.memory_bytes = need_ * 8 / 10;
    in.cost.link.latency_s = latency_us * 1e-6;
    in.cost.link.bytes_per_s = 10e9 / 8;
    in.fast.latency_s = kRdmaLatencyUs * 1e-6;
    in.fast.bytes_per_s = kRdmaGbps * 1e9 / 8;
    in.available_here = need_ * 8 / 10;
    return in;
  }

  static std::string Advice(const json& section) {
    std::string all;
    for (const json& a : section["advice"]) all += a.get<std::string>() + "\n";
    return all;
  }

  static constexpr int64_t kContext = 256;
  std::vector<std::byte> bytes_;
  std::unique_ptr<model::ModelFile> file_;
  int64_t need_ = 0;
};

TEST_F(DoctorModelTest, TensorParallelWinsOnFastLinksAndPipelineOnSlowOnes) {
  auto low = ModelSection(*file_, Inputs(1));
  auto high = ModelSection(*file_, Inputs(2000));
  ASSERT_TRUE(low.ok()) << low.status().ToString();
  ASSERT_TRUE(high.ok()) << high.status().ToString();
  // One rank cannot hold it; both two-rank splits can.
  for (const json& p : (*low)["plans"]) {
    EXPECT_EQ(p["feasible"].get<bool>(), p["tp"].get<int>() * p["pp"].get<int>() == 2) << p.dump();
  }
  EXPECT_EQ((*low)["pick"]["tp"], 2);
  EXPECT_EQ((*low)["pick"]["pp"], 1);
  EXPECT_EQ((*high)["pick"]["tp"], 1);
  EXPECT_EQ((*high)["pick"]["pp"], 2);
  EXPECT_NE(Advice(*low).find("Fastest on these links: tensor parallel over 2 machines (tp2 pp1)"),
            std::string::npos)
      << Advice(*low);
  EXPECT_NE(Advice(*low).find("Tensor parallelism wins"), std::string::npos) << Advice(*low);
  EXPECT_NE(Advice(*high).find("Fastest on these links: a pipeline of 2 stages (tp1 pp2)"),
            std::string::npos)
      << Advice(*high);
  EXPECT_NE(Advice(*high).find("A pipeline split wins"), std::string::npos) << Advice(*high);
  // The numbers behind the pick: tokens/s is the inverse of compute plus link time per token.
  for (const json* s : {&*low, &*high}) {
    const json& pick = (*s)["pick"];
    EXPECT_NEAR(1e3 / pick["decode_tokens_per_s"].get<double>(),
                pick["decode_compute_ms"].get<double>() + pick["decode_link_ms"].get<double>(),
                1e-9);
  }
  // At 2000 us the RDMA-class link would turn the best split into tensor parallelism.
  EXPECT_TRUE((*high)["change"]["best_changes"].get<bool>());
  EXPECT_GT((*high)["change"]["speedup"].get<double>(), 1.0);
  EXPECT_EQ((*high)["fast_pick"]["tp"], 2);
  EXPECT_NE(Advice(*high).find("would change to tensor parallel over 2 machines"),
            std::string::npos)
      << Advice(*high);
  // At 1 us the links already beat the assumed RDMA latency, though not its bandwidth: the faster
  // link keeps the better of each.
  EXPECT_DOUBLE_EQ((*low)["fast_link"]["latency_us"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ((*low)["fast_link"]["gbits_per_s"].get<double>(), kRdmaGbps);
  EXPECT_FALSE((*low)["change"]["best_changes"].get<bool>());
  EXPECT_GE((*low)["change"]["speedup"].get<double>(), 1.0);
  EXPECT_NE(Advice(*low).find("would stay tp2 pp1"), std::string::npos) << Advice(*low);
  // Links faster than the assumed one in both respects: nothing to gain.
  ModelAdviceInputs in = Inputs(1);
  in.cost.link.bytes_per_s = 200e9 / 8;
  auto faster = ModelSection(*file_, in);
  ASSERT_TRUE(faster.ok());
  EXPECT_TRUE((*faster)["change"].is_null());
  EXPECT_NE(Advice(*faster).find("already at least as fast"), std::string::npos) << Advice(*faster);
}

TEST_F(DoctorModelTest, FitsOrDoesNotFit) {
  ModelAdviceInputs in = Inputs(50);
  in.available_here = need_;
  auto fits = ModelSection(*file_, in);
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE((*fits)["fit"]["fits"].get<bool>());
  EXPECT_EQ((*fits)["fit"]["need_bytes"].get<int64_t>(), need_);
  EXPECT_EQ((*fits)["context"], kContext);
  EXPECT_EQ((*fits)["advice"][0].get<std::string>().rfind("It fits on this machine", 0), 0u);
  in.available_here = need_ - 1;
  auto not_fits = ModelSection(*file_, in);
  ASSERT_TRUE(not_fits.ok());
  EXPECT_FALSE((*not_fits)["fit"]["fits"].get<bool>());
  EXPECT_EQ((*not_fits)["advice"][0].get<std::string>().rfind("It does not fit", 0), 0u);
  // Nothing fits anywhere: the advice says so.
  in.cost.rank.memory_bytes = need_ / 10;
  auto none = ModelSection(*file_, in);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)["pick"].is_null());
  EXPECT_NE(Advice(*none).find("No split fits in memory"), std::string::npos) << Advice(*none);
}

TEST_F(DoctorModelTest, OneMachineWinsWhenTheModelFitsAndLinksAreSlow) {
  ModelAdviceInputs in = Inputs(300);
  in.cost.rank.memory_bytes = need_ * 2;
  auto s = ModelSection(*file_, in);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)["pick"]["tp"], 1);
  EXPECT_EQ((*s)["pick"]["pp"], 1);
  EXPECT_NE(Advice(*s).find("Splitting does not pay on these links"), std::string::npos)
      << Advice(*s);
}

std::string Squeeze(const std::string& text) {
  std::istringstream in(text);
  std::string word, out;
  while (in >> word) out += word + " ";
  return out;
}

TEST_F(DoctorModelTest, TextCarriesEverySectionAndEveryAdviceSentence) {
  Facts f;
  f.name = "host";
  f.os = "Linux 6.1.0 x86_64";
  f.cpu = "AMD EPYC 9B45";
  f.simd = "AVX3_ZEN4";
  f.cores = 2;
  f.memory_total = uint64_t{32} << 30;
  f.memory_available = uint64_t{24} << 30;
  f.read_bytes_per_s = 12e9;
  f.interfaces = {{"lo", "127.0.0.1", 8}};
  auto model = ModelSection(*file_, Inputs(2000));
  ASSERT_TRUE(model.ok());
  const json report = DoctorReport(MachineSection(f, 20e9),
                                   ChipSection(LookupAppleChip("Apple M3 Ultra"), true, {}),
                                   ClusterSection(UnavailableError("none"), "/s"), *model);
  EXPECT_EQ(report["v"], kDoctorVersion);
  const std::string text = DoctorText(report);
  for (const char* want :
       {"This machine: host", "AMD EPYC 9B45, 2 cores", "AVX3_ZEN4",
        "32.0 GiB total, 24.0 GiB available", "12.0 GB/s with one thread",
        "20.0 GB/s with all 2 cores", "Chip: Apple M3 Ultra (named with --chip)",
        "Thunderbolt 5, RDMA capable", "Links to other machines",
        "Model: tiny.gguf (context 256 positions)",
        "(* the fastest; the faster link: 5.0 us one-way, 80.0 Gbit/s, assumed)"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  const std::string squeezed = Squeeze(text);
  for (const char* section : {"machine", "chip", "cluster", "model"}) {
    for (const json& a : report[section]["advice"]) {
      EXPECT_NE(squeezed.find(Squeeze(a.get<std::string>())), std::string::npos) << a;
    }
  }
  for (const std::string& line : [&] {
         std::vector<std::string> lines;
         std::istringstream in(text);
         for (std::string l; std::getline(in, l);) lines.push_back(l);
         return lines;
       }()) {
    if (line.rfind("  - ", 0) == 0 || line.rfind("    ", 0) == 0) {
      EXPECT_LE(line.size(), 100u) << line;
    }
  }
}

}  // namespace
}  // namespace loom::cluster
