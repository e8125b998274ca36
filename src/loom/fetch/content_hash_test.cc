#include "loom/fetch/content_hash.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace loom::fetch {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Reference digests from Python's hashlib and `git hash-object`.
TEST(ContentHashTest, Sha256MatchesKnownDigests) {
  EXPECT_EQ(HashHex(HashKind::kSha256, Bytes("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HashHex(HashKind::kSha256, Bytes("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HashHex(HashKind::kSha256, Bytes(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ContentHashTest, GitSha1MatchesGitHashObject) {
  EXPECT_EQ(HashHex(HashKind::kGitSha1, Bytes("hello")),
            "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0");
  EXPECT_EQ(HashHex(HashKind::kGitSha1, Bytes("")), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  EXPECT_EQ(HashHex(HashKind::kGitSha1, Bytes(std::string(1000000, 'a'))),
            "de1fbf0c2f34f67f01f355f31ed0cf7319643c5e");
}

TEST(ContentHashTest, PiecewiseUpdatesEqualOneUpdate) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>(i * 7 + 3));
  for (const HashKind kind : {HashKind::kSha256, HashKind::kGitSha1}) {
    for (size_t piece : {1, 63, 64, 65, 333}) {
      ContentHash h(kind, static_cast<int64_t>(text.size()));
      for (size_t at = 0; at < text.size(); at += piece) {
        h.Update(Bytes(std::string_view(text).substr(at, piece)));
      }
      EXPECT_EQ(h.HexDigest(), HashHex(kind, Bytes(text))) << "piece " << piece;
    }
  }
}

TEST(ContentHashTest, ResetStartsOver) {
  ContentHash h(HashKind::kGitSha1, 5);
  h.Update(Bytes("junk"));
  h.Reset();
  h.Update(Bytes("hello"));
  EXPECT_EQ(h.HexDigest(), "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0");
}

TEST(ContentHashTest, HashFilePrefixReadsBackAPartialFile) {
  char path[] = "/tmp/loom_content_hash_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "abcdef", 6), 6);
  ContentHash h(HashKind::kSha256, 3);
  ASSERT_TRUE(HashFilePrefix(fd, 3, path, h).ok());
  EXPECT_EQ(h.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  h.Reset();
  const Status past_end = HashFilePrefix(fd, 10, path, h);
  EXPECT_EQ(past_end.code(), StatusCode::kDataLoss) << past_end.ToString();
  ::close(fd);
  ::unlink(path);
}

}  // namespace
}  // namespace loom::fetch
