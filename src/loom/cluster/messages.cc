#include "loom/cluster/messages.h"

#include <cmath>
#include <cstring>

#include "loom/base/status.h"

namespace loom::cluster {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'M', 'C', 'L'};

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// Little-endian body writer.
class Writer {
 public:
  template <class T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void Bytes(std::span<const uint8_t> b) { bytes_.insert(bytes_.end(), b.begin(), b.end()); }
  // Strings longer than kMaxLabelBytes are cut (the decoder would refuse them).
  void Str(std::string_view s) {
    if (static_cast<int64_t>(s.size()) > kMaxLabelBytes) s = s.substr(0, kMaxLabelBytes);
    Put<uint16_t>(static_cast<uint16_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  // Long strings (command-line arguments): u32 length, cut at kMaxArgBytes.
  void LongStr(std::string_view s) {
    if (static_cast<int64_t>(s.size()) > kMaxArgBytes) s = s.substr(0, kMaxArgBytes);
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

// Body reader: every read names the field it reads in its error.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, MessageType type) : bytes_(bytes), type_(type) {}

  template <class T>
  Status Get(std::string_view field, T* out) {
    LOOM_RETURN_IF_ERROR(Need(field, sizeof(T)));
    std::memcpy(out, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return OkStatus();
  }
  template <size_t N>
  Status Array(std::string_view field, std::array<uint8_t, N>* out) {
    LOOM_RETURN_IF_ERROR(Need(field, N));
    std::memcpy(out->data(), bytes_.data() + at_, N);
    at_ += N;
    return OkStatus();
  }
  Status Str(std::string_view field, std::string* out) {
    uint16_t n = 0;
    LOOM_RETURN_IF_ERROR(Get(field, &n));
    if (n > kMaxLabelBytes) return Bad(field, "is ", n, " bytes long (at most ", kMaxLabelBytes, ")");
    LOOM_RETURN_IF_ERROR(Need(field, n));
    out->assign(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    for (unsigned char c : *out) {
      if (c < 0x20 || c == 0x7f) return Bad(field, "holds a control character");
    }
    return OkStatus();
  }
  Status Count(std::string_view field, uint16_t* n, int64_t max = kMaxListItems) {
    LOOM_RETURN_IF_ERROR(Get(field, n));
    if (*n > max) return Bad(field, "lists ", *n, " items (at most ", max, ")");
    return OkStatus();
  }
  Status LongStr(std::string_view field, std::string* out) {
    uint32_t n = 0;
    LOOM_RETURN_IF_ERROR(Get(field, &n));
    if (n > kMaxArgBytes) return Bad(field, "is ", n, " bytes long (at most ", kMaxArgBytes, ")");
    LOOM_RETURN_IF_ERROR(Need(field, n));
    out->assign(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    if (out->find('\0') != std::string::npos) return Bad(field, "holds a NUL byte");
    return OkStatus();
  }
  Status Finite(std::string_view field, double* v) {
    LOOM_RETURN_IF_ERROR(Get(field, v));
    if (!std::isfinite(*v) || *v < 0) return Bad(field, "is not a finite number >= 0");
    return OkStatus();
  }
  Status End() const {
    if (at_ != bytes_.size()) {
      return DataLossError("cluster ", MessageTypeName(type_), ": ", bytes_.size() - at_,
                           " unexpected bytes after the last field");
    }
    return OkStatus();
  }
  template <class... Args>
  Status Bad(std::string_view field, const Args&... args) const {
    return DataLossError("cluster ", MessageTypeName(type_), ": ", field, " ", args...);
  }

 private:
  Status Need(std::string_view field, size_t n) const {
    if (n > bytes_.size() - at_) return Bad(field, "is cut short (message truncated)");
    return OkStatus();
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  MessageType type_;
};

std::vector<uint8_t> Seal(MessageType type, uint64_t seq, std::vector<uint8_t> body,
                          const Key* key) {
  std::vector<uint8_t> out(static_cast<size_t>(kHeaderBytes) + body.size() + kMacBytes);
  std::memcpy(out.data(), kMagic, 4);
  const uint16_t version = kClusterVersion, t = static_cast<uint16_t>(type);
  const uint32_t length = static_cast<uint32_t>(body.size()), reserved = 0;
  std::memcpy(out.data() + 4, &version, 2);
  std::memcpy(out.data() + 6, &t, 2);
  std::memcpy(out.data() + 8, &length, 4);
  std::memcpy(out.data() + 12, &reserved, 4);
  std::memcpy(out.data() + 16, &seq, 8);
  if (!body.empty()) std::memcpy(out.data() + kHeaderBytes, body.data(), body.size());
  const size_t signed_bytes = out.size() - kMacBytes;
  comm::Digest mac{};
  if (key != nullptr) {
    const std::span<const uint8_t> parts[] = {{out.data(), signed_bytes}};
    mac = comm::HmacSha256(
        std::string_view(reinterpret_cast<const char*>(key->data()), key->size()), parts);
  }
  std::memcpy(out.data() + signed_bytes, mac.data(), mac.size());
  return out;
}

bool KnownType(uint16_t t) {
  switch (static_cast<MessageType>(t)) {
    case MessageType::kAnnounce:
    case MessageType::kHello:
    case MessageType::kWelcome:
    case MessageType::kConfirm:
    case MessageType::kReject:
    case MessageType::kFacts:
    case MessageType::kHeartbeat:
    case MessageType::kProbeStart:
    case MessageType::kProbeBusy:
    case MessageType::kLinks:
    case MessageType::kProbeReady:
    case MessageType::kRankReserve:
    case MessageType::kRankReserved:
    case MessageType::kRankStart:
    case MessageType::kRankExit:
    case MessageType::kRankStop:
      return true;
  }
  return false;
}

Status Expect(const Envelope& e, MessageType type) {
  if (e.type != type) {
    return InvalidArgumentError("cluster: expected ", MessageTypeName(type), ", got ",
                                MessageTypeName(e.type));
  }
  return OkStatus();
}

void PutLink(Writer& w, const LinkMeasure& l) {
  w.Bytes(l.a);
  w.Bytes(l.b);
  w.Str(l.a_host);
  w.Str(l.b_host);
  w.Str(l.interface);
  w.Put(l.latency_s);
  w.Put(l.bytes_per_s);
}

}  // namespace

std::string MemberIdHex(const MemberId& id) { return Hex(id); }
std::string ShortId(const MemberId& id) { return Hex(id).substr(0, 8); }

std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kAnnounce: return "announce";
    case MessageType::kHello: return "hello";
    case MessageType::kWelcome: return "welcome";
    case MessageType::kConfirm: return "confirm";
    case MessageType::kReject: return "reject";
    case MessageType::kFacts: return "facts";
    case MessageType::kHeartbeat: return "heartbeat";
    case MessageType::kProbeStart: return "probe-start";
    case MessageType::kProbeBusy: return "probe-busy";
    case MessageType::kLinks: return "links";
    case MessageType::kProbeReady: return "probe-ready";
    case MessageType::kRankReserve: return "rank-reserve";
    case MessageType::kRankReserved: return "rank-reserved";
    case MessageType::kRankStart: return "rank-start";
    case MessageType::kRankExit: return "rank-exit";
    case MessageType::kRankStop: return "rank-stop";
  }
  return "unknown";
}

Key DeriveKey(std::string_view secret, KeyPurpose purpose) {
  const std::string_view label =
      purpose == KeyPurpose::kAnnounce ? "loom-cluster-v1 announce" : "loom-cluster-v1 handshake";
  const std::span<const uint8_t> parts[] = {
      {reinterpret_cast<const uint8_t*>(label.data()), label.size()}};
  return comm::HmacSha256(secret, parts);
}

Key DeriveSessionKey(std::string_view secret, const Nonce& client, const Nonce& server) {
  static constexpr std::string_view kLabel = "loom-cluster-v1 session";
  const std::span<const uint8_t> parts[] = {
      {reinterpret_cast<const uint8_t*>(kLabel.data()), kLabel.size()}, client, server};
  return comm::HmacSha256(secret, parts);
}

std::vector<uint8_t> EncodeAnnounce(const Announce& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Bytes(m.id);
  w.Put(m.port);
  w.Str(m.name);
  return Seal(MessageType::kAnnounce, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeHello(const Hello& m, const Key& key) {
  Writer w;
  w.Bytes(m.id);
  w.Bytes(m.nonce);
  w.Put(m.port);
  w.Str(m.name);
  return Seal(MessageType::kHello, 0, w.Take(), &key);
}

std::vector<uint8_t> EncodeWelcome(const Welcome& m, const Key& key) {
  Writer w;
  w.Bytes(m.id);
  w.Bytes(m.nonce);
  w.Bytes(m.echo);
  w.Put(m.port);
  w.Str(m.name);
  return Seal(MessageType::kWelcome, 0, w.Take(), &key);
}

std::vector<uint8_t> EncodeConfirm(const Confirm& m, const Key& key) {
  Writer w;
  w.Bytes(m.echo);
  return Seal(MessageType::kConfirm, 1, w.Take(), &key);
}

std::vector<uint8_t> EncodeReject(const Reject& m) {
  Writer w;
  w.Put(static_cast<uint16_t>(m.reason));
  w.Str(m.text);
  return Seal(MessageType::kReject, 0, w.Take(), nullptr);
}

std::vector<uint8_t> EncodeFacts(const Facts& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Str(m.name);
  w.Str(m.os);
  w.Str(m.cpu);
  w.Str(m.simd);
  w.Str(m.boot_id);
  w.Put(m.cores);
  w.Put(m.memory_total);
  w.Put(m.memory_available);
  w.Put(m.memory_offered);
  w.Put(m.read_bytes_per_s);
  const size_t n_rdma = std::min<size_t>(m.rdma.size(), kMaxListItems);
  w.Put(static_cast<uint16_t>(n_rdma));
  for (size_t i = 0; i < n_rdma; ++i) w.Str(m.rdma[i]);
  const size_t n_if = std::min<size_t>(m.interfaces.size(), kMaxListItems);
  w.Put(static_cast<uint16_t>(n_if));
  for (size_t i = 0; i < n_if; ++i) {
    w.Str(m.interfaces[i].name);
    w.Str(m.interfaces[i].address);
    w.Put(m.interfaces[i].prefix);
  }
  return Seal(MessageType::kFacts, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeHeartbeat(const Heartbeat& m, const Key& key, uint64_t seq) {
  Writer w;
  const size_t n = std::min<size_t>(m.members.size(), kMaxListItems);
  w.Put(static_cast<uint16_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.Bytes(m.members[i].id);
    w.Str(m.members[i].address);
    w.Put(m.members[i].port);
  }
  w.Put(static_cast<uint8_t>(m.measuring ? 1 : 0));
  return Seal(MessageType::kHeartbeat, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeProbeStart(const ProbeStart& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(m.probe);
  w.Str(m.host);
  w.Put(m.port);
  w.Str(m.peer_host);
  return Seal(MessageType::kProbeStart, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeProbeReady(const ProbeReady& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(m.probe);
  w.Str(m.host);
  w.Put(m.port);
  return Seal(MessageType::kProbeReady, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeProbeBusy(uint64_t probe, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(probe);
  return Seal(MessageType::kProbeBusy, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeLinks(const Links& m, const Key& key, uint64_t seq) {
  Writer w;
  const size_t n = std::min<size_t>(m.links.size(), kMaxListItems);
  w.Put(static_cast<uint16_t>(n));
  for (size_t i = 0; i < n; ++i) PutLink(w, m.links[i]);
  return Seal(MessageType::kLinks, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeRankReserve(const RankReserve& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(m.launch);
  w.Put(m.rank);
  return Seal(MessageType::kRankReserve, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeRankReserved(const RankReserved& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(m.launch);
  w.Put(m.rank);
  w.Put(m.port);
  w.Str(m.error);
  return Seal(MessageType::kRankReserved, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeRankStart(const RankStart& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(m.launch);
  w.Put(m.rank);
  w.Str(m.group_id);
  const size_t np = std::min<size_t>(m.peers.size(), kMaxListItems);
  w.Put(static_cast<uint16_t>(np));
  for (size_t i = 0; i < np; ++i) w.Str(m.peers[i]);
  const size_t na = std::min<size_t>(m.args.size(), kMaxArgs);
  w.Put(static_cast<uint16_t>(na));
  for (size_t i = 0; i < na; ++i) w.LongStr(m.args[i]);
  return Seal(MessageType::kRankStart, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeRankExit(const RankExit& m, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(m.launch);
  w.Put(m.rank);
  w.Put(m.code);
  w.Str(m.text);
  return Seal(MessageType::kRankExit, seq, w.Take(), &key);
}

std::vector<uint8_t> EncodeRankStop(uint64_t launch, const Key& key, uint64_t seq) {
  Writer w;
  w.Put(launch);
  return Seal(MessageType::kRankStop, seq, w.Take(), &key);
}

StatusOr<int64_t> EnvelopeSize(std::span<const uint8_t> header) {
  if (static_cast<int64_t>(header.size()) < kHeaderBytes) {
    return DataLossError("cluster: message of ", header.size(), " bytes is shorter than its ",
                         kHeaderBytes, "-byte header");
  }
  if (std::memcmp(header.data(), kMagic, 4) != 0) {
    return DataLossError("cluster: not a loom cluster message (bad magic)");
  }
  uint16_t version = 0, type = 0;
  uint32_t length = 0, reserved = 0;
  std::memcpy(&version, header.data() + 4, 2);
  std::memcpy(&type, header.data() + 6, 2);
  std::memcpy(&length, header.data() + 8, 4);
  std::memcpy(&reserved, header.data() + 12, 4);
  if (version != kClusterVersion) {
    return FailedPreconditionError("cluster: the peer speaks protocol version ", version,
                                   ", this daemon version ", kClusterVersion,
                                   " (run the same Loom release on every member)");
  }
  if (!KnownType(type)) return DataLossError("cluster: unknown message type ", type);
  if (reserved != 0) return DataLossError("cluster: reserved header field is ", reserved);
  if (length > kMaxBodyBytes) {
    return DataLossError("cluster: ", MessageTypeName(static_cast<MessageType>(type)), " body of ",
                         length, " bytes (at most ", kMaxBodyBytes, ")");
  }
  return kHeaderBytes + int64_t{length} + kMacBytes;
}

StatusOr<Envelope> SplitEnvelope(std::span<const uint8_t> bytes) {
  LOOM_ASSIGN_OR_RETURN(int64_t size, EnvelopeSize(bytes));
  if (size != static_cast<int64_t>(bytes.size())) {
    return DataLossError("cluster: message is ", bytes.size(), " bytes but its header says ", size);
  }
  Envelope e;
  uint16_t type = 0;
  std::memcpy(&type, bytes.data() + 6, 2);
  e.type = static_cast<MessageType>(type);
  std::memcpy(&e.seq, bytes.data() + 16, 8);
  e.signed_bytes = bytes.subspan(0, size - kMacBytes);
  e.body = bytes.subspan(kHeaderBytes, size - kHeaderBytes - kMacBytes);
  e.mac = bytes.subspan(size - kMacBytes);
  return e;
}

Status Authenticate(const Envelope& e, const Key& key) {
  const std::span<const uint8_t> parts[] = {e.signed_bytes};
  const comm::Digest mac = comm::HmacSha256(
      std::string_view(reinterpret_cast<const char*>(key.data()), key.size()), parts);
  if (!comm::DigestEqual(mac, e.mac)) {
    return PermissionDeniedError("cluster: ", MessageTypeName(e.type),
                                 " failed authentication (wrong cluster secret?)");
  }
  return OkStatus();
}

StatusOr<Announce> DecodeAnnounce(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kAnnounce));
  Reader r(e.body, e.type);
  Announce m;
  LOOM_RETURN_IF_ERROR(r.Array("id", &m.id));
  LOOM_RETURN_IF_ERROR(r.Get("port", &m.port));
  LOOM_RETURN_IF_ERROR(r.Str("name", &m.name));
  LOOM_RETURN_IF_ERROR(r.End());
  if (m.port == 0) return r.Bad("port", "is 0");
  return m;
}

StatusOr<Hello> DecodeHello(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kHello));
  Reader r(e.body, e.type);
  Hello m;
  LOOM_RETURN_IF_ERROR(r.Array("id", &m.id));
  LOOM_RETURN_IF_ERROR(r.Array("nonce", &m.nonce));
  LOOM_RETURN_IF_ERROR(r.Get("port", &m.port));
  LOOM_RETURN_IF_ERROR(r.Str("name", &m.name));
  LOOM_RETURN_IF_ERROR(r.End());
  return m;
}

StatusOr<Welcome> DecodeWelcome(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kWelcome));
  Reader r(e.body, e.type);
  Welcome m;
  LOOM_RETURN_IF_ERROR(r.Array("id", &m.id));
  LOOM_RETURN_IF_ERROR(r.Array("nonce", &m.nonce));
  LOOM_RETURN_IF_ERROR(r.Array("echo", &m.echo));
  LOOM_RETURN_IF_ERROR(r.Get("port", &m.port));
  LOOM_RETURN_IF_ERROR(r.Str("name", &m.name));
  LOOM_RETURN_IF_ERROR(r.End());
  return m;
}

StatusOr<Confirm> DecodeConfirm(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kConfirm));
  Reader r(e.body, e.type);
  Confirm m;
  LOOM_RETURN_IF_ERROR(r.Array("echo", &m.echo));
  LOOM_RETURN_IF_ERROR(r.End());
  return m;
}

StatusOr<Reject> DecodeReject(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kReject));
  Reader r(e.body, e.type);
  Reject m;
  uint16_t reason = 0;
  LOOM_RETURN_IF_ERROR(r.Get("reason", &reason));
  LOOM_RETURN_IF_ERROR(r.Str("text", &m.text));
  LOOM_RETURN_IF_ERROR(r.End());
  if (reason < 1 || reason > 4) return r.Bad("reason", "is ", reason, " (1-4)");
  m.reason = static_cast<RejectReason>(reason);
  return m;
}

StatusOr<Facts> DecodeFacts(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kFacts));
  Reader r(e.body, e.type);
  Facts m;
  LOOM_RETURN_IF_ERROR(r.Str("name", &m.name));
  LOOM_RETURN_IF_ERROR(r.Str("os", &m.os));
  LOOM_RETURN_IF_ERROR(r.Str("cpu", &m.cpu));
  LOOM_RETURN_IF_ERROR(r.Str("simd", &m.simd));
  LOOM_RETURN_IF_ERROR(r.Str("boot_id", &m.boot_id));
  LOOM_RETURN_IF_ERROR(r.Get("cores", &m.cores));
  LOOM_RETURN_IF_ERROR(r.Get("memory_total", &m.memory_total));
  LOOM_RETURN_IF_ERROR(r.Get("memory_available", &m.memory_available));
  LOOM_RETURN_IF_ERROR(r.Get("memory_offered", &m.memory_offered));
  LOOM_RETURN_IF_ERROR(r.Finite("read_bytes_per_s", &m.read_bytes_per_s));
  uint16_t n = 0;
  LOOM_RETURN_IF_ERROR(r.Count("rdma", &n));
  m.rdma.resize(n);
  for (auto& d : m.rdma) LOOM_RETURN_IF_ERROR(r.Str("rdma device", &d));
  LOOM_RETURN_IF_ERROR(r.Count("interfaces", &n));
  m.interfaces.resize(n);
  for (auto& i : m.interfaces) {
    LOOM_RETURN_IF_ERROR(r.Str("interface name", &i.name));
    LOOM_RETURN_IF_ERROR(r.Str("interface address", &i.address));
    LOOM_RETURN_IF_ERROR(r.Get("interface prefix", &i.prefix));
    if (i.prefix > 32) return r.Bad("interface prefix", "is ", int{i.prefix}, " (0-32)");
  }
  LOOM_RETURN_IF_ERROR(r.End());
  if (m.cores == 0 || m.cores > 65536) return r.Bad("cores", "is ", m.cores, " (1-65536)");
  if (m.memory_available > m.memory_total) {
    return r.Bad("memory_available", "exceeds memory_total");
  }
  if (m.memory_offered > m.memory_available) {
    return r.Bad("memory_offered", "exceeds memory_available");
  }
  return m;
}

StatusOr<Heartbeat> DecodeHeartbeat(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kHeartbeat));
  Reader r(e.body, e.type);
  Heartbeat m;
  uint16_t n = 0;
  LOOM_RETURN_IF_ERROR(r.Count("members", &n));
  m.members.resize(n);
  for (auto& k : m.members) {
    LOOM_RETURN_IF_ERROR(r.Array("member id", &k.id));
    LOOM_RETURN_IF_ERROR(r.Str("member address", &k.address));
    LOOM_RETURN_IF_ERROR(r.Get("member port", &k.port));
    if (k.port == 0) return r.Bad("member port", "is 0");
  }
  uint8_t measuring = 0;
  LOOM_RETURN_IF_ERROR(r.Get("measuring", &measuring));
  if (measuring > 1) return r.Bad("measuring", "is ", int{measuring}, " (0 or 1)");
  m.measuring = measuring == 1;
  LOOM_RETURN_IF_ERROR(r.End());
  return m;
}

StatusOr<ProbeStart> DecodeProbeStart(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kProbeStart));
  Reader r(e.body, e.type);
  ProbeStart m;
  LOOM_RETURN_IF_ERROR(r.Get("probe", &m.probe));
  LOOM_RETURN_IF_ERROR(r.Str("host", &m.host));
  LOOM_RETURN_IF_ERROR(r.Get("port", &m.port));
  LOOM_RETURN_IF_ERROR(r.Str("peer_host", &m.peer_host));
  LOOM_RETURN_IF_ERROR(r.End());
  if (m.port == 0) return r.Bad("port", "is 0");
  if (m.host.empty() || m.peer_host.empty()) return r.Bad("host", "is empty");
  return m;
}

StatusOr<ProbeReady> DecodeProbeReady(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kProbeReady));
  Reader r(e.body, e.type);
  ProbeReady m;
  LOOM_RETURN_IF_ERROR(r.Get("probe", &m.probe));
  LOOM_RETURN_IF_ERROR(r.Str("host", &m.host));
  LOOM_RETURN_IF_ERROR(r.Get("port", &m.port));
  LOOM_RETURN_IF_ERROR(r.End());
  if (m.port == 0) return r.Bad("port", "is 0");
  if (m.host.empty()) return r.Bad("host", "is empty");
  return m;
}

StatusOr<uint64_t> DecodeProbeBusy(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kProbeBusy));
  Reader r(e.body, e.type);
  uint64_t probe = 0;
  LOOM_RETURN_IF_ERROR(r.Get("probe", &probe));
  LOOM_RETURN_IF_ERROR(r.End());
  return probe;
}

StatusOr<Links> DecodeLinks(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kLinks));
  Reader r(e.body, e.type);
  Links m;
  uint16_t n = 0;
  LOOM_RETURN_IF_ERROR(r.Count("links", &n));
  m.links.resize(n);
  for (auto& l : m.links) {
    LOOM_RETURN_IF_ERROR(r.Array("link a", &l.a));
    LOOM_RETURN_IF_ERROR(r.Array("link b", &l.b));
    LOOM_RETURN_IF_ERROR(r.Str("link a_host", &l.a_host));
    LOOM_RETURN_IF_ERROR(r.Str("link b_host", &l.b_host));
    LOOM_RETURN_IF_ERROR(r.Str("link interface", &l.interface));
    LOOM_RETURN_IF_ERROR(r.Finite("link latency", &l.latency_s));
    LOOM_RETURN_IF_ERROR(r.Finite("link bandwidth", &l.bytes_per_s));
  }
  LOOM_RETURN_IF_ERROR(r.End());
  return m;
}

StatusOr<RankReserve> DecodeRankReserve(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kRankReserve));
  Reader r(e.body, e.type);
  RankReserve m;
  LOOM_RETURN_IF_ERROR(r.Get("launch", &m.launch));
  LOOM_RETURN_IF_ERROR(r.Get("rank", &m.rank));
  LOOM_RETURN_IF_ERROR(r.End());
  if (m.rank == 0 || m.rank >= kMaxListItems) return r.Bad("rank", "is ", m.rank, " (1-63)");
  return m;
}

