#include "loom/comm/tcp/engine.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

namespace loom::comm::tcp {
namespace {

constexpr uint64_t kGroup = 0xC0FFEE;

// Two engines (ranks 0 and 1) joined by a socketpair.
struct Pair {
  std::unique_ptr<Engine> e[2];
  int raw[2] = {-1, -1};  // the descriptors, for tests that write bytes directly
};

Pair MakePair(LinkEmulation link = {}) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Pair p;
  for (int r = 0; r < 2; ++r) {
    EngineOptions o;
    o.rank = r;
    o.size = 2;
    o.channels = 1;
    o.group = kGroup;
    o.peers = {"test:0", "test:1"};
    o.spin_ns = 50'000;
    o.link = link;
    std::vector<Fd> conns(2);
    conns[1 - r] = Fd(sv[r]);
    p.raw[r] = sv[r];
    p.e[r] = std::make_unique<Engine>(std::move(o), std::move(conns));
  }
  return p;
}

Transfer MakeSend(int peer, Op op, uint32_t tag, uint64_t index, const void* data, int64_t bytes) {
  Transfer t;
  t.kind = Transfer::Kind::kSend;
  t.peer = peer;
  t.header.op = op;
  t.header.tag = tag;
  t.header.index = index;
  t.header.bytes = static_cast<uint64_t>(bytes);
  t.data = static_cast<std::byte*>(const_cast<void*>(data));
  return t;
}

Transfer MakeRecv(int peer, Op op, uint32_t tag, uint64_t index, void* data, int64_t bytes) {
  Transfer t = MakeSend(peer, op, tag, index, data, bytes);
  t.kind = Transfer::Kind::kRecv;
  return t;
}

int64_t Deadline(int64_t ms) { return NowNanos() + ms * 1'000'000; }

TEST(EngineTest, SendAndReceiveLargeAndSmallMessages) {
  Pair p = MakePair();
  std::vector<uint8_t> big(3 << 20), small(100);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 13);
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<uint8_t>(i + 1);
  Status sent;
  std::thread t([&] {
    Transfer batch[2] = {MakeSend(1, Op::kSend, 0, 0, big.data(), big.size()),
                         MakeSend(1, Op::kSend, 0, 0, small.data(), small.size())};
    sent = p.e[0]->Run(batch, Deadline(5000), OpLabel{"test send"});
  });
  std::vector<uint8_t> got_big(big.size()), got_small(small.size());
  Transfer batch[2] = {MakeRecv(0, Op::kSend, 0, 0, got_big.data(), got_big.size()),
                       MakeRecv(0, Op::kSend, 0, 0, got_small.data(), got_small.size())};
  const Status got = p.e[1]->Run(batch, Deadline(5000), OpLabel{"test recv"});
  t.join();
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  ASSERT_TRUE(got.ok()) << got.ToString();
  EXPECT_EQ(got_big, big);
  EXPECT_EQ(got_small, small);
}

TEST(EngineTest, EarlyPointToPointMessagesWaitForTheirReceive) {
  Pair p = MakePair();
  const int a = 111, b = 222;
  Transfer sends[2] = {MakeSend(1, Op::kSend, 1, 0, &a, 4), MakeSend(1, Op::kSend, 2, 0, &b, 4)};
  ASSERT_TRUE(p.e[0]->Run(sends, Deadline(2000), OpLabel{"send"}).ok());
  int got_b = 0, got_a = 0;
  Transfer r2[1] = {MakeRecv(0, Op::kSend, 2, 0, &got_b, 4)};
  ASSERT_TRUE(p.e[1]->Run(r2, Deadline(2000), OpLabel{"recv tag 2"}).ok());
  EXPECT_EQ(got_b, 222);
  EXPECT_EQ(p.e[1]->stashed_bytes(), 4);
  Transfer r1[1] = {MakeRecv(0, Op::kSend, 1, 0, &got_a, 4)};
  ASSERT_TRUE(p.e[1]->Run(r1, Deadline(2000), OpLabel{"recv tag 1"}).ok());
  EXPECT_EQ(got_a, 111);
  EXPECT_EQ(p.e[1]->stashed_bytes(), 0);
}

