#include "loom/comm/tcp/handshake.h"

#include "loom/comm/config.h"
#include "loom/comm/wire.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace loom::comm::tcp {
namespace {

struct TwoRanks {
  Fd listener[2];
  MeshSpec spec[2];
};

TwoRanks MakeTwoRanks(int channels, int64_t timeout_ms) {
  TwoRanks t;
  int port[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    auto l = Listen("127.0.0.1", 0, &port[r]);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    t.listener[r] = std::move(*l);
  }
  for (int r = 0; r < 2; ++r) {
    MeshSpec& s = t.spec[r];
    s.rank = r;
    s.size = 2;
    s.channels = channels;
    s.peers = {"127.0.0.1:" + std::to_string(port[0]), "127.0.0.1:" + std::to_string(port[1])};
    s.group_id = "handshake-test";
    s.secret = "right secret";
    s.deadline_ns = NowNanos() + timeout_ms * 1'000'000;
  }
  return t;
}

TEST(HandshakeTest, TwoRanksBuildAnAuthenticatedMeshWithSeveralChannels) {
  TwoRanks t = MakeTwoRanks(3, 5000);
  StatusOr<std::vector<Fd>> mesh0 = InternalError("not run");
  std::thread r0([&] { mesh0 = BuildMesh(t.spec[0], std::move(t.listener[0])); });
  auto mesh1 = BuildMesh(t.spec[1], std::move(t.listener[1]));
  r0.join();
  ASSERT_TRUE(mesh0.ok()) << mesh0.status().ToString();
  ASSERT_TRUE(mesh1.ok()) << mesh1.status().ToString();
  for (int c = 0; c < 3; ++c) {
    ASSERT_TRUE((*mesh0)[3 + c].valid());
    ASSERT_TRUE((*mesh1)[c].valid());
    EXPECT_FALSE((*mesh0)[c].valid());
    const char msg = static_cast<char>('a' + c);
    ASSERT_EQ(::send((*mesh1)[c].get(), &msg, 1, 0), 1);
    uint8_t got = 0;
    ASSERT_TRUE(ReadFull((*mesh0)[3 + c].get(), {&got, 1}, NowNanos() + 1'000'000'000, "x").ok());
    EXPECT_EQ(got, msg);  // channel c of one side is channel c of the other
  }
}

TEST(HandshakeTest, WrongSecretIsRefusedAndTheRealRankStillJoins) {
  TwoRanks t = MakeTwoRanks(1, 5000);
  StatusOr<std::vector<Fd>> mesh0 = InternalError("not run");
  std::thread r0([&] { mesh0 = BuildMesh(t.spec[0], std::move(t.listener[0])); });
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort(t.spec[0].peers[0], &host, &port).ok());
  {
    MeshSpec intruder = t.spec[1];
    intruder.secret = "guess";
    auto fd = ConnectWithRetry(host, port, intruder.deadline_ns, "rank 0");
    ASSERT_TRUE(fd.ok());
    const Status s = ClientHandshake(fd->get(), intruder, 0, 0);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
    EXPECT_NE(s.message().find("wrong group secret"), std::string::npos) << s.message();
  }
  {
    MeshSpec stranger = t.spec[1];
    stranger.group_id = "another job";
    auto fd = ConnectWithRetry(host, port, stranger.deadline_ns, "rank 0");
    ASSERT_TRUE(fd.ok());
    const Status s = ClientHandshake(fd->get(), stranger, 0, 0);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("another job on that port"), std::string::npos) << s.message();
  }
  {
    // Not a Loom peer at all: bytes that do not parse.
    auto fd = ConnectWithRetry(host, port, t.spec[1].deadline_ns, "rank 0");
    ASSERT_TRUE(fd.ok());
    std::string junk(kClientHelloBytes, 'z');
    ASSERT_TRUE(WriteFull(fd->get(), {reinterpret_cast<const uint8_t*>(junk.data()), junk.size()},
                          NowNanos() + 1'000'000'000, "rank 0")
                    .ok());
  }
  auto mesh1 = BuildMesh(t.spec[1], std::move(t.listener[1]));
  r0.join();
  ASSERT_TRUE(mesh1.ok()) << mesh1.status().ToString();
  ASSERT_TRUE(mesh0.ok()) << mesh0.status().ToString();
}

TEST(HandshakeTest, PeerThatNeverConnectsTimesOutNamingIt) {
  TwoRanks t = MakeTwoRanks(1, 300);
  const int64_t start = NowNanos();
  auto mesh0 = BuildMesh(t.spec[0], std::move(t.listener[0]));
  ASSERT_FALSE(mesh0.ok());
  EXPECT_EQ(mesh0.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(mesh0.status().message().find("rank 1"), std::string::npos) << mesh0.status().message();
  EXPECT_NE(mesh0.status().message().find("never connected"), std::string::npos);
  EXPECT_LT(NowNanos() - start, 3'000'000'000);
}

TEST(HandshakeTest, ConnectingToAnAbsentPeerTimesOut) {
  TwoRanks t = MakeTwoRanks(1, 300);
  t.listener[0].Reset();  // rank 0 is gone: connections are refused until the deadline
  auto mesh1 = BuildMesh(t.spec[1], std::move(t.listener[1]));
  ASSERT_FALSE(mesh1.ok());
  EXPECT_EQ(mesh1.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(mesh1.status().message().find("cannot connect to rank 0"), std::string::npos)
      << mesh1.status().message();
}

}  // namespace
}  // namespace loom::comm::tcp
