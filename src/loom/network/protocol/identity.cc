#include "loom/network/protocol/identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "loom/base/fd.h"

namespace loom::network::protocol {
namespace {

using base::Fd;

constexpr int64_t kMaxKeyFileBytes = 64 << 10;  // an Ed25519 PEM is about 120 bytes

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using UniqueBio = std::unique_ptr<BIO, BioFree>;
using UniqueMdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;
using UniquePkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's error queue is per thread and read by later calls (TLS code among them), so every
// failure path empties it; the first entry, if any, goes into the message.
std::string TakeOpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no OpenSSL error recorded";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

Status WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError("node key: writing '", path, "': ", std::strerror(errno));
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

void NodeKey::Free::operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }

StatusOr<NodeKey> NodeKey::Generate() {
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr));
  EVP_PKEY* key = nullptr;
  if (ctx == nullptr || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
      EVP_PKEY_keygen(ctx.get(), &key) != 1) {
    return InternalError("node key: generating an Ed25519 key failed: ", TakeOpenSslError());
  }
  return NodeKey(key);
}

StatusOr<NodeKey> NodeKey::LoadPrivatePem(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return NotFoundError("node key: no file at '", path, "'");
    return UnavailableError("node key: cannot open '", path, "': ", std::strerror(errno));
  }
  // Checked on the open descriptor, so the file cannot be swapped between the check and the read.
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return UnavailableError("node key: cannot stat '", path, "': ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("node key: '", path, "' is not a file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDeniedError("node key: '", path, "' has mode ", mode,
                                 ", so other users may read it; run: chmod 600 '", path, "'");
  }
  if (st.st_size > kMaxKeyFileBytes) {
    return InvalidArgumentError("node key: '", path, "' is ", st.st_size,
                                " bytes, too large to be a key");
  }
  std::string pem(static_cast<size_t>(st.st_size), '\0');
  size_t have = 0;
  while (have < pem.size()) {
    const ssize_t n = ::read(fd.get(), pem.data() + have, pem.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError("node key: reading '", path, "': ", std::strerror(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  pem.resize(have);

  UniqueBio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  // A callback that supplies no passphrase: without one OpenSSL would prompt on the terminal for an
  // encrypted key.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  EVP_PKEY* key =
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr) : nullptr;
  OPENSSL_cleanse(pem.data(), pem.size());
  if (key == nullptr) {
    return InvalidArgumentError("node key: '", path,
                                "' is not an unencrypted PEM private key: ", TakeOpenSslError());
  }
  NodeKey loaded(key);
  if (EVP_PKEY_get_id(key) != EVP_PKEY_ED25519) {
    const char* type = EVP_PKEY_get0_type_name(key);
    return InvalidArgumentError("node key: '", path, "' holds a ", type ? type : "non-Ed25519",
                                " key, not an Ed25519 key");
  }
  return loaded;
}

Status NodeKey::SavePrivatePem(const std::string& path) const {
  UniqueBio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key_.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return InternalError("node key: encoding PEM failed: ", TakeOpenSslError());
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);

  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // O_EXCL below: never write a key into a file someone else prepared
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    OPENSSL_cleanse(data, static_cast<size_t>(size));
    return UnavailableError("node key: cannot create '", tmp, "': ", std::strerror(errno));
  }
  Status written = WriteAll(fd.get(), data, static_cast<size_t>(size), tmp);
  OPENSSL_cleanse(data, static_cast<size_t>(size));
  if (written.ok() && ::fchmod(fd.get(), 0600) != 0) {  // (independent of the umask)
    written = UnavailableError("node key: chmod '", tmp, "': ", std::strerror(errno));
  }
  if (written.ok() && ::fsync(fd.get()) != 0) {
    written = UnavailableError("node key: fsync '", tmp, "': ", std::strerror(errno));
  }
  if (::close(fd.Release()) != 0 && written.ok()) {
    written = UnavailableError("node key: closing '", tmp, "': ", std::strerror(errno));
  }
  if (written.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    written =
        UnavailableError("node key: renaming '", tmp, "' to '", path, "': ", std::strerror(errno));
  }
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return written;
  }
  // Make the rename itself durable; failing to sync the directory loses nothing already written.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
  return OkStatus();
}

std::string NodeKey::PublicKeyBase64() const {
  unsigned char raw[kPublicKeyBytes];
  size_t len = sizeof(raw);
  if (EVP_PKEY_get_raw_public_key(key_.get(), raw, &len) != 1 || len != sizeof(raw)) {
    ERR_clear_error();
    return "";  // (cannot happen for an Ed25519 key)
  }
  return Base64Encode(std::string_view(reinterpret_cast<const char*>(raw), len));
}

