// Checks a downloaded file the way the hub names it: sha256 of the bytes (Git LFS files) or git's
// blob id, sha1("blob <size>\0" + bytes) (small files), fed incrementally as the bytes arrive or
// are read back from a partial file.  OpenSSL's libcrypto does the hashing: with the CPU's SHA
// instructions it runs at GB/s, so checking never slows a download.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "loom/base/status.h"
#include "loom/fetch/hub_api.h"

namespace loom::fetch {

class ContentHash {
 public:
  // `size`: the file's full size, which git's blob id hashes first.
  ContentHash(HashKind kind, int64_t size);
  ContentHash(ContentHash&&) noexcept;
  ContentHash& operator=(ContentHash&&) noexcept;
  ~ContentHash();

  // Starts over (the bytes will be fed again from the first).
  void Reset();
  void Update(std::span<const std::byte> bytes);
  // The digest in lower-case hex; Reset before further use.
  std::string HexDigest();

 private:
  struct Ctx;
  HashKind kind_;
  int64_t size_;
  std::unique_ptr<Ctx> ctx_;
};

// The hex digest of `bytes` (whole, in memory).
std::string HashHex(HashKind kind, std::span<const std::byte> bytes);

// Feeds the first `length` bytes of the open file `fd` to `hash`.  Errors name `path`.
Status HashFilePrefix(int fd, int64_t length, const std::string& path, ContentHash& hash);

// "sha256" or "git sha1", for messages.
const char* HashKindName(HashKind kind);

}  // namespace loom::fetch
