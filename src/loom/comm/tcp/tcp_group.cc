// The tcp backend: a full mesh of authenticated TCP connections (TCP_NODELAY, `tcp_channels`
// sockets per peer pair) driven by the Engine.  Algorithms by size:
//  - all-reduce up to tcp_oneshot_max_bytes: one-shot — every rank sends its whole buffer to every
//    other rank and sums the N contributions in rank order itself (one network latency, bitwise
//    identical results everywhere);
//  - larger all-reduce: ring reduce-scatter then ring all-gather, each step's chunk cut into
//    segments striped over the channels; incoming segments are added into place as they arrive,
//    overlapping the transfer with the reduction;
//  - all-gather: direct exchange with every peer; broadcast: direct from the root when small,
//    scatter then all-gather when large; barrier: an empty message to and from every peer.
#include <sys/socket.h>

#include <cstring>

#include "loom/base/aligned_buffer.h"
#include "loom/comm/backends.h"
#include "loom/comm/reduce.h"
#include "loom/comm/split.h"
#include "loom/comm/tcp/engine.h"
#include "loom/comm/tcp/handshake.h"
#include "loom/comm/tcp/socket.h"

namespace loom::comm::tcp {

namespace {

class TcpGroup final : public Group {
 public:
  TcpGroup(GroupConfig config, std::unique_ptr<Engine> engine)
      : config_(std::move(config)), engine_(std::move(engine)) {}
  ~TcpGroup() override {
    if (engine_) engine_->CloseAll();
  }

  int rank() const override { return config_.rank; }
  int size() const override { return config_.size; }
  std::string_view backend() const override { return "tcp"; }

  Status AllReduceSum(void* data, int64_t count, ElementType type) override;
  Status AllGather(const void* in, void* out, int64_t bytes) override;
  Status Broadcast(void* data, int64_t bytes, int root) override;
  Status Send(const void* data, int64_t bytes, int dst, int tag) override;
  Status Recv(void* data, int64_t bytes, int src, int tag) override;
  Status Barrier() override;
  StatusOr<std::unique_ptr<Group>> Split(int color, int key) override;

 private:
  int64_t Deadline() const {
    return NowNanos() + static_cast<int64_t>(config_.options.timeout_seconds * 1e9);
  }
  // Runs batch_; a failure breaks the group.
  Status RunBatch(int64_t deadline_ns, const OpLabel& label);
  Status CheckUsable() const {
    if (broken_.ok()) return OkStatus();
    return FailedPreconditionError("comm/tcp: the group is unusable after an earlier error: ",
                                   broken_.message());
  }
  // Appends transfers for `bytes` at `data` (wire offset `offset`) to or from `peer`, cut into
  // segments of whole `unit`s striped over the channels.
  void AddSegments(Transfer::Kind kind, int peer, const MessageHeader& proto, std::byte* data,
                   uint64_t offset, int64_t bytes, int64_t unit);
  Status OneShotAllReduce(std::byte* data, int64_t count, ElementType type, uint64_t index);
  Status RingAllReduce(std::byte* data, int64_t count, ElementType type, uint64_t index);

