#include "loom/comm/wire.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "loom/base/byte_reader.h"
#include "loom/comm/group.h"

namespace loom::comm {

namespace {

// Little-endian writer over a fixed-size output (the encoders know their sizes statically).
class Writer {
 public:
  explicit Writer(std::span<uint8_t> out) : out_(out) {}
  template <class T>
  void Put(T v) {
    std::memcpy(out_.data() + at_, &v, sizeof(T));
    at_ += sizeof(T);
  }
  void PutBytes(std::span<const uint8_t> b) {
    std::memcpy(out_.data() + at_, b.data(), b.size());
    at_ += b.size();
  }
  void Zero() {  // pads the rest
    std::memset(out_.data() + at_, 0, out_.size() - at_);
    at_ = out_.size();
  }

 private:
  std::span<uint8_t> out_;
  size_t at_ = 0;
};

base::ByteReader ReaderOf(std::span<const uint8_t> bytes) {
  return base::ByteReader(std::as_bytes(bytes));
}

// Reads and checks magic, version and op (which must be `want`, or any data op if want is 0).
Status ReadPreamble(base::ByteReader& r, std::string_view what, size_t need, uint8_t* op) {
  if (static_cast<size_t>(r.size()) != need) {
    return DataLossError("wire: ", what, " is ", r.size(), " bytes, expected ", need);
  }
  uint32_t magic = 0;
  uint16_t version = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&magic));
  LOOM_RETURN_IF_ERROR(r.Read(&version));
  LOOM_RETURN_IF_ERROR(r.Read(op));
  if (magic != kWireMagic) {
    return DataLossError("wire: ", what, " has magic 0x", std::hex, magic, " (expected 0x",
                         kWireMagic, std::dec, "): the peer is not a Loom rank");
  }
  if (version != kWireVersion) {
    return FailedPreconditionError("wire: ", what, " uses wire version ", version,
                                   " but this build speaks version ", kWireVersion,
                                   " (run the same Loom build on every rank)");
  }
  return OkStatus();
}

Status ExpectOp(std::string_view what, uint8_t op, Op want) {
  if (op != static_cast<uint8_t>(want)) {
    return DataLossError("wire: ", what, " has op ", int{op}, ", expected ", int{uint8_t(want)},
                         " (", OpName(want), ")");
  }
  return OkStatus();
}

Status ReadNonce(base::ByteReader& r, std::span<uint8_t> out) {
  std::span<const std::byte> s;
  LOOM_RETURN_IF_ERROR(r.ReadSpan(static_cast<int64_t>(out.size()), &s));
  std::memcpy(out.data(), s.data(), out.size());
  return OkStatus();
}

}  // namespace

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kServerHello:
      return "server-hello";
    case Op::kClientHello:
      return "client-hello";
    case Op::kAccept:
      return "accept";
    case Op::kReject:
      return "reject";
    case Op::kSend:
      return "send";
    case Op::kAllReduce:
      return "all-reduce";
    case Op::kAllGather:
      return "all-gather";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kBarrier:
      return "barrier";
  }
  return "unknown-op";
}

void EncodeHeader(const MessageHeader& h, std::span<uint8_t, kHeaderBytes> out) {
  Writer w(out);
  w.Put(kWireMagic);
  w.Put(kWireVersion);
  w.Put(static_cast<uint8_t>(h.op));
  w.Put(h.dtype);
  w.Put(h.tag);
  w.Put(uint32_t{0});
  w.Put(h.group);
  w.Put(h.seq);
  w.Put(h.index);
  w.Put(h.offset);
  w.Put(h.bytes);
  w.Put(h.send_time_ns);
}

