// The shm backend: ranks on one host exchange through one shared segment (shm_segment.h).
//
// Collectives run in numbered steps.  In step n a rank writes its contribution into its slot of
// parity n & 1, publishes n, and waits until every rank has published n; then it reads the slots
// it needs.  A rank can only reach step n + 2 (and overwrite that slot) after everyone
// published n + 1, which each rank does only after it finished reading step n, so two slot sets
// suffice.  Messages larger than a slot take several steps.  All-reduce sums the N slots in rank
// order on every rank (bitwise identical results).  Send/Recv stream bytes through a ring per
// ordered rank pair.
#include <cstring>
#include <deque>

#include "loom/comm/backends.h"
#include "loom/comm/reduce.h"
#include "loom/comm/shm/shm_segment.h"
#include "loom/comm/split.h"
#include "loom/comm/wire.h"

namespace loom::comm::shm {

namespace {

constexpr uint32_t kP2pMagic = 0x50324C4Du;  // "ML2P"
constexpr uint64_t kStashLimitBytes = uint64_t{1} << 30;

// The frame of a point-to-point message in a mailbox stream.
struct P2pHeader {
  uint32_t magic;
  uint32_t tag;
  uint64_t bytes;
  uint64_t seq;
  uint64_t reserved;
};
static_assert(sizeof(P2pHeader) == 32);

bool Reached(uint32_t published, uint32_t step) {
  return static_cast<int32_t>(published - step) >= 0;
}

class ShmGroup final : public Group {
 public:
  ShmGroup(GroupConfig config, std::unique_ptr<Segment> seg)
      : config_(std::move(config)), seg_(std::move(seg)) {
    const size_t n = static_cast<size_t>(config_.size);
    srcs_.resize(n);
    send_seq_.assign(n, 0);
    recv_seq_.assign(n, 0);
  }

  int rank() const override { return config_.rank; }
  int size() const override { return config_.size; }
  std::string_view backend() const override { return "shm"; }

  Status AllReduceSum(void* data, int64_t count, ElementType type) override;
  Status AllGather(const void* in, void* out, int64_t bytes) override;
  Status Broadcast(void* data, int64_t bytes, int root) override;
  Status Send(const void* data, int64_t bytes, int dst, int tag) override;
  Status Recv(void* data, int64_t bytes, int src, int tag) override;
  Status Barrier() override;
  StatusOr<std::unique_ptr<Group>> Split(int color, int key) override;

 private:
  struct Stashed {
    int src;
    uint32_t tag;
    std::vector<std::byte> payload;
  };

  int64_t Deadline() const {
    return tcp::NowNanos() + static_cast<int64_t>(config_.options.timeout_seconds * 1e9);
  }
  Status CheckUsable() const {
    if (broken_.ok()) return OkStatus();
    return FailedPreconditionError("comm/shm: the group is unusable after an earlier error: ",
                                   broken_.message());
  }
  Status Break(Status s) {
    s = s.WithContext(StrCat("comm/shm: rank ", rank()));
    broken_ = s;
    seg_->Abort(s);
    return s;
  }
  // Publishes step `n` described by `desc` and waits until every rank has published it.
  Status Step(uint32_t n, const StepDesc& desc, int64_t deadline, const char* what);
  Status WriteStream(int dst, const std::byte* p, int64_t len, int64_t deadline);
  Status ReadStream(int src, std::byte* p, int64_t len, int64_t deadline);