  GroupConfig config_;
  std::unique_ptr<Engine> engine_;
  uint64_t collective_index_ = 0;
  uint64_t split_index_ = 0;
  Status broken_;
  std::vector<Transfer> batch_;
  base::AlignedBuffer<std::byte> scratch_;  // one-shot: (size - 1, bytes) contributions
  std::vector<const void*> srcs_;
};

Status TcpGroup::RunBatch(int64_t deadline_ns, const OpLabel& label) {
  Status s = engine_->Run(batch_, deadline_ns, label);
  if (!s.ok()) {
    broken_ = s;
    engine_->CloseAll();  // so that the other ranks notice at once
  }
  return s;
}

void TcpGroup::AddSegments(Transfer::Kind kind, int peer, const MessageHeader& proto,
                           std::byte* data, uint64_t offset, int64_t bytes, int64_t unit) {
  const int64_t seg = std::max<int64_t>(config_.options.tcp_segment_bytes / unit * unit, unit);
  int64_t done = 0;
  int k = 0;
  do {
    const int64_t n = std::min(seg, bytes - done);
    Transfer t;
    t.kind = kind;
    t.peer = peer;
    t.channel = k % config_.options.tcp_channels;
    t.header = proto;
    t.header.offset = offset + static_cast<uint64_t>(done);
    t.header.bytes = static_cast<uint64_t>(n);
    t.data = data + done;
    batch_.push_back(t);
    done += n;
    ++k;
  } while (done < bytes);
}

Status TcpGroup::OneShotAllReduce(std::byte* data, int64_t count, ElementType type,
                                  uint64_t index) {
  const int n = size();
  const int64_t bytes = count * ElementSize(type);
  if (scratch_.size() < bytes * (n - 1)) scratch_ = base::AlignedBuffer<std::byte>(bytes * (n - 1));
  MessageHeader proto;
  proto.op = Op::kAllReduce;
  proto.dtype = static_cast<uint8_t>(type);
  proto.index = index;
  // All sends first: every peer gets this rank's contribution before it waits for anything.
  batch_.clear();
  for (int p = 0; p < n; ++p) {
    if (p != rank())
      AddSegments(Transfer::Kind::kSend, p, proto, data, 0, bytes, ElementSize(type));
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank()) continue;
    const int slot = p < rank() ? p : p - 1;
    AddSegments(Transfer::Kind::kRecv, p, proto, scratch_.data() + slot * bytes, 0, bytes,
                ElementSize(type));
  }
  LOOM_RETURN_IF_ERROR(RunBatch(Deadline(), OpLabel{"all-reduce", index, bytes}));
  srcs_.resize(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    const int slot = p < rank() ? p : p - 1;
    srcs_[p] = p == rank() ? data : scratch_.data() + slot * bytes;
  }
  SumInto(data, srcs_.data(), n, count, type);
  return OkStatus();
}

Status TcpGroup::RingAllReduce(std::byte* data, int64_t count, ElementType type, uint64_t index) {
  const int n = size();
  const int r = rank();
  const int64_t es = ElementSize(type);
  auto begin = [&](int c) { return count * c / n * es; };  // byte offset of chunk c
  auto chunk_bytes = [&](int c) { return begin(c + 1) - begin(c); };
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  MessageHeader proto;
  proto.op = Op::kAllReduce;
  proto.dtype = static_cast<uint8_t>(type);
  proto.index = index;
  const int64_t deadline = Deadline();
  const OpLabel what{"all-reduce", index, count * es, -1, 0, "ring"};
  // Reduce-scatter: after step s, this rank's chunk (r - s - 1) holds s + 2 contributions.
  for (int s = 0; s < n - 1; ++s) {
    const int send_c = (r - s + 2 * n) % n;
    const int recv_c = (r - s - 1 + 2 * n) % n;
    batch_.clear();
    if (chunk_bytes(send_c) > 0) {
      AddSegments(Transfer::Kind::kSend, right, proto, data + begin(send_c), begin(send_c),
                  chunk_bytes(send_c), es);
    }
    if (chunk_bytes(recv_c) > 0) {
      AddSegments(Transfer::Kind::kRecvReduce, left, proto, data + begin(recv_c), begin(recv_c),
                  chunk_bytes(recv_c), es);
    }
    LOOM_RETURN_IF_ERROR(RunBatch(deadline, what));
  }
  // All-gather: this rank owns the finished chunk (r + 1); pass finished chunks around.
  for (int s = 0; s < n - 1; ++s) {
    const int send_c = (r + 1 - s + 2 * n) % n;
    const int recv_c = (r - s + 2 * n) % n;
    batch_.clear();
    if (chunk_bytes(send_c) > 0) {
      AddSegments(Transfer::Kind::kSend, right, proto, data + begin(send_c), begin(send_c),
                  chunk_bytes(send_c), es);
    }
    if (chunk_bytes(recv_c) > 0) {
      AddSegments(Transfer::Kind::kRecv, left, proto, data + begin(recv_c), begin(recv_c),
                  chunk_bytes(recv_c), es);
    }
    LOOM_RETURN_IF_ERROR(RunBatch(deadline, what));
  }
  return OkStatus();
}

Status TcpGroup::AllReduceSum(void* data, int64_t count, ElementType type) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (count < 0 || (count > 0 && data == nullptr) || ElementSize(type) == 0 ||
      count > static_cast<int64_t>(kMaxPayloadBytes) / 4) {
    return InvalidArgumentError("comm/tcp: all-reduce of ", count, " elements at ", data);
  }
  const uint64_t index = ++collective_index_;
  if (size() == 1 || count == 0) return OkStatus();
  auto* bytes = static_cast<std::byte*>(data);
  if (count * ElementSize(type) <= config_.options.tcp_oneshot_max_bytes || count < size()) {
    return OneShotAllReduce(bytes, count, type, index);
  }
  return RingAllReduce(bytes, count, type, index);
}

