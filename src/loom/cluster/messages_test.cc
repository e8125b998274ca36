#include "loom/cluster/messages.h"

#include <gtest/gtest.h>

namespace loom::cluster {
namespace {

Key TestKey(std::string_view secret = "s3cret") { return DeriveKey(secret, KeyPurpose::kAnnounce); }

Facts SampleFacts() {
  Facts f;
  f.name = "mac-studio-1";
  f.os = "Linux 6.1 x86_64";
  f.cpu = "AMD EPYC";
  f.simd = "AVX3_DL";
  f.boot_id = "caa6df57";
  f.cores = 16;
  f.memory_total = uint64_t{512} << 30;
  f.memory_available = uint64_t{400} << 30;
  f.memory_offered = uint64_t{300} << 30;
  f.read_bytes_per_s = 8.5e11;
  f.rdma = {"rdma_en2", "rdma_en3"};
  f.interfaces = {{"en2", "10.0.0.1", 30}, {"en3", "10.0.1.1", 30}};
  return f;
}

TEST(ClusterMessages, EveryMessageRoundTrips) {
  const Key key = TestKey();
  Announce a{{1, 2, 3}, 7470, "host-a"};
  auto e = SplitEnvelope(EncodeAnnounce(a, key, 9));
  ASSERT_TRUE(e.ok()) << e.status().message();
  const auto bytes = EncodeAnnounce(a, key, 9);
  auto env = SplitEnvelope(bytes);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->seq, 9u);
  EXPECT_TRUE(Authenticate(*env, key).ok());
  auto back = DecodeAnnounce(*env);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->id, a.id);
  EXPECT_EQ(back->port, 7470);
  EXPECT_EQ(back->name, "host-a");

  const Facts f = SampleFacts();
  const auto fb = EncodeFacts(f, key, 3);
  auto fe = SplitEnvelope(fb);
  ASSERT_TRUE(fe.ok());
  auto fd = DecodeFacts(*fe);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  EXPECT_EQ(fd->name, f.name);
  EXPECT_EQ(fd->memory_total, f.memory_total);
  EXPECT_EQ(fd->memory_offered, f.memory_offered);
  EXPECT_EQ(fd->read_bytes_per_s, f.read_bytes_per_s);
  EXPECT_EQ(fd->rdma, f.rdma);
  ASSERT_EQ(fd->interfaces.size(), 2u);
  EXPECT_EQ(fd->interfaces[1].address, "10.0.1.1");
  EXPECT_EQ(fd->interfaces[1].prefix, 30);

  Links l;
  l.links.push_back({{1}, {2}, "10.0.0.1", "10.0.0.2", "en2", 5e-6, 6.5e9});
  const auto lb = EncodeLinks(l, key, 4);
  auto le = SplitEnvelope(lb);
  ASSERT_TRUE(le.ok());
  auto ld = DecodeLinks(*le);
  ASSERT_TRUE(ld.ok()) << ld.status().message();
  ASSERT_EQ(ld->links.size(), 1u);
  EXPECT_EQ(ld->links[0].b_host, "10.0.0.2");
  EXPECT_EQ(ld->links[0].bytes_per_s, 6.5e9);

  Heartbeat h;
  h.members.push_back({{5}, "10.0.0.2", 7470});
  const auto hb = EncodeHeartbeat(h, key, 5);
  auto he = SplitEnvelope(hb);
  ASSERT_TRUE(he.ok());
  auto hd = DecodeHeartbeat(*he);
  ASSERT_TRUE(hd.ok());
  EXPECT_EQ(hd->members[0].port, 7470);

  const auto pr = EncodeProbeReady({77, "10.0.0.2", 40000}, key, 6);
  auto pe = SplitEnvelope(pr);
  ASSERT_TRUE(pe.ok());
  auto pd = DecodeProbeReady(*pe);
  ASSERT_TRUE(pd.ok());
  EXPECT_EQ(pd->probe, 77u);
  EXPECT_EQ(pd->port, 40000);
}

TEST(ClusterMessages, AnotherSecretFailsAuthentication) {
  const auto bytes = EncodeAnnounce({{1}, 7470, "a"}, TestKey("right"), 0);
  auto e = SplitEnvelope(bytes);
  ASSERT_TRUE(e.ok());
  const Status s = Authenticate(*e, TestKey("wrong"));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("wrong cluster secret"), std::string::npos) << s.message();
}

TEST(ClusterMessages, ATamperedByteFailsAuthentication) {
  auto bytes = EncodeFacts(SampleFacts(), TestKey(), 1);
  for (size_t at : {size_t{16}, size_t{30}, bytes.size() - 40}) {
    auto copy = bytes;
    copy[at] ^= 1;
    auto e = SplitEnvelope(copy);
    ASSERT_TRUE(e.ok());
    EXPECT_FALSE(Authenticate(*e, TestKey()).ok()) << "byte " << at;
  }
}

