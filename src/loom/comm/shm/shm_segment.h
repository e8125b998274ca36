// The shared-memory segment of an shm group and the waiting discipline over it.
//
// Layout (all offsets 64-byte aligned; sizes fixed when rank 0 creates the segment):
//   SegmentHeader                                    identity, attach count, abort record
//   RankControl[size]                                per rank: published sequence, doorbell, pid
//   slots[2][size][slot_bytes]                       collective staging, double-buffered by parity
//   Mailbox[size][size] (+ mailbox_bytes of ring)    Send/Recv byte streams, [src][dst]
//
// Waiting is spin-then-block: poll the condition for `spin_ns` (yielding the CPU after a while so
// oversubscribed ranks progress), then sleep on the waiting rank's futex doorbell, which whoever
// changes what it waits for rings.  While blocked, a waiter also checks every few milliseconds
// whether a peer process has exited (pidfd) or a rank recorded an abort, so it never hangs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/comm/tcp/socket.h"

namespace loom::comm::shm {

inline constexpr uint64_t kShmMagic = 0x314D48534D4F4F4Cull;  // "LOOMSHM1"
inline constexpr uint32_t kShmVersion = 1;
inline constexpr size_t kAbortReasonBytes = 256;

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  uint64_t group;
  uint64_t slot_bytes;
  uint64_t mailbox_bytes;
  uint64_t total_bytes;
  std::atomic<uint32_t> ready;      // 1 once rank 0 has initialized everything
  std::atomic<uint32_t> attached;   // ranks attached so far
  std::atomic<int32_t> abort_rank;  // -1, or the first rank that broke the group
  char abort_reason[kAbortReasonBytes];
};

// What a rank is doing in a collective step, so that ranks can check they agree.
struct StepDesc {
  uint32_t op;     // wire Op value
  uint32_t arg;    // element type (all-reduce) or root (broadcast)
  uint64_t bytes;  // the whole operation's byte count
};

struct alignas(64) RankControl {
  std::atomic<uint32_t> seq;      // last collective step this rank published
  std::atomic<uint32_t> bell;     // futex word: bumped to wake this rank
  std::atomic<uint32_t> waiters;  // > 0 while this rank may sleep on `bell`
  std::atomic<int32_t> pid;
  StepDesc desc[2];  // the step's description, by step parity
  char pad[16];
};
static_assert(sizeof(RankControl) == 64);

// A byte ring from one rank to another.  head/tail count bytes ever written/read.
struct alignas(64) Mailbox {
  std::atomic<uint64_t> head;
  char pad0[56];
  std::atomic<uint64_t> tail;
  char pad1[56];
};
static_assert(sizeof(Mailbox) == 128);

struct SegmentSpec {
  int rank = 0;
  int size = 1;
  std::string group_id;
  std::string secret;
  int64_t slot_bytes = 0;
  int64_t mailbox_bytes = 0;
  int64_t spin_ns = 0;
  bool spin_yield = false;  // sched_yield between polls while spinning (ranks outnumber cores)
  int64_t deadline_ns = 0;  // for creating/attaching
};

class Segment {
 public:
  // Rank 0 creates the segment, the others attach to it; returns once every rank has attached (the
  // name is then removed, so nothing is left behind if processes die later).
  static StatusOr<std::unique_ptr<Segment>> Open(const SegmentSpec& spec);
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  int rank() const { return spec_.rank; }
  int size() const { return spec_.size; }
  int64_t slot_bytes() const { return spec_.slot_bytes; }
  int64_t mailbox_bytes() const { return spec_.mailbox_bytes; }

  RankControl& control(int r) { return controls_[r]; }
  std::byte* slot(uint32_t parity, int r) {
    return slots_ + (static_cast<int64_t>(parity & 1) * spec_.size + r) * spec_.slot_bytes;
  }
  Mailbox& mailbox(int src, int dst) { return *MailboxAt(src, dst); }
  std::byte* mailbox_data(int src, int dst) {
    return reinterpret_cast<std::byte*>(MailboxAt(src, dst)) + sizeof(Mailbox);
  }

  // Wakes rank r if it is sleeping (call after publishing what it may wait for).
  void Ring(int r);
  void RingAll();

  // Waits until cond() is true, or fails: deadline, a peer exited, or a rank recorded an abort.
  // `what` names the operation for errors.
  template <class Cond>
  Status WaitFor(const Cond& cond, int64_t deadline_ns, const char* what, int waiting_for);

  // Records this rank's failure for the others (first one wins) and wakes everyone.
  void Abort(const Status& status);
  // The abort record of another rank, as a Status (OK when none).
  Status AbortStatus() const;

 private:
  Segment() = default;
  Mailbox* MailboxAt(int src, int dst) {
    return reinterpret_cast<Mailbox*>(
        mailboxes_ + (static_cast<int64_t>(src) * spec_.size + dst) *
                         (static_cast<int64_t>(sizeof(Mailbox)) + spec_.mailbox_bytes));
  }
  // Fails when a peer process has exited or a rank recorded an abort.
  Status CheckPeers(const char* what, int waiting_for);
  // Sleeps up to `max_ns` on this rank's bell unless it no longer reads `seen`.
  void Sleep(uint32_t seen, int64_t max_ns);

  SegmentSpec spec_;
  std::string name_;
  bool unlinked_ = false;
  std::byte* base_ = nullptr;
  int64_t mapped_bytes_ = 0;
  SegmentHeader* header_ = nullptr;
  RankControl* controls_ = nullptr;
  std::byte* slots_ = nullptr;
  std::byte* mailboxes_ = nullptr;
  std::vector<tcp::Fd> pidfds_;  // per rank (invalid for this rank)
};

void CpuRelax();
void YieldCpu();

template <class Cond>
Status Segment::WaitFor(const Cond& cond, int64_t deadline_ns, const char* what, int waiting_for) {
  if (cond()) return OkStatus();
  const int64_t start = tcp::NowNanos();
  int spins = 0;
  // Spin phase.
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      CpuRelax();
      if (cond()) return OkStatus();
    }
    ++spins;
    if (header_->abort_rank.load(std::memory_order_relaxed) >= 0) return AbortStatus();
    const int64_t now = tcp::NowNanos();
    if (now - start >= spec_.spin_ns || now >= deadline_ns) break;
    if (spec_.spin_yield && spins > 16) YieldCpu();
  }
  // Block phase: sleep on the doorbell in short slices, checking the peers in between.
  RankControl& me = controls_[spec_.rank];
  for (;;) {
    const uint32_t seen = me.bell.load(std::memory_order_seq_cst);
    me.waiters.fetch_add(1, std::memory_order_seq_cst);
    if (cond()) {
      me.waiters.fetch_sub(1, std::memory_order_seq_cst);
      return OkStatus();
    }
    const int64_t now = tcp::NowNanos();
    if (now >= deadline_ns) {
      me.waiters.fetch_sub(1, std::memory_order_seq_cst);
      return DeadlineExceededError(
          what, ": timed out waiting for ",
          waiting_for >= 0 ? StrCat("rank ", waiting_for) : std::string("the other ranks"),
          " (raise LOOM_COMM_TIMEOUT_S if the peer is just slow)");
    }
    Sleep(seen, std::min<int64_t>(deadline_ns - now, 5'000'000));
    me.waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (cond()) return OkStatus();
    LOOM_RETURN_IF_ERROR(CheckPeers(what, waiting_for));
  }
}

}  // namespace loom::comm::shm
