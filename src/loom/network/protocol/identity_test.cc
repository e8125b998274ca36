#include "loom/network/protocol/identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace loom::network::protocol {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh directory for one test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "loom-identity-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

NodeKey MakeKey() {
  StatusOr<NodeKey> key = NodeKey::Generate();
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  return std::move(key).value();
}

// `b64` with bit `bit` of the decoded bytes flipped, re-encoded.
std::string FlipBit(const std::string& b64, int bit) {
  std::string raw = Base64Decode(b64).value();
  raw[bit / 8] = static_cast<char>(raw[bit / 8] ^ (1 << (bit % 8)));
  return Base64Encode(raw);
}

TEST(IdentityTest, SignatureVerifies) {
  const NodeKey key = MakeKey();
  const std::string message = ChallengeMessage(RandomBase64(32), "node-1", "hub-1");
  StatusOr<std::string> sig = key.SignBase64(message);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  EXPECT_EQ(Base64Decode(*sig)->size(), 64u);
  EXPECT_EQ(Base64Decode(key.PublicKeyBase64())->size(), 32u);
  EXPECT_TRUE(VerifySignature(key.PublicKeyBase64(), message, *sig).ok());
  EXPECT_TRUE(VerifySignature(key.PublicKeyBase64(), "", key.SignBase64("").value()).ok());
}

TEST(IdentityTest, FlippedBitInMessageOrSignatureFails) {
  const NodeKey key = MakeKey();
  const std::string message = "loom-node-auth-v1\nnonce\nnode\nhub";
  const std::string sig = key.SignBase64(message).value();
  for (int bit : {0, 7, 100, 511}) {
    const Status s = VerifySignature(key.PublicKeyBase64(), message, FlipBit(sig, bit));
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << "bit " << bit << ": " << s.ToString();
  }
  for (size_t i = 0; i < message.size(); i += 5) {
    std::string changed = message;
    changed[i] = static_cast<char>(changed[i] ^ 1);
    EXPECT_EQ(VerifySignature(key.PublicKeyBase64(), changed, sig).code(),
              StatusCode::kPermissionDenied);
  }
  EXPECT_FALSE(VerifySignature(key.PublicKeyBase64(), message + "x", sig).ok());
}

TEST(IdentityTest, WrongKeyFails) {
  const NodeKey a = MakeKey(), b = MakeKey();
  EXPECT_NE(a.PublicKeyBase64(), b.PublicKeyBase64());
  const std::string sig = a.SignBase64("m").value();
  EXPECT_EQ(VerifySignature(b.PublicKeyBase64(), "m", sig).code(), StatusCode::kPermissionDenied);
}

TEST(IdentityTest, MalformedKeysAndSignaturesAreErrors) {
  const NodeKey key = MakeKey();
  const std::string pub = key.PublicKeyBase64();
  const std::string sig = key.SignBase64("m").value();
  const auto expect_invalid = [](const Status& s, const std::string& part) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(part));
  };
  expect_invalid(VerifySignature("", "m", sig), "public key is 0 bytes, not 32");
  expect_invalid(VerifySignature("!!!!", "m", sig), "public key: base64: invalid character");
  expect_invalid(VerifySignature(Base64Encode(std::string(31, 'k')), "m", sig), "31 bytes");
  expect_invalid(VerifySignature(Base64Encode(std::string(33, 'k')), "m", sig), "33 bytes");
  expect_invalid(VerifySignature(pub, "m", ""), "signature is 0 bytes, not 64");
  expect_invalid(VerifySignature(pub, "m", sig.substr(0, 87)), "not a multiple of 4");
  expect_invalid(VerifySignature(pub, "m", Base64Encode(std::string(65, 's'))), "65 bytes");
  expect_invalid(VerifySignature(pub, "m", std::string(88, '\xff')), "invalid character");
  // 32 bytes that are not a valid curve point: an error, not a crash.
  EXPECT_FALSE(VerifySignature(Base64Encode(std::string(32, '\xff')), "m", sig).ok());
}

