// Node identity: an Ed25519 key pair per node (OpenSSL 3).  The hub knows a node by its public key;
// a node proves it holds the private key by signing ChallengeMessage for a fresh hub nonce.
// Also the small encoding and hashing helpers the hub and node share (base64, SHA-256,
// constant-time comparison).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "loom/base/status.h"

typedef struct evp_pkey_st EVP_PKEY;  // (OpenSSL's type, declared here to keep its headers out)

namespace loom::network::protocol {

inline constexpr int64_t kPublicKeyBytes = 32;  // raw Ed25519 public key

// An Ed25519 private key.  Movable, not copyable.
class NodeKey {
 public:
  static StatusOr<NodeKey> Generate();
  // Reads a PEM (PKCS#8) Ed25519 private key.  Refuses a file that group or others can access
  // (mode & 077), since anyone who can read it can act as this node.
  static StatusOr<NodeKey> LoadPrivatePem(const std::string& path);
  // Writes the key unencrypted to path.tmp with mode 0600, fsyncs it and renames it over `path`.
  Status SavePrivatePem(const std::string& path) const;

  // The 32 raw public-key bytes, base64.
  std::string PublicKeyBase64() const;
  // The 64-byte Ed25519 signature of `message`, base64.
  StatusOr<std::string> SignBase64(std::string_view message) const;

 private:
  struct Free {
    void operator()(EVP_PKEY* key) const;
  };
  explicit NodeKey(EVP_PKEY* key) : key_(key) {}
  std::unique_ptr<EVP_PKEY, Free> key_;
};

// Checks `signature_b64` (64 bytes, base64) over `message` against the raw 32-byte public key in
// `public_key_b64`.  kPermissionDenied when the signature does not verify, kInvalidArgument for
// malformed keys or signatures.
Status VerifySignature(std::string_view public_key_b64, std::string_view message,
                       std::string_view signature_b64);

// The bytes a node signs to answer a challenge:
// "loom-node-auth-v1\n" + nonce + "\n" + node_id + "\n" + hub_id.  Binding the nonce, the node and
// the hub means a signature cannot be replayed on another connection or to another hub.
std::string ChallengeMessage(std::string_view nonce_b64, std::string_view node_id,
                             std::string_view hub_id);

// `n_bytes` bytes from OpenSSL's CSPRNG, base64 ("" for n_bytes <= 0).  Aborts the process if the
// generator fails: a predictable nonce or token would be a security hole, not an error to handle.
std::string RandomBase64(int64_t n_bytes);

// Standard alphabet with '=' padding.  Decoding is strict: length a multiple of 4, no whitespace,
// padding only at the end, unused bits zero (so every byte string has exactly one encoding).
std::string Base64Encode(std::string_view bytes);
StatusOr<std::string> Base64Decode(std::string_view b64);

// SHA-256 of `bytes` as 64 lowercase hex digits.
std::string Sha256Hex(std::string_view bytes);

}  // namespace loom::network::protocol