Status DecodeHeader(std::span<const uint8_t> bytes, MessageHeader* out) {
  base::ByteReader r = ReaderOf(bytes);
  uint8_t op = 0;
  LOOM_RETURN_IF_ERROR(ReadPreamble(r, "message header", kHeaderBytes, &op));
  MessageHeader h;
  uint32_t reserved = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&h.dtype));
  LOOM_RETURN_IF_ERROR(r.Read(&h.tag));
  LOOM_RETURN_IF_ERROR(r.Read(&reserved));
  LOOM_RETURN_IF_ERROR(r.Read(&h.group));
  LOOM_RETURN_IF_ERROR(r.Read(&h.seq));
  LOOM_RETURN_IF_ERROR(r.Read(&h.index));
  LOOM_RETURN_IF_ERROR(r.Read(&h.offset));
  LOOM_RETURN_IF_ERROR(r.Read(&h.bytes));
  LOOM_RETURN_IF_ERROR(r.Read(&h.send_time_ns));
  if (op < static_cast<uint8_t>(Op::kSend) || op > static_cast<uint8_t>(Op::kBarrier)) {
    return DataLossError("wire: message header has unknown op ", int{op});
  }
  h.op = static_cast<Op>(op);
  if (reserved != 0) {
    return DataLossError("wire: ", OpName(h.op), " header has reserved field 0x", std::hex,
                         reserved, std::dec, " (must be 0)");
  }
  if (h.op == Op::kAllReduce ? !IsValidElementType(h.dtype) : h.dtype != 0) {
    return DataLossError("wire: ", OpName(h.op), " header has element type ", int{h.dtype});
  }
  if (h.tag > static_cast<uint32_t>(kMaxTag) || (h.op != Op::kSend && h.tag != 0)) {
    return DataLossError("wire: ", OpName(h.op), " header has tag ", h.tag);
  }
  if (h.seq == 0) return DataLossError("wire: ", OpName(h.op), " header has sequence number 0");
  if (h.op == Op::kSend ? h.index != 0 : h.index == 0) {
    return DataLossError("wire: ", OpName(h.op), " header has collective index ", h.index);
  }
  if (h.bytes > kMaxPayloadBytes || h.offset > kMaxPayloadBytes) {
    return DataLossError("wire: ", OpName(h.op), " header announces ", h.bytes, " bytes at offset ",
                         h.offset, " (limit ", kMaxPayloadBytes, ")");
  }
  if (h.op == Op::kAllReduce && h.bytes % 2 != 0) {
    return DataLossError("wire: all-reduce payload of ", h.bytes, " bytes is not whole elements");
  }
  if (h.op == Op::kBarrier && (h.bytes != 0 || h.offset != 0)) {
    return DataLossError("wire: barrier header carries ", h.bytes, " bytes");
  }
  *out = h;
  return OkStatus();
}

void EncodeServerHello(const ServerHello& m, std::span<uint8_t, kServerHelloBytes> out) {
  Writer w(out);
  w.Put(kWireMagic);
  w.Put(kWireVersion);
  w.Put(static_cast<uint8_t>(Op::kServerHello));
  w.Put(uint8_t{0});
  w.Put(m.group);
  w.Put(m.rank);
  w.Put(m.size);
  w.PutBytes(m.nonce);
}

void EncodeClientHello(const ClientHello& m, std::span<uint8_t, kClientHelloBytes> out) {
  Writer w(out);
  w.Put(kWireMagic);
  w.Put(kWireVersion);
  w.Put(static_cast<uint8_t>(Op::kClientHello));
  w.Put(uint8_t{0});
  w.Put(m.group);
  w.Put(m.rank);
  w.Put(m.size);
  w.Put(m.server_rank);
  w.Put(m.channel);
  w.PutBytes(m.nonce);
  w.PutBytes(m.mac);
}

void EncodeHelloReply(const HelloReply& m, std::span<uint8_t, kHelloReplyBytes> out) {
  Writer w(out);
  w.Put(kWireMagic);
  w.Put(kWireVersion);
  w.Put(static_cast<uint8_t>(m.accept ? Op::kAccept : Op::kReject));
  w.Put(static_cast<uint8_t>(m.reason));
  w.PutBytes(m.mac);
}

Status DecodeServerHello(std::span<const uint8_t> bytes, ServerHello* out) {
  base::ByteReader r = ReaderOf(bytes);
  uint8_t op = 0;
  uint8_t reserved = 0;
  LOOM_RETURN_IF_ERROR(ReadPreamble(r, "server hello", kServerHelloBytes, &op));
  LOOM_RETURN_IF_ERROR(ExpectOp("server hello", op, Op::kServerHello));
  ServerHello m;
  LOOM_RETURN_IF_ERROR(r.Read(&reserved));
  LOOM_RETURN_IF_ERROR(r.Read(&m.group));
  LOOM_RETURN_IF_ERROR(r.Read(&m.rank));
  LOOM_RETURN_IF_ERROR(r.Read(&m.size));
  LOOM_RETURN_IF_ERROR(ReadNonce(r, m.nonce));
  if (reserved != 0) return DataLossError("wire: server hello has reserved byte ", int{reserved});
  if (m.size == 0 || m.rank >= m.size) {
    return DataLossError("wire: server hello claims rank ", m.rank, " of ", m.size);
  }
  *out = m;
  return OkStatus();
}