TEST(ClusterMessages, SessionKeysDifferPerConnection) {
  Nonce a{}, b{}, c{};
  a[0] = 1;
  b[0] = 2;
  c[0] = 3;
  EXPECT_NE(DeriveSessionKey("s", a, b), DeriveSessionKey("s", a, c));
  EXPECT_NE(DeriveSessionKey("s", a, b), DeriveSessionKey("t", a, b));
  EXPECT_NE(DeriveKey("s", KeyPurpose::kAnnounce), DeriveKey("s", KeyPurpose::kHandshake));
}

TEST(ClusterMessages, MalformedEnvelopesAreRefusedWithReasons) {
  const auto good = EncodeAnnounce({{1}, 7470, "a"}, TestKey(), 0);
  auto expect = [](std::vector<uint8_t> bytes, const std::string& what) {
    auto e = SplitEnvelope(bytes);
    ASSERT_FALSE(e.ok()) << what;
    EXPECT_NE(e.status().message().find(what), std::string::npos) << e.status().message();
  };
  expect({good.begin(), good.begin() + 10}, "shorter than its 24-byte header");
  auto bad_magic = good;
  bad_magic[0] = 'X';
  expect(bad_magic, "bad magic");
  auto version = good;
  version[4] = 9;
  expect(version, "protocol version 9");
  auto type = good;
  type[6] = 99;
  expect(type, "unknown message type 99");
  auto huge = good;
  huge[10] = 0x7f;
  expect(huge, "body of");
  auto cut = good;
  cut.pop_back();
  expect(cut, "header says");
}

TEST(ClusterMessages, MalformedBodiesNameTheField) {
  const Key key = TestKey();
  // An announcement whose name length runs past the body.
  auto bytes = EncodeAnnounce({{1}, 7470, "abc"}, key, 0);
  bytes[kHeaderBytes + 18] = 200;  // the name's length byte
  auto e = SplitEnvelope(bytes);
  ASSERT_TRUE(e.ok());
  auto a = DecodeAnnounce(*e);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("name"), std::string::npos) << a.status().message();
  // Facts with more available memory than memory.
  Facts f = SampleFacts();
  f.memory_available = f.memory_total + 1;
  auto fe_bytes = EncodeFacts(f, key, 0);
  auto fe = SplitEnvelope(fe_bytes);
  ASSERT_TRUE(fe.ok());
  auto fd = DecodeFacts(*fe);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("memory_available"), std::string::npos);
  // A control character in a label.
  f = SampleFacts();
  f.cpu = "bad\x01name";
  auto ce_bytes = EncodeFacts(f, key, 0);
  auto ce = SplitEnvelope(ce_bytes);
  ASSERT_TRUE(ce.ok());
  EXPECT_FALSE(DecodeFacts(*ce).ok());
  // The wrong decoder for a type.
  auto he_bytes = EncodeHeartbeat({}, key, 0);
  auto he = SplitEnvelope(he_bytes);
  ASSERT_TRUE(he.ok());
  EXPECT_FALSE(DecodeFacts(*he).ok());
}

TEST(ClusterMessages, ARankStartCarriesPeersAndLongArgumentsAndOnlyRunOrServe) {
  const Key key = TestKey();
  RankStart m;
  m.launch = 42;
  m.rank = 1;
  m.group_id = "loom-cluster-abc";
  m.peers = {"10.0.0.1:4000", "0.0.0.0:4001"};
  m.args = {"run", "-m", "model.gguf", "-p", std::string(5000, 'x')};  // a long prompt
  auto bytes = EncodeRankStart(m, key, 7);
  auto e = SplitEnvelope(bytes);
  ASSERT_TRUE(e.ok());
  auto back = DecodeRankStart(*e);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->peers, m.peers);
  EXPECT_EQ(back->args, m.args);
  // A daemon starts only its own binary with run or serve.
  m.args = {"launch", "--", "/bin/sh"};
  bytes = EncodeRankStart(m, key, 8);
  e = SplitEnvelope(bytes);
  ASSERT_TRUE(e.ok());
  back = DecodeRankStart(*e);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("must start with run or serve"), std::string::npos);
  // Rank 0 is the requester's own; a rank outside the peers is refused.
  m.args = {"run"};
  m.rank = 2;
  bytes = EncodeRankStart(m, key, 9);
  e = SplitEnvelope(bytes);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(DecodeRankStart(*e).ok());
  // A reservation answer has a port or an error, never both or neither.
  RankReserved r{42, 1, 0, ""};
  bytes = EncodeRankReserved(r, key, 10);
  e = SplitEnvelope(bytes);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(DecodeRankReserved(*e).ok());
}

}  // namespace
}  // namespace loom::cluster