TEST(IdentityTest, PemRoundTripKeepsTheKey) {
  TempDir dir;
  const NodeKey key = MakeKey();
  const std::string path = dir.File("node.pem");
  ASSERT_TRUE(key.SavePrivatePem(path).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  StatusOr<NodeKey> loaded = NodeKey::LoadPrivatePem(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->PublicKeyBase64(), key.PublicKeyBase64());
  EXPECT_TRUE(VerifySignature(key.PublicKeyBase64(), "m", loaded->SignBase64("m").value()).ok());
  // Saving again replaces the file.
  const NodeKey other = MakeKey();
  ASSERT_TRUE(other.SavePrivatePem(path).ok());
  EXPECT_EQ(NodeKey::LoadPrivatePem(path)->PublicKeyBase64(), other.PublicKeyBase64());
}

TEST(IdentityTest, RefusesKeyFileOthersCanRead) {
  TempDir dir;
  const std::string path = dir.File("node.pem");
  ASSERT_TRUE(MakeKey().SavePrivatePem(path).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  StatusOr<NodeKey> loaded = NodeKey::LoadPrivatePem(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(loaded.status().message(), HasSubstr("mode 0644"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("chmod 600"));
}

TEST(IdentityTest, LoadGivesClearErrors) {
  TempDir dir;
  StatusOr<NodeKey> missing = NodeKey::LoadPrivatePem(dir.File("absent.pem"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no file at"));

  const std::string junk = dir.File("junk.pem");
  std::ofstream(junk) << "this is not a key\n";
  ASSERT_EQ(::chmod(junk.c_str(), 0600), 0);
  StatusOr<NodeKey> not_key = NodeKey::LoadPrivatePem(junk);
  EXPECT_EQ(not_key.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(not_key.status().message(), HasSubstr("not an unencrypted PEM private key"));

  // A P-256 key (made by the openssl tool when it is installed) is refused as not Ed25519.
  const std::string ec = dir.File("ec.pem");
  const std::string cmd = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '" +
                          ec + "' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) == 0) {
    ASSERT_EQ(::chmod(ec.c_str(), 0600), 0);
    StatusOr<NodeKey> wrong = NodeKey::LoadPrivatePem(ec);
    EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(wrong.status().message(), HasSubstr("not an Ed25519 key"));
  }
}

TEST(IdentityTest, ChallengeMessageBindsNonceNodeAndHub) {
  const std::string n1 = RandomBase64(32), n2 = RandomBase64(32);
  EXPECT_NE(n1, n2);
  EXPECT_EQ(n1.size(), 44u);
  EXPECT_NE(ChallengeMessage(n1, "node", "hub"), ChallengeMessage(n2, "node", "hub"));
  EXPECT_NE(ChallengeMessage(n1, "node", "hub"), ChallengeMessage(n1, "node2", "hub"));
  EXPECT_NE(ChallengeMessage(n1, "node", "hub"), ChallengeMessage(n1, "node", "hub2"));
  EXPECT_EQ(ChallengeMessage("N", "a", "b"), "loom-node-auth-v1\nN\na\nb");
  EXPECT_EQ(RandomBase64(0), "");
}

TEST(IdentityTest, Base64MatchesKnownVectorsAndIsStrict) {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"},
                                                         {"\xff\xfe", "//4="}};
  for (const auto& [raw, b64] : vectors) {
    EXPECT_EQ(Base64Encode(raw), b64);
    StatusOr<std::string> back = Base64Decode(b64);
    ASSERT_TRUE(back.ok()) << b64;
    EXPECT_EQ(*back, raw);
  }
  for (const char* bad : {"Zg", "Zg=", "Z===", "====", "Zm9v\n", "Zm 9",
                          "Zh==", "Zm9=", "Zg==Zg==", "Zm-v", "Zm_v", "=Zm9"}) {
    EXPECT_FALSE(Base64Decode(bad).ok()) << bad;
  }
}

TEST(IdentityTest, Sha256HexMatchesKnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace loom::network::protocol