TEST(EngineTest, ReduceTransferAddsIntoTheDestination) {
  Pair p = MakePair();
  std::vector<float> in(5000), acc(5000);
  for (int i = 0; i < 5000; ++i) {
    in[i] = static_cast<float>(i);
    acc[i] = 0.5f;
  }
  Transfer s[1] = {MakeSend(1, Op::kAllReduce, 0, 1, in.data(), 20000)};
  s[0].header.dtype = static_cast<uint8_t>(ElementType::kF32);
  ASSERT_TRUE(p.e[0]->Run(s, Deadline(2000), OpLabel{"send"}).ok());
  Transfer r[1] = {MakeRecv(1 - 1, Op::kAllReduce, 0, 1, acc.data(), 20000)};
  r[0].kind = Transfer::Kind::kRecvReduce;
  r[0].header.dtype = static_cast<uint8_t>(ElementType::kF32);
  ASSERT_TRUE(p.e[1]->Run(r, Deadline(2000), OpLabel{"reduce"}).ok());
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(acc[i], i + 0.5f);
}

TEST(EngineTest, WrongMessageSizeIsAClearError) {
  Pair p = MakePair();
  std::vector<uint8_t> buf(200);
  Transfer s[1] = {MakeSend(1, Op::kSend, 0, 0, buf.data(), 100)};
  ASSERT_TRUE(p.e[0]->Run(s, Deadline(2000), OpLabel{"send"}).ok());
  Transfer r[1] = {MakeRecv(0, Op::kSend, 0, 0, buf.data(), 200)};
  const Status st = p.e[1]->Run(r, Deadline(2000), OpLabel{"recv"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("100-byte message"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("expects 200"), std::string::npos) << st.message();
}

TEST(EngineTest, CollectivesInDifferentOrdersAreAClearError) {
  Pair p = MakePair();
  std::vector<uint8_t> buf(64);
  Transfer s[1] = {MakeSend(1, Op::kBroadcast, 0, 3, buf.data(), 64)};
  ASSERT_TRUE(p.e[0]->Run(s, Deadline(2000), OpLabel{"send"}).ok());
  Transfer r[1] = {MakeRecv(0, Op::kAllGather, 0, 3, buf.data(), 64)};
  const Status st = p.e[1]->Run(r, Deadline(2000), OpLabel{"all-gather #3"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("different orders"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("broadcast #3"), std::string::npos) << st.message();
}

TEST(EngineTest, PeerThatClosesIsReportedPromptly) {
  Pair p = MakePair();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    p.e[0]->CloseAll();
  });
  int v = 0;
  Transfer r[1] = {MakeRecv(0, Op::kSend, 0, 0, &v, 4)};
  const int64_t start = NowNanos();
  const Status st = p.e[1]->Run(r, Deadline(10000), OpLabel{"recv"});
  closer.join();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("closed the connection"), std::string::npos) << st.message();
  EXPECT_LT(NowNanos() - start, 5'000'000'000);
}

TEST(EngineTest, MissingMessageTimesOutWithTheWaitNamed) {
  Pair p = MakePair();
  int v = 0;
  Transfer r[1] = {MakeRecv(0, Op::kSend, 7, 0, &v, 4)};
  const int64_t start = NowNanos();
  const Status st = p.e[1]->Run(r, Deadline(200), OpLabel{"recv from rank 0"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("receiving from rank 0"), std::string::npos) << st.message();
  EXPECT_GE(NowNanos() - start, 190'000'000);
}

TEST(EngineTest, GarbageOnTheSocketIsRejected) {
  Pair p = MakePair();
  uint8_t junk[64];
  std::memset(junk, 0x5A, sizeof(junk));
  ASSERT_EQ(::write(p.raw[0], junk, sizeof(junk)), 64);
  int v = 0;
  Transfer r[1] = {MakeRecv(0, Op::kSend, 0, 0, &v, 4)};
  const Status st = p.e[1]->Run(r, Deadline(2000), OpLabel{"recv"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st.message();
}

TEST(EngineTest, ForeignGroupAndReplayedSequenceNumbersAreRejected) {
  Pair p = MakePair();
  MessageHeader h;
  h.op = Op::kSend;
  h.group = kGroup + 1;
  h.seq = 1;
  h.bytes = 0;
  uint8_t wire[kHeaderBytes];
  EncodeHeader(h, std::span<uint8_t, kHeaderBytes>(wire));
  ASSERT_EQ(::write(p.raw[0], wire, sizeof(wire)), 64);
  Transfer r[1] = {MakeRecv(0, Op::kSend, 0, 0, nullptr, 0)};
  Status st = p.e[1]->Run(r, Deadline(2000), OpLabel{"recv"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("belongs to group"), std::string::npos) << st.message();

  Pair q = MakePair();
  h.group = kGroup;
  h.seq = 5;  // the first message must be 1
  EncodeHeader(h, std::span<uint8_t, kHeaderBytes>(wire));
  ASSERT_EQ(::write(q.raw[0], wire, sizeof(wire)), 64);
  st = q.e[1]->Run(r, Deadline(2000), OpLabel{"recv"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("sequence number 5"), std::string::npos) << st.message();
}

TEST(EngineTest, EmulatedDelayHoldsMessagesButLetsThemOverlap) {
  LinkEmulation link;
  link.delay_us = 30'000;  // 30 ms, large against scheduling noise
  Pair p = MakePair(link);
  int a = 1, b = 2;
  const int64_t start = NowNanos();
  Transfer s[2] = {MakeSend(1, Op::kSend, 0, 0, &a, 4), MakeSend(1, Op::kSend, 0, 0, &b, 4)};
  ASSERT_TRUE(p.e[0]->Run(s, Deadline(2000), OpLabel{"send"}).ok());
  int x = 0, y = 0;
  Transfer r[2] = {MakeRecv(0, Op::kSend, 0, 0, &x, 4), MakeRecv(0, Op::kSend, 0, 0, &y, 4)};
  ASSERT_TRUE(p.e[1]->Run(r, Deadline(2000), OpLabel{"recv"}).ok());
  const int64_t elapsed = NowNanos() - start;
  EXPECT_EQ(x, 1);
  EXPECT_EQ(y, 2);
  EXPECT_GE(elapsed, 30'000'000);  // held for the delay ...
  EXPECT_LT(elapsed, 58'000'000);  // ... once, not once per message
}

TEST(EngineTest, EmulatedDelayCanBePerPeerHost) {
  for (const bool slow : {true, false}) {
    LinkEmulation link;
    link.delay_us_from = {{slow ? "test" : "elsewhere", 30'000}};  // both peers are "test:N"
    Pair p = MakePair(link);
    int a = 1, x = 0;
    const int64_t start = NowNanos();
    Transfer s[1] = {MakeSend(1, Op::kSend, 0, 0, &a, 4)};
    ASSERT_TRUE(p.e[0]->Run(s, Deadline(2000), OpLabel{"send"}).ok());
    Transfer r[1] = {MakeRecv(0, Op::kSend, 0, 0, &x, 4)};
    ASSERT_TRUE(p.e[1]->Run(r, Deadline(2000), OpLabel{"recv"}).ok());
    const int64_t elapsed = NowNanos() - start;
    EXPECT_EQ(x, 1);
    if (slow) {
      EXPECT_GE(elapsed, 30'000'000);
    } else {
      EXPECT_LT(elapsed, 30'000'000);
    }
  }
}

TEST(EngineTest, EmulatedBandwidthCapSerializesBytes) {
  LinkEmulation link;
  link.gbps = 0.08;  // 10 MB/s: 200 KB take 20 ms
  Pair p = MakePair(link);
  std::vector<uint8_t> buf(200'000), got(200'000);
  const int64_t start = NowNanos();
  std::thread t([&] {
    Transfer s[1] = {MakeSend(1, Op::kSend, 0, 0, buf.data(), buf.size())};
    EXPECT_TRUE(p.e[0]->Run(s, Deadline(5000), OpLabel{"send"}).ok());
  });
  Transfer r[1] = {MakeRecv(0, Op::kSend, 0, 0, got.data(), got.size())};
  ASSERT_TRUE(p.e[1]->Run(r, Deadline(5000), OpLabel{"recv"}).ok());
  t.join();
  EXPECT_GE(NowNanos() - start, 19'000'000);
}

}  // namespace
}  // namespace loom::comm::tcp
