#include "loom/comm/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

namespace loom::comm {
namespace {

EnvLookup MapEnv(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

TEST(GroupConfigTest, NoEnvironmentGivesASelfGroup) {
  auto c = GroupConfigFromEnvironment(MapEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backend, "self");
  EXPECT_EQ(c->rank, 0);
  EXPECT_EQ(c->size, 1);
}

TEST(GroupConfigTest, ReadsTheLauncherVariables) {
  auto c = GroupConfigFromEnvironment(MapEnv({{"LOOM_RANK", "1"},
                                              {"LOOM_WORLD_SIZE", "3"},
                                              {"LOOM_PEERS", "127.0.0.1:5000, 127.0.0.1:5001,h:7"},
                                              {"LOOM_GROUP_ID", "job-7"},
                                              {"LOOM_GROUP_SECRET", "s3cret"},
                                              {"LOOM_LISTEN_FD", "5"},
                                              {"LOOM_COMM_TIMEOUT_S", "2.5"},
                                              {"LOOM_TCP_CHANNELS", "3"},
                                              {"LOOM_TCP_ONESHOT_MAX", "64K"},
                                              {"LOOM_LINK_DELAY_US", "50"},
                                              {"LOOM_LINK_GBPS", "10"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backend, "tcp");
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->size, 3);
  ASSERT_EQ(c->peers.size(), 3u);
  EXPECT_EQ(c->peers[1], "127.0.0.1:5001");
  EXPECT_EQ(c->group_id, "job-7");
  EXPECT_EQ(c->secret, "s3cret");
  EXPECT_EQ(c->listen_fd, 5);
  EXPECT_DOUBLE_EQ(c->options.timeout_seconds, 2.5);
  EXPECT_EQ(c->options.tcp_channels, 3);
  EXPECT_EQ(c->options.tcp_oneshot_max_bytes, 64 << 10);
  EXPECT_DOUBLE_EQ(c->options.link.delay_us, 50);
  EXPECT_DOUBLE_EQ(c->options.link.gbps, 10);
}

TEST(GroupConfigTest, LinkDelaysMayDifferPerPeerHost) {
  LinkEmulation link;
  ASSERT_TRUE(ParseLinkDelays("50, 10.200.0.6=300,10.200.0.10=0", &link).ok());
  EXPECT_DOUBLE_EQ(link.delay_us, 50);
  EXPECT_DOUBLE_EQ(link.DelayFromUs("10.200.0.6"), 300);
  EXPECT_DOUBLE_EQ(link.DelayFromUs("10.200.0.10"), 0);
  EXPECT_DOUBLE_EQ(link.DelayFromUs("10.200.0.1"), 50);
  ASSERT_TRUE(ParseLinkDelays("10.200.0.6=300", &link).ok());
  EXPECT_DOUBLE_EQ(link.delay_us, 0);
  EXPECT_TRUE(link.enabled());
  EXPECT_FALSE(ParseLinkDelays("=300", &link).ok());
  const Status bad = ParseLinkDelays("10.0.0.1=fast", &link);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("not a number"), std::string::npos) << bad.message();
}

TEST(GroupConfigTest, AHostMayNameItsAddressesOnSeveralLinks) {
  EXPECT_EQ(SplitHostAlternatives("10.0.0.2"), std::vector<std::string>{"10.0.0.2"});
  EXPECT_EQ(SplitHostAlternatives("10.0.0.2+10.0.1.2"),
            (std::vector<std::string>{"10.0.0.2", "10.0.1.2"}));
  EXPECT_EQ(SplitHostAlternatives("a++b+"), (std::vector<std::string>{"a", "b"}));
}

TEST(GroupConfigTest, HostfileGivesPeersToRanksStartedByHand) {
  const std::string path = ::testing::TempDir() + "config_test_hosts.json";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"([{"ips": ["10.0.0.1"], "slots": 2, "port": 31000},
                   {"ssh": "b", "ips": ["fe80::2"]}])", f);
    std::fclose(f);
  }
  auto c = GroupConfigFromEnvironment(MapEnv({{"LOOM_HOSTFILE", path}, {"LOOM_RANK", "2"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backend, "tcp");
  EXPECT_EQ(c->size, 3);
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->peers,
            (std::vector<std::string>{"10.0.0.1:31000", "10.0.0.1:31001", "[fe80::2]:29500"}));
  auto too_many = GroupConfigFromEnvironment(
      MapEnv({{"LOOM_HOSTFILE", path}, {"LOOM_WORLD_SIZE", "4"}, {"LOOM_RANK", "0"}}));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("3 slots"), std::string::npos);
  auto missing = GroupConfigFromEnvironment(MapEnv({{"LOOM_HOSTFILE", "/nonexistent.json"}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("LOOM_HOSTFILE"), std::string::npos);
}

TEST(GroupConfigTest, MpirunEnvironmentSelectsMpi) {
  auto c = GroupConfigFromEnvironment(MapEnv({{"OMPI_COMM_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backend, "mpi");
}

TEST(GroupConfigTest, RejectsInconsistentValuesWithTheirNames) {
  auto bad_rank = GroupConfigFromEnvironment(
      MapEnv({{"LOOM_RANK", "3"}, {"LOOM_WORLD_SIZE", "3"}, {"LOOM_PEERS", "a:1,b:2,c:3"}}));
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("LOOM_RANK=3"), std::string::npos);

  auto peers = GroupConfigFromEnvironment(
      MapEnv({{"LOOM_RANK", "0"}, {"LOOM_WORLD_SIZE", "3"}, {"LOOM_PEERS", "a:1,b:2"}}));
  ASSERT_FALSE(peers.ok());
  EXPECT_NE(peers.status().message().find("lists 2 addresses"), std::string::npos);

  auto number = GroupConfigFromEnvironment(MapEnv({{"LOOM_COMM_TIMEOUT_S", "soon"}}));
  ASSERT_FALSE(number.ok());
  EXPECT_NE(number.status().message().find("LOOM_COMM_TIMEOUT_S"), std::string::npos);

  auto backend = GroupConfigFromEnvironment(MapEnv({{"LOOM_BACKEND", "carrier-pigeon"}}));
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("carrier-pigeon"), std::string::npos);

  auto port = GroupConfigFromEnvironment(
      MapEnv({{"LOOM_RANK", "0"}, {"LOOM_WORLD_SIZE", "1"}, {"LOOM_PEERS", "127.0.0.1:99999"}}));
  ASSERT_FALSE(port.ok());
}

TEST(GroupConfigTest, ParsesAddressesAndSizes) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("10.0.0.2:29500", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.2");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(ParseHostPort("[::1]:80", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_FALSE(ParseHostPort("nohost", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort(":80", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("h:0", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("h:8x", &host, &port).ok());

  EXPECT_EQ(*ParseByteSize("64"), 64);
  EXPECT_EQ(*ParseByteSize("16K"), 16 << 10);
  EXPECT_EQ(*ParseByteSize("64M"), int64_t{64} << 20);
  EXPECT_EQ(*ParseByteSize("1g"), int64_t{1} << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("-1").ok());
  EXPECT_FALSE(ParseByteSize("12Q").ok());
}

TEST(GroupConfigTest, SelfGroupCollectivesAreIdentity) {
  GroupConfig c;
  auto g = CreateGroup(c);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  float v[3] = {1, 2, 3};
  ASSERT_TRUE((*g)->AllReduceSum(v, 3, ElementType::kF32).ok());
  EXPECT_EQ(v[2], 3);
  float out[3] = {};
  ASSERT_TRUE((*g)->AllGather(v, out, sizeof(v)).ok());
  EXPECT_EQ(out[1], 2);
  EXPECT_FALSE((*g)->Send(v, 4, 1, 0).ok());
  auto sub = (*g)->Split(0, 0);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ((*sub)->size(), 1);
}

TEST(GroupConfigTest, MpiAvailabilityIsReported) {
  GroupConfig c;
  c.backend = "mpi";
  if (!BackendAvailable("mpi")) {
    auto g = CreateGroup(c);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kUnimplemented);
  }
  EXPECT_EQ(BackendNames().size(), 4u);
}

}  // namespace
}  // namespace loom::comm
