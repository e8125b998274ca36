// The messages of `loom cluster`: discovery announcements (UDP multicast, or unicast to static
// peers) and the frames of the control connection between two daemons (TCP).  Every message is
// one envelope, authenticated with HMAC-SHA-256 under a key derived from the cluster secret:
//
//   offset size field
//   0      4    magic "LMCL"
//   4      2    version (kClusterVersion); a daemon refuses other versions with a clear error
//   6      2    type (MessageType)
//   8      4    body length (at most kMaxBodyBytes)
//   12     4    reserved, 0
//   16     8    sequence number: control frames count 0, 1, 2, ... per direction (replays and
//               reordering are refused); announcements carry the sender's counter
//   24     n    body (fields little-endian; strings as u16 length + bytes)
//   24+n   32   HMAC-SHA-256 over bytes [0, 24 + n)
//
// Keys (DeriveKey): announcements and the handshake use keys derived from the secret alone; after
// the handshake each connection uses a session key derived from the secret and both nonces, so a
// frame cannot be replayed on another connection.  Reject frames are the one exception: they are
// sent to a peer that failed authentication, so they carry no valid MAC and only end a handshake.
// Bodies are decoded field by field with every length and range checked; unknown types, trailing
// bytes and out-of-range values are errors naming the field.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/comm/sha256.h"