StatusOr<RankReserved> DecodeRankReserved(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kRankReserved));
  Reader r(e.body, e.type);
  RankReserved m;
  LOOM_RETURN_IF_ERROR(r.Get("launch", &m.launch));
  LOOM_RETURN_IF_ERROR(r.Get("rank", &m.rank));
  LOOM_RETURN_IF_ERROR(r.Get("port", &m.port));
  LOOM_RETURN_IF_ERROR(r.Str("error", &m.error));
  LOOM_RETURN_IF_ERROR(r.End());
  if ((m.port == 0) == m.error.empty()) return r.Bad("port", "must be set exactly when no error is");
  return m;
}

StatusOr<RankStart> DecodeRankStart(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kRankStart));
  Reader r(e.body, e.type);
  RankStart m;
  LOOM_RETURN_IF_ERROR(r.Get("launch", &m.launch));
  LOOM_RETURN_IF_ERROR(r.Get("rank", &m.rank));
  LOOM_RETURN_IF_ERROR(r.Str("group_id", &m.group_id));
  uint16_t n = 0;
  LOOM_RETURN_IF_ERROR(r.Count("peers", &n));
  m.peers.resize(n);
  for (auto& p : m.peers) LOOM_RETURN_IF_ERROR(r.Str("peer", &p));
  LOOM_RETURN_IF_ERROR(r.Count("args", &n, kMaxArgs));
  m.args.resize(n);
  for (auto& a : m.args) LOOM_RETURN_IF_ERROR(r.LongStr("arg", &a));
  LOOM_RETURN_IF_ERROR(r.End());
  if (m.peers.size() < 2 || m.rank == 0 || m.rank >= m.peers.size()) {
    return r.Bad("rank", m.rank, " is not one of ranks 1..", m.peers.size() - 1);
  }
  if (m.group_id.empty()) return r.Bad("group_id", "is empty");
  if (m.args.empty() || (m.args[0] != "run" && m.args[0] != "serve")) {
    return r.Bad("args", "must start with run or serve");
  }
  return m;
}

StatusOr<RankExit> DecodeRankExit(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kRankExit));
  Reader r(e.body, e.type);
  RankExit m;
  LOOM_RETURN_IF_ERROR(r.Get("launch", &m.launch));
  LOOM_RETURN_IF_ERROR(r.Get("rank", &m.rank));
  LOOM_RETURN_IF_ERROR(r.Get("code", &m.code));
  LOOM_RETURN_IF_ERROR(r.Str("text", &m.text));
  LOOM_RETURN_IF_ERROR(r.End());
  return m;
}

StatusOr<uint64_t> DecodeRankStop(const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Expect(e, MessageType::kRankStop));
  Reader r(e.body, e.type);
  uint64_t launch = 0;
  LOOM_RETURN_IF_ERROR(r.Get("launch", &launch));
  LOOM_RETURN_IF_ERROR(r.End());
  return launch;
}

}  // namespace loom::cluster