Status TcpGroup::AllGather(const void* in, void* out, int64_t bytes) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (bytes < 0 || (bytes > 0 && (in == nullptr || out == nullptr))) {
    return InvalidArgumentError("comm/tcp: all-gather of ", bytes, " bytes");
  }
  const uint64_t index = ++collective_index_;
  auto* o = static_cast<std::byte*>(out);
  std::byte* mine = o + rank() * bytes;
  if (bytes > 0 && in != mine) std::memcpy(mine, in, static_cast<size_t>(bytes));
  if (size() == 1) return OkStatus();
  MessageHeader proto;
  proto.op = Op::kAllGather;
  proto.index = index;
  batch_.clear();
  for (int p = 0; p < size(); ++p) {
    if (p != rank()) AddSegments(Transfer::Kind::kSend, p, proto, mine, rank() * bytes, bytes, 1);
  }
  for (int p = 0; p < size(); ++p) {
    if (p != rank())
      AddSegments(Transfer::Kind::kRecv, p, proto, o + p * bytes, p * bytes, bytes, 1);
  }
  return RunBatch(Deadline(), OpLabel{"all-gather", index, bytes, -1, 0, "per rank"});
}

Status TcpGroup::Broadcast(void* data, int64_t bytes, int root) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (bytes < 0 || (bytes > 0 && data == nullptr) || root < 0 || root >= size()) {
    return InvalidArgumentError("comm/tcp: broadcast of ", bytes, " bytes from root ", root,
                                " in a group of ", size());
  }
  const uint64_t index = ++collective_index_;
  if (size() == 1) return OkStatus();
  auto* d = static_cast<std::byte*>(data);
  MessageHeader proto;
  proto.op = Op::kBroadcast;
  proto.index = index;
  const int n = size();
  const OpLabel what{"broadcast", index, bytes, -1, 0, "from the root"};
  const int64_t deadline = Deadline();
  batch_.clear();
  if (bytes <= config_.options.tcp_oneshot_max_bytes || n == 2 || bytes < n) {
    for (int p = 0; p < n; ++p) {
      if (p == root || (rank() != root && p != rank())) continue;
      if (rank() == root) {
        AddSegments(Transfer::Kind::kSend, p, proto, d, 0, bytes, 1);
      } else {
        AddSegments(Transfer::Kind::kRecv, root, proto, d, 0, bytes, 1);
      }
    }
    return RunBatch(deadline, what);
  }
  // Large: scatter chunk c to rank c, then everyone passes its chunk to everyone (the root's own
  // chunk comes from the root).  The root sends about 2 * bytes instead of (n - 1) * bytes.
  auto begin = [&](int c) { return bytes * c / n; };
  auto len = [&](int c) { return begin(c + 1) - begin(c); };
  for (int c = 0; c < n; ++c) {
    if (c == root) continue;
    if (rank() == root)
      AddSegments(Transfer::Kind::kSend, c, proto, d + begin(c), begin(c), len(c), 1);
    if (rank() == c)
      AddSegments(Transfer::Kind::kRecv, root, proto, d + begin(c), begin(c), len(c), 1);
  }
  LOOM_RETURN_IF_ERROR(RunBatch(deadline, what));
  batch_.clear();
  for (int p = 0; p < n; ++p) {
    if (p == rank() || p == root) continue;
    const int mine = rank();
    AddSegments(Transfer::Kind::kSend, p, proto, d + begin(mine), begin(mine), len(mine), 1);
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank() || rank() == root) continue;
    AddSegments(Transfer::Kind::kRecv, p, proto, d + begin(p), begin(p), len(p), 1);
  }
  return RunBatch(deadline, what);
}

Status TcpGroup::Send(const void* data, int64_t bytes, int dst, int tag) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (dst < 0 || dst >= size() || dst == rank() || tag < 0 || tag > kMaxTag || bytes < 0 ||
      (bytes > 0 && data == nullptr)) {
    return InvalidArgumentError("comm/tcp: rank ", rank(), ": send of ", bytes, " bytes to rank ",
                                dst, " with tag ", tag, " (group of ", size(), ", tags 0..",
                                kMaxTag, ")");
  }
  batch_.clear();
  Transfer t;
  t.kind = Transfer::Kind::kSend;
  t.peer = dst;
  t.header.op = Op::kSend;
  t.header.tag = static_cast<uint32_t>(tag);
  t.header.bytes = static_cast<uint64_t>(bytes);
  t.data = static_cast<std::byte*>(const_cast<void*>(data));
  batch_.push_back(t);
  return RunBatch(Deadline(), OpLabel{"send to", 0, bytes, dst, tag});
}

Status TcpGroup::Recv(void* data, int64_t bytes, int src, int tag) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (src < 0 || src >= size() || src == rank() || tag < 0 || tag > kMaxTag || bytes < 0 ||
      (bytes > 0 && data == nullptr)) {
    return InvalidArgumentError("comm/tcp: rank ", rank(), ": recv of ", bytes, " bytes from rank ",
                                src, " with tag ", tag, " (group of ", size(), ", tags 0..",
                                kMaxTag, ")");
  }
  batch_.clear();
  Transfer t;
  t.kind = Transfer::Kind::kRecv;
  t.peer = src;
  t.header.op = Op::kSend;
  t.header.tag = static_cast<uint32_t>(tag);
  t.header.bytes = static_cast<uint64_t>(bytes);
  t.data = static_cast<std::byte*>(data);
  batch_.push_back(t);
  return RunBatch(Deadline(), OpLabel{"recv from", 0, bytes, src, tag});
}