  GroupConfig config_;
  std::unique_ptr<Segment> seg_;
  uint32_t step_ = 0;
  uint64_t split_index_ = 0;
  Status broken_;
  std::vector<const void*> srcs_;
  std::vector<uint64_t> send_seq_;  // per destination
  std::vector<uint64_t> recv_seq_;  // per source
  std::deque<Stashed> stash_;
};

Status ShmGroup::Step(uint32_t n, const StepDesc& desc, int64_t deadline, const char* what) {
  RankControl& me = seg_->control(rank());
  me.desc[n & 1] = desc;
  me.seq.store(n, std::memory_order_release);
  seg_->RingAll();
  const int sz = size();
  int first = 0;  // ranks before `first` are known to have arrived
  Status s = seg_->WaitFor(
      [&] {
        for (; first < sz; ++first) {
          if (!Reached(seg_->control(first).seq.load(std::memory_order_acquire), n)) return false;
        }
        return true;
      },
      deadline, what, -1);
  if (!s.ok()) return Break(s);
  // No rank can be past step n + 1 now, so the descriptors of parity n are still step n's.
  for (int q = 0; q < sz; ++q) {
    if (q == rank()) continue;
    const StepDesc& d = seg_->control(q).desc[n & 1];
    if (d.op != desc.op || d.arg != desc.arg || d.bytes != desc.bytes) {
      return Break(FailedPreconditionError(
          what, ": rank ", q, " is in ", OpName(static_cast<Op>(d.op)), " (", d.bytes,
          " bytes, arg ", d.arg, ") while this rank is in ", OpName(static_cast<Op>(desc.op)), " (",
          desc.bytes, " bytes, arg ", desc.arg,
          "): the ranks called collectives in different orders or with different arguments"));
    }
  }
  return OkStatus();
}

Status ShmGroup::AllReduceSum(void* data, int64_t count, ElementType type) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  const int64_t es = ElementSize(type);
  if (count < 0 || (count > 0 && data == nullptr) || es == 0) {
    return InvalidArgumentError("comm/shm: all-reduce of ", count, " elements at ", data);
  }
  if (size() == 1 || count == 0) return OkStatus();
  auto* d = static_cast<std::byte*>(data);
  const int64_t chunk = seg_->slot_bytes() / es;
  const StepDesc desc{static_cast<uint32_t>(Op::kAllReduce), static_cast<uint32_t>(type),
                      static_cast<uint64_t>(count * es)};
  const int64_t deadline = Deadline();
  for (int64_t off = 0; off < count; off += chunk) {
    const int64_t len = std::min(chunk, count - off);
    const uint32_t n = ++step_;
    std::byte* mine = d + off * es;
    std::memcpy(seg_->slot(n, rank()), mine, static_cast<size_t>(len * es));
    LOOM_RETURN_IF_ERROR(Step(n, desc, deadline, "all-reduce"));
    for (int q = 0; q < size(); ++q) srcs_[q] = q == rank() ? mine : seg_->slot(n, q);
    SumInto(mine, srcs_.data(), size(), len, type);
  }
  return OkStatus();
}

Status ShmGroup::AllGather(const void* in, void* out, int64_t bytes) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (bytes < 0 || (bytes > 0 && (in == nullptr || out == nullptr))) {
    return InvalidArgumentError("comm/shm: all-gather of ", bytes, " bytes");
  }
  auto* o = static_cast<std::byte*>(out);
  const auto* src = static_cast<const std::byte*>(in);
  std::byte* mine = o + rank() * bytes;
  if (bytes > 0 && src != mine) std::memcpy(mine, src, static_cast<size_t>(bytes));
  if (size() == 1 || bytes == 0) return OkStatus();
  const StepDesc desc{static_cast<uint32_t>(Op::kAllGather), 0, static_cast<uint64_t>(bytes)};
  const int64_t chunk = seg_->slot_bytes();
  const int64_t deadline = Deadline();
  for (int64_t off = 0; off < bytes; off += chunk) {
    const int64_t len = std::min(chunk, bytes - off);
    const uint32_t n = ++step_;
    std::memcpy(seg_->slot(n, rank()), mine + off, static_cast<size_t>(len));
    LOOM_RETURN_IF_ERROR(Step(n, desc, deadline, "all-gather"));
    for (int q = 0; q < size(); ++q) {
      if (q != rank()) std::memcpy(o + q * bytes + off, seg_->slot(n, q), static_cast<size_t>(len));
    }
  }
  return OkStatus();
}

Status ShmGroup::Broadcast(void* data, int64_t bytes, int root) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (bytes < 0 || (bytes > 0 && data == nullptr) || root < 0 || root >= size()) {
    return InvalidArgumentError("comm/shm: broadcast of ", bytes, " bytes from root ", root,
                                " in a group of ", size());
  }
  if (size() == 1 || bytes == 0) return OkStatus();
  auto* d = static_cast<std::byte*>(data);
  const StepDesc desc{static_cast<uint32_t>(Op::kBroadcast), static_cast<uint32_t>(root),
                      static_cast<uint64_t>(bytes)};
  const int64_t chunk = seg_->slot_bytes();
  const int64_t deadline = Deadline();
  const bool is_root = rank() == root;
  for (int64_t off = 0; off < bytes; off += chunk) {
    const int64_t len = std::min(chunk, bytes - off);
    const uint32_t n = ++step_;
    if (is_root) std::memcpy(seg_->slot(n, root), d + off, static_cast<size_t>(len));
    // Everyone waits for everyone, even though only the root's slot is read: the two-slot scheme
    // relies on no rank being more than one step ahead of any other.
    LOOM_RETURN_IF_ERROR(Step(n, desc, deadline, "broadcast"));
    if (!is_root) std::memcpy(d + off, seg_->slot(n, root), static_cast<size_t>(len));
  }
  return OkStatus();
}