Status DecodeClientHello(std::span<const uint8_t> bytes, ClientHello* out) {
  base::ByteReader r = ReaderOf(bytes);
  uint8_t op = 0;
  uint8_t reserved = 0;
  LOOM_RETURN_IF_ERROR(ReadPreamble(r, "client hello", kClientHelloBytes, &op));
  LOOM_RETURN_IF_ERROR(ExpectOp("client hello", op, Op::kClientHello));
  ClientHello m;
  LOOM_RETURN_IF_ERROR(r.Read(&reserved));
  LOOM_RETURN_IF_ERROR(r.Read(&m.group));
  LOOM_RETURN_IF_ERROR(r.Read(&m.rank));
  LOOM_RETURN_IF_ERROR(r.Read(&m.size));
  LOOM_RETURN_IF_ERROR(r.Read(&m.server_rank));
  LOOM_RETURN_IF_ERROR(r.Read(&m.channel));
  LOOM_RETURN_IF_ERROR(ReadNonce(r, m.nonce));
  LOOM_RETURN_IF_ERROR(ReadNonce(r, m.mac));
  if (reserved != 0) return DataLossError("wire: client hello has reserved byte ", int{reserved});
  if (m.size == 0 || m.rank >= m.size || m.server_rank >= m.size) {
    return DataLossError("wire: client hello claims rank ", m.rank, " -> ", m.server_rank, " of ",
                         m.size);
  }
  *out = m;
  return OkStatus();
}

Status DecodeHelloReply(std::span<const uint8_t> bytes, HelloReply* out) {
  base::ByteReader r = ReaderOf(bytes);
  uint8_t op = 0;
  uint8_t reason = 0;
  LOOM_RETURN_IF_ERROR(ReadPreamble(r, "hello reply", kHelloReplyBytes, &op));
  LOOM_RETURN_IF_ERROR(r.Read(&reason));
  HelloReply m;
  LOOM_RETURN_IF_ERROR(ReadNonce(r, m.mac));
  if (op == static_cast<uint8_t>(Op::kAccept)) {
    if (reason != 0) return DataLossError("wire: accept reply carries reason ", int{reason});
    m.accept = true;
  } else if (op == static_cast<uint8_t>(Op::kReject)) {
    if (reason < 1 || reason > 4) return DataLossError("wire: reject reason ", int{reason});
    m.reason = static_cast<RejectReason>(reason);
  } else {
    return DataLossError("wire: hello reply has op ", int{op});
  }
  *out = m;
  return OkStatus();
}

std::string_view RejectReasonText(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNone:
      return "accepted";
    case RejectReason::kWrongGroup:
      return "wrong group id or group size";
    case RejectReason::kAuthFailed:
      return "authentication failed (wrong group secret)";
    case RejectReason::kBadRank:
      return "unexpected rank or channel";
    case RejectReason::kDuplicate:
      return "duplicate connection for this rank and channel";
  }
  return "unknown reason";
}

uint64_t GroupFingerprint(std::string_view group_id) {
  const Digest d = Sha256Of(group_id);
  uint64_t v = 0;
  std::memcpy(&v, d.data(), sizeof(v));
  return v;
}

Digest HelloMac(std::string_view secret, std::string_view role, uint64_t group, uint32_t size,
                uint32_t client_rank, uint32_t server_rank, uint32_t channel,
                const Nonce& server_nonce, const Nonce& client_nonce) {
  uint8_t fields[28];
  std::memcpy(fields, &group, 8);
  std::memcpy(fields + 8, &size, 4);
  std::memcpy(fields + 12, &client_rank, 4);
  std::memcpy(fields + 16, &server_rank, 4);
  std::memcpy(fields + 20, &channel, 4);
  std::memcpy(fields + 24, &kWireVersion, 2);
  fields[26] = fields[27] = 0;
  static constexpr std::string_view kLabel = "loom-comm-hello";
  const std::span<const uint8_t> parts[] = {
      {reinterpret_cast<const uint8_t*>(kLabel.data()), kLabel.size()},
      {reinterpret_cast<const uint8_t*>(role.data()), role.size()},
      {fields, sizeof(fields)},
      server_nonce,
      client_nonce,
  };
  return HmacSha256(secret, parts);
}

Status RandomNonce(Nonce* nonce) {
  size_t got = 0;
  while (got < nonce->size()) {
    const ssize_t n = ::getrandom(nonce->data() + got, nonce->size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError("wire: getrandom failed: ", std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace loom::comm
