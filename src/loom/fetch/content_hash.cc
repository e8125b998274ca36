#include "loom/fetch/content_hash.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace loom::fetch {

namespace {
constexpr size_t kReadChunk = size_t{1} << 20;
}  // namespace

struct ContentHash::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

ContentHash::ContentHash(HashKind kind, int64_t size)
    : kind_(kind), size_(size), ctx_(std::make_unique<Ctx>()) {
  Reset();
}
ContentHash::ContentHash(ContentHash&&) noexcept = default;
ContentHash& ContentHash::operator=(ContentHash&&) noexcept = default;
ContentHash::~ContentHash() = default;

// libcrypto fails here only when out of memory; the digest is then "(digest failed)", which matches
// no hash, so the download is rejected, never accepted.
void ContentHash::Reset() {
  if (ctx_->md == nullptr) return;
  EVP_DigestInit_ex(ctx_->md, kind_ == HashKind::kSha256 ? EVP_sha256() : EVP_sha1(), nullptr);
  if (kind_ == HashKind::kGitSha1) {
    const std::string prefix = "blob " + std::to_string(size_);
    EVP_DigestUpdate(ctx_->md, prefix.data(), prefix.size() + 1);  // with the terminating NUL
  }
}

void ContentHash::Update(std::span<const std::byte> bytes) {
  if (ctx_->md == nullptr) return;
  EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size());
}

std::string ContentHash::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (ctx_->md == nullptr || EVP_DigestFinal_ex(ctx_->md, digest, &n) != 1) {
    return "(digest failed)";
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

std::string HashHex(HashKind kind, std::span<const std::byte> bytes) {
  ContentHash h(kind, static_cast<int64_t>(bytes.size()));
  h.Update(bytes);
  return h.HexDigest();
}

Status HashFilePrefix(int fd, int64_t length, const std::string& path, ContentHash& hash) {
  std::vector<std::byte> buffer(kReadChunk);
  int64_t offset = 0;
  while (offset < length) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(length - offset, kReadChunk));
    const ssize_t n = ::pread(fd, buffer.data(), want, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(path, ": read failed at offset ", offset, ": ", std::strerror(errno));
    }
    if (n == 0) return DataLossError(path, ": ends at ", offset, " bytes, expected ", length);
    hash.Update({buffer.data(), static_cast<size_t>(n)});
    offset += n;
  }
  return OkStatus();
}

const char* HashKindName(HashKind kind) {
  return kind == HashKind::kSha256 ? "sha256" : "git sha1";
}

}  // namespace loom::fetch