Status TcpGroup::Barrier() {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  const uint64_t index = ++collective_index_;
  if (size() == 1) return OkStatus();
  MessageHeader proto;
  proto.op = Op::kBarrier;
  proto.index = index;
  batch_.clear();
  for (int p = 0; p < size(); ++p) {
    if (p != rank()) AddSegments(Transfer::Kind::kSend, p, proto, nullptr, 0, 0, 1);
  }
  for (int p = 0; p < size(); ++p) {
    if (p != rank()) AddSegments(Transfer::Kind::kRecv, p, proto, nullptr, 0, 0, 1);
  }
  return RunBatch(Deadline(), OpLabel{"barrier", index, 0});
}

StatusOr<std::unique_ptr<Group>> TcpGroup::Split(int color, int key) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  std::string host;
  int port = 0;
  LOOM_RETURN_IF_ERROR(ParseHostPort(config_.peers[rank()], &host, &port));
  Fd listener;
  SplitEntry mine;
  mine.color = color;
  mine.key = key;
  if (color != kNoColor) {
    // An address on several links ("a+b") is reached on each of them: listen on all.
    const bool several = SplitHostAlternatives(host).size() > 1;
    LOOM_ASSIGN_OR_RETURN(listener, Listen(several ? "0.0.0.0" : host, 0, &mine.port));
  }
  std::vector<SplitEntry> all;
  LOOM_ASSIGN_OR_RETURN(SplitResult split, ExchangeSplit(*this, mine, &all));
  const uint64_t split_index = ++split_index_;
  if (split.new_rank < 0) return std::unique_ptr<Group>();
  GroupConfig sub;
  sub.backend = "tcp";
  sub.rank = split.new_rank;
  sub.size = static_cast<int>(split.members.size());
  for (int m : split.members) {
    std::string h;
    int p = 0;
    LOOM_RETURN_IF_ERROR(ParseHostPort(config_.peers[m], &h, &p));
    sub.peers.push_back(h.find(':') != std::string::npos ? StrCat("[", h, "]:", all[m].port)
                                                         : StrCat(h, ":", all[m].port));
  }
  sub.group_id = SubGroupId(config_.group_id, split_index, color);
  sub.secret = config_.secret;
  sub.listen_fd = listener.Release();
  sub.options = config_.options;
  return CreateTcpGroup(sub);
}

}  // namespace

StatusOr<std::unique_ptr<Group>> CreateTcpGroup(const GroupConfig& config) {
  // Take ownership of an inherited listener first, so that it is closed on every error path.
  Fd listener(config.listen_fd);
  LOOM_RETURN_IF_ERROR(ValidateGroupConfig(config));
  std::string host;
  int port = 0;
  LOOM_RETURN_IF_ERROR(ParseHostPort(config.peers[config.rank], &host, &port));
  if (!listener.valid()) {
    int bound = 0;
    auto l = Listen(SplitHostAlternatives(host).size() > 1 ? "0.0.0.0" : host, port, &bound);
    if (!l.ok()) return l.status().WithContext(StrCat("comm/tcp: rank ", config.rank));
    listener = std::move(*l);
  } else {
    int accepting = 0;
    socklen_t len = sizeof(accepting);
    if (::getsockopt(listener.get(), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 ||
        !accepting) {
      return InvalidArgumentError("comm/tcp: LOOM_LISTEN_FD=", config.listen_fd,
                                  " is not a listening socket");
    }
  }
  MeshSpec spec;
  spec.rank = config.rank;
  spec.size = config.size;
  spec.channels = config.options.tcp_channels;
  spec.peers = config.peers;
  spec.group_id = config.group_id;
  spec.secret = config.secret;
  spec.deadline_ns = NowNanos() + static_cast<int64_t>(config.options.timeout_seconds * 1e9);
  LOOM_ASSIGN_OR_RETURN(std::vector<Fd> conns, BuildMesh(spec, std::move(listener)));
  EngineOptions eo;
  eo.rank = config.rank;
  eo.size = config.size;
  eo.channels = config.options.tcp_channels;
  eo.group = GroupFingerprint(config.group_id);
  eo.peers = config.peers;
  eo.spin_ns = config.options.spin_microseconds * 1000;
  eo.spin_yield = config.options.spin_yield;
  eo.link = config.options.link;
  auto engine = std::make_unique<Engine>(std::move(eo), std::move(conns));
  return std::unique_ptr<Group>(std::make_unique<TcpGroup>(config, std::move(engine)));
}

}  // namespace loom::comm::tcp