Status ShmGroup::Barrier() {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (size() == 1) return OkStatus();
  const StepDesc desc{static_cast<uint32_t>(Op::kBarrier), 0, 0};
  return Step(++step_, desc, Deadline(), "barrier");
}

Status ShmGroup::WriteStream(int dst, const std::byte* p, int64_t len, int64_t deadline) {
  Mailbox& mb = seg_->mailbox(rank(), dst);
  std::byte* ring = seg_->mailbox_data(rank(), dst);
  const uint64_t cap = static_cast<uint64_t>(seg_->mailbox_bytes());
  uint64_t head = mb.head.load(std::memory_order_relaxed);
  while (len > 0) {
    Status s = seg_->WaitFor([&] { return head - mb.tail.load(std::memory_order_acquire) < cap; },
                             deadline, "send (mailbox full)", dst);
    if (!s.ok()) return Break(s);
    const uint64_t free = cap - (head - mb.tail.load(std::memory_order_acquire));
    const uint64_t pos = head % cap;
    const uint64_t n = std::min({free, static_cast<uint64_t>(len), cap - pos});
    std::memcpy(ring + pos, p, n);
    head += n;
    p += n;
    len -= static_cast<int64_t>(n);
    mb.head.store(head, std::memory_order_release);
    seg_->Ring(dst);
  }
  return OkStatus();
}

Status ShmGroup::ReadStream(int src, std::byte* p, int64_t len, int64_t deadline) {
  Mailbox& mb = seg_->mailbox(src, rank());
  const std::byte* ring = seg_->mailbox_data(src, rank());
  const uint64_t cap = static_cast<uint64_t>(seg_->mailbox_bytes());
  uint64_t tail = mb.tail.load(std::memory_order_relaxed);
  while (len > 0) {
    Status s = seg_->WaitFor([&] { return mb.head.load(std::memory_order_acquire) != tail; },
                             deadline, "recv", src);
    if (!s.ok()) return Break(s);
    const uint64_t avail = mb.head.load(std::memory_order_acquire) - tail;
    if (avail > cap) {
      return Break(DataLossError("mailbox from rank ", src, " claims ", avail,
                                 " unread bytes in a ", cap, "-byte ring"));
    }
    const uint64_t pos = tail % cap;
    const uint64_t n = std::min({avail, static_cast<uint64_t>(len), cap - pos});
    std::memcpy(p, ring + pos, n);
    tail += n;
    p += n;
    len -= static_cast<int64_t>(n);
    mb.tail.store(tail, std::memory_order_release);
    seg_->Ring(src);
  }
  return OkStatus();
}

Status ShmGroup::Send(const void* data, int64_t bytes, int dst, int tag) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (dst < 0 || dst >= size() || dst == rank() || tag < 0 || tag > kMaxTag || bytes < 0 ||
      (bytes > 0 && data == nullptr)) {
    return InvalidArgumentError("comm/shm: rank ", rank(), ": send of ", bytes, " bytes to rank ",
                                dst, " with tag ", tag, " (group of ", size(), ")");
  }
  const P2pHeader h{kP2pMagic, static_cast<uint32_t>(tag), static_cast<uint64_t>(bytes),
                    ++send_seq_[dst], 0};
  const int64_t deadline = Deadline();
  LOOM_RETURN_IF_ERROR(
      WriteStream(dst, reinterpret_cast<const std::byte*>(&h), sizeof(h), deadline));
  return WriteStream(dst, static_cast<const std::byte*>(data), bytes, deadline);
}

