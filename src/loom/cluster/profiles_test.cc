#include "loom/cluster/profiles.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace loom::cluster {
namespace {

constexpr const char* kMachine = R"({
  "kind": "machine", "name": "test-box",
  "memory_bytes": {"value": 68719476736, "source": "spec sheet"},
  "memory_gb_per_s": {"value": 100, "source": "spec sheet"},
  "decode_efficiency": {"value": 0.5, "source": "assumed"},
  "prompt_tflops": {"value": 2, "source": "assumed"}
})";

TEST(ProfilesTest, BuiltinMachinesAndLinksParseWithSources) {
  const std::vector<std::string> machines = BuiltinProfileNames("machine");
  const std::vector<std::string> links = BuiltinProfileNames("link");
  EXPECT_EQ(machines, (std::vector<std::string>{"m3-ultra-512g", "m4-max-128g", "m4-pro-64g"}));
  EXPECT_EQ(links, (std::vector<std::string>{"10gbe", "tb4-tcp", "tb5-rdma"}));
  for (const std::string& name : machines) {
    auto p = LoadMachineProfile(name);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->name, name);
    EXPECT_EQ(p->sources.size(), 4u);
    EXPECT_GT(p->Facts().decode_bytes_per_s, 0);
    EXPECT_LE(p->Facts().decode_bytes_per_s, p->memory_bytes_per_s);
  }
  for (const std::string& name : links) {
    auto p = LoadLinkProfile(name);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->name, name);
    EXPECT_EQ(p->sources.size(), 2u);
  }
}

TEST(ProfilesTest, PublishedNumbersAreThoseOfTheSpecifications) {
  auto ultra = LoadMachineProfile("m3-ultra-512g");
  ASSERT_TRUE(ultra.ok());
  EXPECT_EQ(ultra->memory_bytes, int64_t{512} << 30);
  EXPECT_DOUBLE_EQ(ultra->memory_bytes_per_s, 819e9);
  auto tb5 = LoadLinkProfile("tb5-rdma");
  ASSERT_TRUE(tb5.ok());
  EXPECT_DOUBLE_EQ(tb5->bytes_per_s, 80e9 / 8);
  EXPECT_DOUBLE_EQ(tb5->latency_s, 50e-6);
}

TEST(ProfilesTest, ParsesAFileAndDerivesDecodeSpeed) {
  auto p = ParseMachineProfile(kMachine, "test");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->memory_bytes, int64_t{64} << 30);
  EXPECT_DOUBLE_EQ(p->Facts().decode_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(p->Facts().prompt_flops, 2e12);

  const std::filesystem::path path =
      ::testing::TempDir() + "loom_profile_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << kMachine;
  auto from_file = LoadMachineProfile(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  EXPECT_EQ(from_file->name, "test-box");
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(ProfilesTest, ClearErrors) {
  auto expect_error = [](const std::string& json, const std::string& words) {
    auto p = ParseMachineProfile(json, "bad.json");
    ASSERT_FALSE(p.ok()) << json;
    EXPECT_NE(p.status().message().find(words), std::string::npos) << p.status().message();
    EXPECT_EQ(p.status().message().rfind("bad.json", 0), 0u) << p.status().message();
  };
  const std::string m = kMachine;
  expect_error("{", "not valid JSON");
  expect_error("[1]", "JSON object");
  expect_error(Replace(m, R"("memory_gb_per_s")", R"("memory_gbps")"),
               "missing field \"memory_gb_per_s\"");
  expect_error(Replace(m, R"({"value": 100,)", R"({"value": -100,)"), "must be positive");
  expect_error(Replace(m, R"("value": 100, "source": "spec sheet")", R"("value": 100)"),
               "has no \"source\"");
  expect_error(Replace(m, R"("value": 0.5)", R"("value": 1.5)"), "above 1");
  expect_error(Replace(m, R"("memory_gb_per_s": {"value": 100, "source": "spec sheet"})",
                       R"("memory_gb_per_s": 100)"),
               "must be an object");
  expect_error(Replace(m, R"("kind": "machine")", R"("kind": "link")"), "a link profile where");
  expect_error(Replace(m, R"("value": 68719476736)", R"("value": 12)"), "plausible memory");

  auto unknown = LoadLinkProfile("tb9-warp");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("10gbe, tb4-tcp, tb5-rdma"), std::string::npos)
      << unknown.status().message();
  auto wrong_kind = LoadMachineProfile("tb5-rdma");
  ASSERT_FALSE(wrong_kind.ok());
  EXPECT_NE(wrong_kind.status().message().find("a link profile where a machine"), std::string::npos)
      << wrong_kind.status().message();
}

}  // namespace
}  // namespace loom::cluster
