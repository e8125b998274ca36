#include "loom/comm/hostfile.h"

#include <gtest/gtest.h>

namespace loom::comm {
namespace {

TEST(HostfileTest, ParsesAListOfHostsWithDefaults) {
  auto hf = ParseHostfile(R"([
    {"ssh": "me@mac.local", "ips": ["10.0.0.2"], "slots": 2, "port": 30000,
     "env": {"OPENBLAS_CORETYPE": "Cooperlake"}, "cwd": "/opt/loom"},
    {"ssh": "localhost"}
  ])",
                          "hosts.json");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_EQ(hf->hosts.size(), 2u);
  const HostEntry& a = hf->hosts[0];
  EXPECT_EQ(a.ssh, "me@mac.local");
  EXPECT_FALSE(a.local());
  EXPECT_EQ(a.address(), "10.0.0.2");
  EXPECT_EQ(a.slots, 2);
  EXPECT_EQ(a.port, 30000);
  ASSERT_EQ(a.env.size(), 1u);
  EXPECT_EQ(a.env[0].second, "Cooperlake");
  EXPECT_EQ(a.cwd, "/opt/loom");
  const HostEntry& b = hf->hosts[1];
  EXPECT_TRUE(b.local());
  EXPECT_EQ(b.address(), "127.0.0.1");
  EXPECT_EQ(b.slots, 1);
  EXPECT_EQ(hf->total_slots(), 3);
}

TEST(HostfileTest, AcceptsAnObjectWithHosts) {
  auto hf = ParseHostfile(R"({"hosts": [{"ips": ["127.0.0.1"], "slots": 4}]})", "x");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->total_slots(), 4);
}

TEST(HostfileTest, RejectsMistakesWithTheirLocation) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"[{\"ssh\": \"a\", \"ips\": [\"1.2.3.4\"], \"slot\": 2}]", "unknown key 'slot'"},
      {"[{\"ssh\": \"far-away\"}]", "needs \"ips\""},
      {"[{\"slots\": 0}]", "hosts[0].slots"},
      {"[{\"slots\": \"2\"}]", "hosts[0].slots"},
      {"[{\"port\": 70000}]", "hosts[0].port"},
      {"[{\"env\": {\"1BAD\": \"x\"}}]", "bad variable name"},
      {"[{\"env\": {\"A\": 1}}]", "env.A must be a string"},
      {"[{\"ssh\": \"-oProxyCommand=x\", \"ips\": [\"1.1.1.1\"]}]", "must not start with '-'"},
      {"[{}, {\"ips\": [3]}]", "hosts[1].ips[0]"},
      {"[]", "non-empty list"},
      {"{\"machines\": []}", "expected a list"},
      {"[{\"ssh\": ", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto hf = ParseHostfile(c.json, "bad.json");
    ASSERT_FALSE(hf.ok()) << c.json;
    EXPECT_NE(hf.status().message().find(c.message), std::string::npos)
        << c.json << " -> " << hf.status().message();
    EXPECT_NE(hf.status().message().find("bad.json"), std::string::npos);
  }
}

TEST(HostfileTest, MissingFileIsNotFound) {
  auto hf = LoadHostfile("/nonexistent/hosts.json");
  ASSERT_FALSE(hf.ok());
}

}  // namespace
}  // namespace loom::comm
