// The wire format of the socket transports: fixed-width little-endian messages, versioned, and
// validated field by field before anything is trusted.  Layouts are in docs/comm.md.
//
// A connection starts with a handshake (ServerHello -> ClientHello -> HelloReply) in which both
// sides prove knowledge of the group secret with HMAC-SHA-256 over fresh nonces; after it every
// message is a 64-byte MessageHeader followed by `bytes` of payload.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/comm/sha256.h"

namespace loom::comm {

inline constexpr uint32_t kWireMagic = 0x4D4F4F4Cu;  // the bytes "LOOM"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;  // 1 TiB: anything above is corrupt

enum class Op : uint8_t {
  // handshake
  kServerHello = 1,
  kClientHello = 2,
  kAccept = 3,
  kReject = 4,
  // data
  kSend = 16,
  kAllReduce = 17,
  kAllGather = 18,
  kBroadcast = 19,
  kBarrier = 20,
};
std::string_view OpName(Op op);  // "all-reduce", "send", ...

struct MessageHeader {
  Op op = Op::kSend;
  uint8_t dtype = 0;          // ElementType of all-reduce payloads; 0 for every other op
  uint32_t tag = 0;           // point-to-point tag, 0..kMaxTag; 0 for collectives
  uint64_t group = 0;         // fingerprint of the group id (GroupFingerprint)
  uint64_t seq = 0;           // per-connection, per-direction sequence number: 1, 2, 3, ...
  uint64_t index = 0;         // collective number within the group, from 1; 0 for send
  uint64_t offset = 0;        // byte offset of this segment within the collective's buffer
  uint64_t bytes = 0;         // payload bytes that follow the header
  uint64_t send_time_ns = 0;  // sender's CLOCK_MONOTONIC at send, when emulating links; else 0
};
inline constexpr size_t kHeaderBytes = 64;

void EncodeHeader(const MessageHeader& header, std::span<uint8_t, kHeaderBytes> out);
// Checks everything that needs no connection state: magic, version, op, dtype/op agreement,
// reserved bytes, tag range, payload size.  The receiver then checks group, seq, op, index, offset
// and size against what it expects.
Status DecodeHeader(std::span<const uint8_t> bytes, MessageHeader* out);

using Nonce = std::array<uint8_t, 16>;

struct ServerHello {
  uint64_t group = 0;
  uint32_t rank = 0;  // the accepting rank
  uint32_t size = 0;  // group size
  Nonce nonce{};
};
inline constexpr size_t kServerHelloBytes = 40;

struct ClientHello {
  uint64_t group = 0;
  uint32_t rank = 0;  // the connecting rank
  uint32_t size = 0;
  uint32_t server_rank = 0;  // whom the client meant to reach
  uint32_t channel = 0;      // which of the per-pair sockets this is
  Nonce nonce{};
  Digest mac{};  // HelloMac("client", ...)
};
inline constexpr size_t kClientHelloBytes = 80;

enum class RejectReason : uint8_t {
  kNone = 0,
  kWrongGroup = 1,
  kAuthFailed = 2,
  kBadRank = 3,
  kDuplicate = 4,
};
std::string_view RejectReasonText(RejectReason reason);

struct HelloReply {
  bool accept = false;
  RejectReason reason = RejectReason::kNone;
  Digest mac{};  // HelloMac("server", ...) when accepting; zeros when rejecting
};
inline constexpr size_t kHelloReplyBytes = 40;

void EncodeServerHello(const ServerHello& m, std::span<uint8_t, kServerHelloBytes> out);
void EncodeClientHello(const ClientHello& m, std::span<uint8_t, kClientHelloBytes> out);
void EncodeHelloReply(const HelloReply& m, std::span<uint8_t, kHelloReplyBytes> out);
Status DecodeServerHello(std::span<const uint8_t> bytes, ServerHello* out);
Status DecodeClientHello(std::span<const uint8_t> bytes, ClientHello* out);
Status DecodeHelloReply(std::span<const uint8_t> bytes, HelloReply* out);

// The first 8 bytes of SHA-256(group id), little-endian: names a group on the wire.
uint64_t GroupFingerprint(std::string_view group_id);

// The authentication tag of one side of a handshake: HMAC-SHA-256 keyed by the group secret over
// a role label ("client" or "server"), the group fingerprint, size, both ranks, the channel and
// both nonces.  Binding ranks, channel and both nonces prevents replaying a tag on another socket.
Digest HelloMac(std::string_view secret, std::string_view role, uint64_t group, uint32_t size,
                uint32_t client_rank, uint32_t server_rank, uint32_t channel,
                const Nonce& server_nonce, const Nonce& client_nonce);

// Fills `nonce` from the kernel's random source.
Status RandomNonce(Nonce* nonce);

}  // namespace loom::comm