namespace loom::cluster {

inline constexpr uint16_t kClusterVersion = 1;
inline constexpr int64_t kHeaderBytes = 24;
inline constexpr int64_t kMacBytes = 32;
inline constexpr int64_t kMaxBodyBytes = 64 << 10;
inline constexpr int64_t kMaxLabelBytes = 256;  // names, OS, CPU, SIMD target, addresses
inline constexpr int64_t kMaxListItems = 64;    // interfaces, RDMA devices, members, links

using MemberId = std::array<uint8_t, 16>;  // random per daemon start
using Nonce = std::array<uint8_t, 32>;

std::string MemberIdHex(const MemberId& id);  // 32 hex digits
// The short form people read in tables: the first 8 hex digits.
std::string ShortId(const MemberId& id);

enum class MessageType : uint16_t {
  kAnnounce = 1,   // UDP: "a member of this cluster listens at <port>"
  kHello = 2,      // client -> server: who I am, my nonce
  kWelcome = 3,    // server -> client: who I am, my nonce, your nonce back
  kConfirm = 4,    // client -> server: your nonce back (the client knows the secret)
  kReject = 5,     // either way, then close: why the handshake failed (not authenticated)
  kFacts = 10,     // the sender's machine facts
  kHeartbeat = 11, // the sender is alive, and the members it knows (gossip)
  kProbeStart = 20,  // "may I measure the link to your address X?"
  kProbeBusy = 21,   // the receiver is measuring another link; try again later
  kLinks = 22,       // the sender's measured links (its row of the link matrix)
  kProbeReady = 23,  // "I listen as rank 0 of a two-rank group at host:port: join it"
  kRankReserve = 30,   // "listen for rank R of launch L" (`loom cluster run`)
  kRankReserved = 31,  // "rank R of launch L listens on port P" (or why it cannot)
  kRankStart = 32,     // "start rank R of launch L: here are its peers and arguments"
  kRankExit = 33,      // "rank R of launch L exited with code C"
  kRankStop = 34,      // "stop every rank of launch L"
};

std::string_view MessageTypeName(MessageType type);

enum class KeyPurpose { kAnnounce, kHandshake };
using Key = comm::Digest;
Key DeriveKey(std::string_view secret, KeyPurpose purpose);
Key DeriveSessionKey(std::string_view secret, const Nonce& client, const Nonce& server);

struct Announce {
  MemberId id{};
  uint16_t port = 0;  // the control port
  std::string name;   // host name, for people
};

struct Hello {
  MemberId id{};
  Nonce nonce{};
  uint16_t port = 0;  // the sender's own control port (so the server can list it)
  std::string name;
};

struct Welcome {
  MemberId id{};
  Nonce nonce{};
  Nonce echo{};  // the client's nonce
  uint16_t port = 0;
  std::string name;
};

struct Confirm {
  Nonce echo{};  // the server's nonce
};

enum class RejectReason : uint16_t {
  kAuthentication = 1,  // wrong secret
  kVersion = 2,         // another protocol version
  kSelf = 3,            // the client dialled its own daemon
  kMalformed = 4,
};

struct Reject {
  RejectReason reason = RejectReason::kMalformed;
  std::string text;
};

struct Interface {
  std::string name;     // "eth0", "veth-a"
  std::string address;  // IPv4 dotted quad
  uint8_t prefix = 0;   // netmask length
};

struct Facts {
  std::string name;     // host name
  std::string os;       // "Linux 6.1.0 x86_64"
  std::string cpu;      // processor name
  std::string simd;     // Highway's chosen target, e.g. "AVX3_DL"
  std::string boot_id;  // members with the same boot id share one host (and its memory bus)
  uint32_t cores = 0;
  uint64_t memory_total = 0;      // bytes
  uint64_t memory_available = 0;  // bytes, the host's (MemAvailable)
  uint64_t memory_offered = 0;    // bytes the member lends the pod (--memory), <= available
  double read_bytes_per_s = 0;    // measured memory read bandwidth, one thread
  std::vector<std::string> rdma;  // RDMA devices the OS lists (/sys/class/infiniband)
  std::vector<Interface> interfaces;
};

struct KnownMember {
  MemberId id{};
  std::string address;  // where the sender reaches it
  uint16_t port = 0;
};

struct Heartbeat {
  std::vector<KnownMember> members;  // the members the sender is connected to, itself excluded
  bool measuring = false;            // the sender has links left to measure (or is measuring)
};

struct ProbeStart {
  uint64_t probe = 0;     // names the probe's group
  std::string host;       // the initiator's address on the interface under test
  uint16_t port = 0;      // the initiator's listener there (rank 1 of the probe's group)
  std::string peer_host;  // the receiver's address on that interface (it listens there)
};

struct ProbeReady {
  uint64_t probe = 0;
  std::string host;  // where the receiver listens as rank 0
  uint16_t port = 0;
};

struct LinkMeasure {
  MemberId a{}, b{};        // a measured; b answered
  std::string a_host, b_host;
  std::string interface;    // a's interface name
  double latency_s = 0;     // one-way, 64-byte messages (link_probe.h)
  double bytes_per_s = 0;   // one direction, 4 MiB messages
};

struct Links {
  std::vector<LinkMeasure> links;
};

// `loom cluster run`: the member that runs rank 0 asks the others to start the other ranks.  A
// daemon only ever starts its own `loom` binary with `run` or `serve`, never another program.
inline constexpr int64_t kMaxArgs = 256;
inline constexpr int64_t kMaxArgBytes = 32 << 10;

struct RankReserve {
  uint64_t launch = 0;
  uint16_t rank = 0;
};

struct RankReserved {
  uint64_t launch = 0;
  uint16_t rank = 0;
  uint16_t port = 0;  // 0 when it cannot (error says why)
  std::string error;
};

struct RankStart {
  uint64_t launch = 0;
  uint16_t rank = 0;
  std::string group_id;
  std::vector<std::string> peers;  // LOOM_PEERS as this rank dials them (its own: 0.0.0.0:port)
  std::vector<std::string> args;   // after the binary: "run" or "serve", then its options
};

struct RankExit {
  uint64_t launch = 0;
  uint16_t rank = 0;
  int32_t code = 0;  // exit code, or 128 + signal
  std::string text;  // the last line it wrote, for the requester's log
};

// Encodes one envelope.  Reject is written with a zero MAC (see above).
std::vector<uint8_t> EncodeAnnounce(const Announce& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeHello(const Hello& m, const Key& key);
std::vector<uint8_t> EncodeWelcome(const Welcome& m, const Key& key);
std::vector<uint8_t> EncodeConfirm(const Confirm& m, const Key& key);
std::vector<uint8_t> EncodeReject(const Reject& m);
std::vector<uint8_t> EncodeFacts(const Facts& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeHeartbeat(const Heartbeat& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeProbeStart(const ProbeStart& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeProbeReady(const ProbeReady& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeProbeBusy(uint64_t probe, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeLinks(const Links& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeRankReserve(const RankReserve& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeRankReserved(const RankReserved& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeRankStart(const RankStart& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeRankExit(const RankExit& m, const Key& key, uint64_t seq);
std::vector<uint8_t> EncodeRankStop(uint64_t launch, const Key& key, uint64_t seq);

// A received envelope whose header and length were checked (the MAC is checked by Open).
struct Envelope {
  MessageType type = MessageType::kAnnounce;
  uint64_t seq = 0;
  std::span<const uint8_t> body;
  std::span<const uint8_t> signed_bytes;  // header + body
  std::span<const uint8_t> mac;
};

// How many bytes the envelope starting with `header` (kHeaderBytes) occupies in all, after
// checking magic, version, type and length.
StatusOr<int64_t> EnvelopeSize(std::span<const uint8_t> header);
// Splits one complete envelope (exactly `bytes`).
StatusOr<Envelope> SplitEnvelope(std::span<const uint8_t> bytes);
// Checks the MAC under `key`.
Status Authenticate(const Envelope& e, const Key& key);

// Body decoders (the envelope's type must match).
StatusOr<Announce> DecodeAnnounce(const Envelope& e);
StatusOr<Hello> DecodeHello(const Envelope& e);
StatusOr<Welcome> DecodeWelcome(const Envelope& e);
StatusOr<Confirm> DecodeConfirm(const Envelope& e);
StatusOr<Reject> DecodeReject(const Envelope& e);
StatusOr<Facts> DecodeFacts(const Envelope& e);
StatusOr<Heartbeat> DecodeHeartbeat(const Envelope& e);
StatusOr<ProbeStart> DecodeProbeStart(const Envelope& e);
StatusOr<ProbeReady> DecodeProbeReady(const Envelope& e);
StatusOr<uint64_t> DecodeProbeBusy(const Envelope& e);
StatusOr<Links> DecodeLinks(const Envelope& e);
StatusOr<RankReserve> DecodeRankReserve(const Envelope& e);
StatusOr<RankReserved> DecodeRankReserved(const Envelope& e);
StatusOr<RankStart> DecodeRankStart(const Envelope& e);
StatusOr<RankExit> DecodeRankExit(const Envelope& e);
StatusOr<uint64_t> DecodeRankStop(const Envelope& e);

}  // namespace loom::cluster
