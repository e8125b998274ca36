#include "loom/comm/wire.h"

#include <gtest/gtest.h>

#include <cstring>

#include "loom/comm/group.h"

namespace loom::comm {
namespace {

MessageHeader SampleHeader() {
  MessageHeader h;
  h.op = Op::kAllReduce;
  h.dtype = static_cast<uint8_t>(ElementType::kBF16);
  h.group = 0x1122334455667788ull;
  h.seq = 9;
  h.index = 4;
  h.offset = 1024;
  h.bytes = 2048;
  h.send_time_ns = 123456789;
  return h;
}

std::array<uint8_t, kHeaderBytes> Encode(const MessageHeader& h) {
  std::array<uint8_t, kHeaderBytes> b{};
  EncodeHeader(h, b);
  return b;
}

TEST(WireTest, HeaderRoundTrips) {
  const MessageHeader h = SampleHeader();
  const auto b = Encode(h);
  EXPECT_EQ(std::memcmp(b.data(), "LOOM", 4), 0);
  MessageHeader got;
  ASSERT_TRUE(DecodeHeader(b, &got).ok());
  EXPECT_EQ(got.op, h.op);
  EXPECT_EQ(got.dtype, h.dtype);
  EXPECT_EQ(got.group, h.group);
  EXPECT_EQ(got.seq, h.seq);
  EXPECT_EQ(got.index, h.index);
  EXPECT_EQ(got.offset, h.offset);
  EXPECT_EQ(got.bytes, h.bytes);
  EXPECT_EQ(got.send_time_ns, h.send_time_ns);
}

TEST(WireTest, HeaderRejectsEachCorruptField) {
  struct Case {
    const char* name;
    size_t offset;
    uint8_t value;
    const char* message;
  };
  const Case cases[] = {
      {"magic", 0, 'X', "magic"},           {"version", 4, 7, "wire version 7"},
      {"op", 6, 99, "unknown op 99"},       {"dtype", 7, 9, "element type 9"},
      {"reserved", 12, 1, "reserved"},      {"seq zero", 24, 0, "sequence number 0"},
      {"huge size", 55, 0x7F, "announces"},
  };
  for (const Case& c : cases) {
    auto b = Encode(SampleHeader());
    b[c.offset] = c.value;
    MessageHeader got;
    const Status s = DecodeHeader(b, &got);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.name << ": " << s.message();
  }
  MessageHeader got;
  auto b = Encode(SampleHeader());
  EXPECT_FALSE(DecodeHeader(std::span<const uint8_t>(b.data(), 63), &got).ok());
}

TEST(WireTest, HeaderChecksOpSpecificRules) {
  MessageHeader send = SampleHeader();
  send.op = Op::kSend;
  send.dtype = 0;
  send.index = 0;
  send.tag = 70000;  // beyond kMaxTag
  MessageHeader got;
  EXPECT_FALSE(DecodeHeader(Encode(send), &got).ok());
  send.tag = 5;
  EXPECT_TRUE(DecodeHeader(Encode(send), &got).ok());
  send.index = 3;  // point-to-point messages carry no collective index
  EXPECT_FALSE(DecodeHeader(Encode(send), &got).ok());

  MessageHeader barrier = SampleHeader();
  barrier.op = Op::kBarrier;
  barrier.dtype = 0;
  barrier.offset = 0;
  EXPECT_FALSE(DecodeHeader(Encode(barrier), &got).ok());  // carries bytes
  barrier.bytes = 0;
  EXPECT_TRUE(DecodeHeader(Encode(barrier), &got).ok());

  MessageHeader gather = SampleHeader();
  gather.op = Op::kAllGather;  // element type only on all-reduce
  EXPECT_FALSE(DecodeHeader(Encode(gather), &got).ok());
}

TEST(WireTest, HelloMessagesRoundTripAndValidate) {
  ServerHello s;
  s.group = 77;
  s.rank = 1;
  s.size = 4;
  s.nonce[3] = 9;
  std::array<uint8_t, kServerHelloBytes> sb{};
  EncodeServerHello(s, sb);
  ServerHello s2;
  ASSERT_TRUE(DecodeServerHello(sb, &s2).ok());
  EXPECT_EQ(s2.rank, 1u);
  EXPECT_EQ(s2.nonce, s.nonce);
  sb[16] = 9;  // rank 9 of 4
  EXPECT_FALSE(DecodeServerHello(sb, &s2).ok());

  ClientHello c;
  c.group = 77;
  c.rank = 3;
  c.size = 4;
  c.server_rank = 1;
  c.channel = 2;
  c.mac[0] = 0xAB;
  std::array<uint8_t, kClientHelloBytes> cb{};
  EncodeClientHello(c, cb);
  ClientHello c2;
  ASSERT_TRUE(DecodeClientHello(cb, &c2).ok());
  EXPECT_EQ(c2.channel, 2u);
  EXPECT_EQ(c2.mac, c.mac);
  EXPECT_FALSE(DecodeServerHello(cb, &s2).ok());  // wrong size and op

  HelloReply r;
  r.reason = RejectReason::kAuthFailed;
  std::array<uint8_t, kHelloReplyBytes> rb{};
  EncodeHelloReply(r, rb);
  HelloReply r2;
  ASSERT_TRUE(DecodeHelloReply(rb, &r2).ok());
  EXPECT_FALSE(r2.accept);
  EXPECT_EQ(r2.reason, RejectReason::kAuthFailed);
  rb[7] = 99;
  EXPECT_FALSE(DecodeHelloReply(rb, &r2).ok());
}

TEST(WireTest, HelloMacBindsEveryField) {
  Nonce a{}, b{};
  a[0] = 1;
  b[0] = 2;
  const Digest base = HelloMac("k", "client", 1, 4, 3, 1, 0, a, b);
  EXPECT_EQ(base, HelloMac("k", "client", 1, 4, 3, 1, 0, a, b));
  EXPECT_NE(base, HelloMac("K", "client", 1, 4, 3, 1, 0, a, b));
  EXPECT_NE(base, HelloMac("k", "server", 1, 4, 3, 1, 0, a, b));
  EXPECT_NE(base, HelloMac("k", "client", 2, 4, 3, 1, 0, a, b));
  EXPECT_NE(base, HelloMac("k", "client", 1, 4, 2, 1, 0, a, b));
  EXPECT_NE(base, HelloMac("k", "client", 1, 4, 3, 1, 1, a, b));
  EXPECT_NE(base, HelloMac("k", "client", 1, 4, 3, 1, 0, b, a));
  Nonce n1, n2;
  ASSERT_TRUE(RandomNonce(&n1).ok());
  ASSERT_TRUE(RandomNonce(&n2).ok());
  EXPECT_NE(n1, n2);
  EXPECT_NE(GroupFingerprint("a"), GroupFingerprint("b"));
}

}  // namespace
}  // namespace loom::comm