StatusOr<std::string> NodeKey::SignBase64(std::string_view message) const {
  UniqueMdCtx ctx(EVP_MD_CTX_new());
  unsigned char sig[64];
  size_t sig_len = sizeof(sig);
  // Ed25519 hashes internally: no digest, and one-shot EVP_DigestSign only.
  if (ctx == nullptr || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &sig_len,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1) {
    return InternalError("node key: signing failed: ", TakeOpenSslError());
  }
  return Base64Encode(std::string_view(reinterpret_cast<const char*>(sig), sig_len));
}

Status VerifySignature(std::string_view public_key_b64, std::string_view message,
                       std::string_view signature_b64) {
  StatusOr<std::string> key = Base64Decode(public_key_b64);
  if (!key.ok()) return key.status().WithContext("verify: public key");
  if (static_cast<int64_t>(key->size()) != kPublicKeyBytes) {
    return InvalidArgumentError("verify: public key is ", key->size(), " bytes, not ",
                                kPublicKeyBytes);
  }
  StatusOr<std::string> sig = Base64Decode(signature_b64);
  if (!sig.ok()) return sig.status().WithContext("verify: signature");
  if (sig->size() != 64) {
    return InvalidArgumentError("verify: signature is ", sig->size(), " bytes, not 64");
  }
  UniquePkey pkey(EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(key->data()), key->size()));
  if (pkey == nullptr) {
    return InvalidArgumentError("verify: not an Ed25519 public key: ", TakeOpenSslError());
  }
  UniqueMdCtx ctx(EVP_MD_CTX_new());
  if (ctx == nullptr ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) != 1) {
    return InternalError("verify: setting up Ed25519 failed: ", TakeOpenSslError());
  }
  const int result =
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig->data()), sig->size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size());
  ERR_clear_error();
  if (result != 1) return PermissionDeniedError("verify: signature does not match the public key");
  return OkStatus();
}

std::string ChallengeMessage(std::string_view nonce_b64, std::string_view node_id,
                             std::string_view hub_id) {
  return StrCat("loom-node-auth-v1\n", nonce_b64, "\n", node_id, "\n", hub_id);
}

std::string RandomBase64(int64_t n_bytes) {
  if (n_bytes <= 0) return "";
  std::string bytes(static_cast<size_t>(n_bytes), '\0');
  // RAND_bytes takes an int; draw in pieces for (absurdly) large requests.
  for (size_t at = 0; at < bytes.size();) {
    const int n = static_cast<int>(std::min<size_t>(bytes.size() - at, 1 << 20));
    if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data() + at), n) != 1) {
      std::fprintf(stderr, "loom: fatal: the OpenSSL random generator failed: %s\n",
                   TakeOpenSslError().c_str());
      std::abort();
    }
    at += static_cast<size_t>(n);
  }
  return Base64Encode(bytes);
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto byte = [&bytes](size_t k) {
    return static_cast<uint32_t>(static_cast<uint8_t>(bytes[k]));
  };
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    for (int shift = 18; shift >= 0; shift -= 6) out += kBase64Alphabet[(v >> shift) & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    const uint32_t v = byte(i) << 16 | (rest == 2 ? byte(i + 1) << 8 : 0);
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += rest == 2 ? kBase64Alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view b64) {
  if (b64.size() % 4 != 0) {
    return InvalidArgumentError("base64: length ", b64.size(), " is not a multiple of 4");
  }
  size_t padding = 0;
  while (padding < 2 && padding < b64.size() && b64[b64.size() - 1 - padding] == '=') ++padding;
  std::string out;
  out.reserve(b64.size() / 4 * 3);
  const size_t data_chars = b64.size() - padding;
  uint32_t acc = 0;
  for (size_t i = 0; i < data_chars; ++i) {
    const int v = Base64Value(b64[i]);
    if (v < 0) {
      return InvalidArgumentError("base64: invalid character at offset ", i,
                                  b64[i] == '=' ? " ('=' before the end)" : "");
    }
    acc = acc << 6 | static_cast<uint32_t>(v);
    if (i % 4 == 3) {
      out += static_cast<char>(acc >> 16 & 0xff);
      out += static_cast<char>(acc >> 8 & 0xff);
      out += static_cast<char>(acc & 0xff);
      acc = 0;
    }
  }
  // The last group: 2 characters carry 1 byte (4 unused bits), 3 carry 2 bytes (2 unused bits).
  if (padding == 2) {
    if ((acc & 0xf) != 0) return InvalidArgumentError("base64: non-zero bits before the padding");
    out += static_cast<char>(acc >> 4 & 0xff);
  } else if (padding == 1) {
    if ((acc & 0x3) != 0) return InvalidArgumentError("base64: non-zero bits before the padding");
    out += static_cast<char>(acc >> 10 & 0xff);
    out += static_cast<char>(acc >> 2 & 0xff);
  }
  return out;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    // Only on allocation failure inside OpenSSL; a wrong hash would silently mismatch later.
    std::fprintf(stderr, "loom: fatal: SHA-256 failed: %s\n", TakeOpenSslError().c_str());
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace loom::network::protocol