Status ShmGroup::Recv(void* data, int64_t bytes, int src, int tag) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  if (src < 0 || src >= size() || src == rank() || tag < 0 || tag > kMaxTag || bytes < 0 ||
      (bytes > 0 && data == nullptr)) {
    return InvalidArgumentError("comm/shm: rank ", rank(), ": recv of ", bytes, " bytes from rank ",
                                src, " with tag ", tag, " (group of ", size(), ")");
  }
  auto size_error = [&](uint64_t got) {
    return Break(InvalidArgumentError("rank ", src, " sent a ", got, "-byte message (tag ", tag,
                                      ") but the receive expects ", bytes, " bytes"));
  };
  for (auto it = stash_.begin(); it != stash_.end(); ++it) {
    if (it->src != src || it->tag != static_cast<uint32_t>(tag)) continue;
    if (static_cast<int64_t>(it->payload.size()) != bytes) return size_error(it->payload.size());
    if (bytes > 0) std::memcpy(data, it->payload.data(), static_cast<size_t>(bytes));
    stash_.erase(it);
    return OkStatus();
  }
  const int64_t deadline = Deadline();
  for (;;) {
    P2pHeader h{};
    LOOM_RETURN_IF_ERROR(ReadStream(src, reinterpret_cast<std::byte*>(&h), sizeof(h), deadline));
    if (h.magic != kP2pMagic || h.reserved != 0 || h.seq != recv_seq_[src] + 1 ||
        h.tag > static_cast<uint32_t>(kMaxTag) || h.bytes > kMaxPayloadBytes) {
      return Break(DataLossError("corrupt message frame from rank ", src, " (magic 0x", std::hex,
                                 h.magic, std::dec, ", seq ", h.seq, " expected ",
                                 recv_seq_[src] + 1, ", tag ", h.tag, ", ", h.bytes, " bytes)"));
    }
    recv_seq_[src] = h.seq;
    if (h.tag == static_cast<uint32_t>(tag)) {
      if (h.bytes != static_cast<uint64_t>(bytes)) return size_error(h.bytes);
      return ReadStream(src, static_cast<std::byte*>(data), bytes, deadline);
    }
    // Another tag: set it aside for a later Recv.
    if (h.bytes > kStashLimitBytes) {
      return Break(ResourceExhaustedError("rank ", src, " sent a ", h.bytes, "-byte message (tag ",
                                          h.tag, ") while this rank waits for tag ", tag,
                                          "; setting it aside would exceed ", kStashLimitBytes,
                                          " bytes"));
    }
    Stashed s{src, h.tag, std::vector<std::byte>(h.bytes)};
    LOOM_RETURN_IF_ERROR(
        ReadStream(src, s.payload.data(), static_cast<int64_t>(h.bytes), deadline));
    stash_.push_back(std::move(s));
  }
}

StatusOr<std::unique_ptr<Group>> ShmGroup::Split(int color, int key) {
  LOOM_RETURN_IF_ERROR(CheckUsable());
  SplitEntry mine;
  mine.color = color;
  mine.key = key;
  std::vector<SplitEntry> all;
  LOOM_ASSIGN_OR_RETURN(SplitResult split, ExchangeSplit(*this, mine, &all));
  const uint64_t split_index = ++split_index_;
  if (split.new_rank < 0) return std::unique_ptr<Group>();
  GroupConfig sub;
  sub.backend = "shm";
  sub.rank = split.new_rank;
  sub.size = static_cast<int>(split.members.size());
  sub.group_id = SubGroupId(config_.group_id, split_index, color);
  sub.secret = config_.secret;
  sub.options = config_.options;
  return CreateShmGroup(sub);
}

}  // namespace

StatusOr<std::unique_ptr<Group>> CreateShmGroup(const GroupConfig& config) {
  LOOM_RETURN_IF_ERROR(ValidateGroupConfig(config));
  SegmentSpec spec;
  spec.rank = config.rank;
  spec.size = config.size;
  spec.group_id = config.group_id;
  spec.secret = config.secret;
  spec.slot_bytes = config.options.shm_slot_bytes;
  spec.mailbox_bytes = config.options.shm_mailbox_bytes;
  spec.spin_ns = config.options.spin_microseconds * 1000;
  spec.spin_yield = config.options.spin_yield;
  spec.deadline_ns = tcp::NowNanos() + static_cast<int64_t>(config.options.timeout_seconds * 1e9);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Segment> seg, Segment::Open(spec));
  return std::unique_ptr<Group>(std::make_unique<ShmGroup>(config, std::move(seg)));
}

}  // namespace loom::comm::shm
