#include "loom/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "loom/comm/sha256.h"
#include "loom/comm/wire.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace loom::comm::shm {

namespace {

int64_t RoundUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

struct Layout {
  int64_t controls = 0;
  int64_t slots = 0;
  int64_t mailboxes = 0;
  int64_t total = 0;
};

Layout ComputeLayout(const SegmentSpec& s) {
  Layout l;
  l.controls = RoundUp(sizeof(SegmentHeader), 64);
  l.slots = RoundUp(l.controls + s.size * static_cast<int64_t>(sizeof(RankControl)), 4096);
  l.mailboxes = l.slots + 2 * s.size * RoundUp(s.slot_bytes, 64);
  l.total =
      l.mailboxes + int64_t{s.size} * s.size *
                        (static_cast<int64_t>(sizeof(Mailbox)) + RoundUp(s.mailbox_bytes, 64));
  return l;
}

std::string SegmentName(const SegmentSpec& s) {
  // Derived from the secret, so that the name cannot be guessed from the group id alone.
  const std::span<const uint8_t> parts[] = {
      {reinterpret_cast<const uint8_t*>(s.group_id.data()), s.group_id.size()}};
  const Digest d = HmacSha256(s.secret, parts);
  return "/loom-" + DigestHex(std::span<const uint8_t>(d.data(), 16));
}

// The pid recorded by rank 0 of an existing segment `name` (0 when unreadable).
int CreatorPid(const std::string& name, const Layout& layout) {
  tcp::Fd fd(::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || st.st_size < layout.slots) return 0;
  void* p = ::mmap(nullptr, static_cast<size_t>(layout.slots), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return 0;
  const auto* control = reinterpret_cast<const RankControl*>(static_cast<std::byte*>(p) +
                                                              layout.controls);
  const int pid = control->pid.load(std::memory_order_relaxed);
  ::munmap(p, static_cast<size_t>(layout.slots));
  return pid;
}

void SleepBriefly() {
  timespec ts{0, 1'000'000};
  ::nanosleep(&ts, nullptr);
}

}  // namespace

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void YieldCpu() { sched_yield(); }

StatusOr<std::unique_ptr<Segment>> Segment::Open(const SegmentSpec& spec) {
  std::unique_ptr<Segment> seg(new Segment());
  seg->spec_ = spec;
  seg->spec_.slot_bytes = RoundUp(spec.slot_bytes, 64);
  seg->spec_.mailbox_bytes = RoundUp(spec.mailbox_bytes, 64);
  const Layout layout = ComputeLayout(seg->spec_);
  seg->name_ = SegmentName(spec);
  const std::string who = StrCat("comm/shm: rank ", spec.rank, ": segment ", seg->name_);
  const uint64_t group = GroupFingerprint(spec.group_id);

  tcp::Fd fd;
  if (spec.rank == 0) {
    fd = tcp::Fd(::shm_open(seg->name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
    if (!fd.valid() && errno == EEXIST) {
      // Another group with this id and secret is still attaching, or a crashed one left its name.
      const int creator = CreatorPid(seg->name_, layout);
      if (creator > 0 && creator != ::getpid() && ::kill(creator, 0) == 0) {
        return FailedPreconditionError(who, " is in use by a running group (its rank 0 is pid ",
                                       creator, "); give each group its own LOOM_GROUP_ID");
      }
      ::shm_unlink(seg->name_.c_str());
      fd = tcp::Fd(::shm_open(seg->name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
    }
    if (!fd.valid()) return UnavailableError(who, ": cannot create: ", tcp::ErrnoText(errno));
    if (::ftruncate(fd.get(), layout.total) != 0) {
      const int err = errno;
      ::shm_unlink(seg->name_.c_str());
      return ResourceExhaustedError(who, ": cannot size to ", layout.total,
                                    " bytes: ", tcp::ErrnoText(err));
    }
  } else {
    for (;;) {
      fd = tcp::Fd(::shm_open(seg->name_.c_str(), O_RDWR | O_CLOEXEC, 0600));
      if (fd.valid()) {
        struct stat st {};
        if (::fstat(fd.get(), &st) == 0 && st.st_size == layout.total) break;
        if (::fstat(fd.get(), &st) == 0 && st.st_size != 0 && st.st_size != layout.total) {
          return FailedPreconditionError(who, " is ", st.st_size, " bytes but this rank expects ",
                                         layout.total,
                                         " (ranks disagree on group size or LOOM_SHM_* sizes)");
        }
        fd.Reset();
      } else if (errno != ENOENT) {
        return UnavailableError(who, ": cannot open: ", tcp::ErrnoText(errno));
      }
      if (tcp::NowNanos() >= spec.deadline_ns) {
        return DeadlineExceededError(who,
                                     ": rank 0 never created the segment (is it running, "
                                     "with the same LOOM_GROUP_ID and secret?)");
      }
      SleepBriefly();
    }
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(layout.total), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd.get(), 0);
  if (p == MAP_FAILED) {
    if (spec.rank == 0) ::shm_unlink(seg->name_.c_str());
    return ResourceExhaustedError(who, ": mmap of ", layout.total,
                                  " bytes failed: ", tcp::ErrnoText(errno));
  }
  seg->base_ = static_cast<std::byte*>(p);
  seg->mapped_bytes_ = layout.total;
  seg->header_ = reinterpret_cast<SegmentHeader*>(seg->base_);
  seg->controls_ = reinterpret_cast<RankControl*>(seg->base_ + layout.controls);
  seg->slots_ = seg->base_ + layout.slots;
  seg->mailboxes_ = seg->base_ + layout.mailboxes;
  SegmentHeader* h = seg->header_;

  if (spec.rank == 0) {
    // The pages are zero-filled; construct the atomics in place and publish with `ready`.
    new (&h->ready) std::atomic<uint32_t>(0);
    new (&h->attached) std::atomic<uint32_t>(0);
    new (&h->abort_rank) std::atomic<int32_t>(-1);
    h->magic = kShmMagic;
    h->version = kShmVersion;
    h->size = static_cast<uint32_t>(spec.size);
    h->group = group;
    h->slot_bytes = static_cast<uint64_t>(seg->spec_.slot_bytes);
    h->mailbox_bytes = static_cast<uint64_t>(seg->spec_.mailbox_bytes);
    h->total_bytes = static_cast<uint64_t>(layout.total);
    for (int r = 0; r < spec.size; ++r) new (&seg->controls_[r]) RankControl{};
    for (int s = 0; s < spec.size; ++s) {
      for (int d = 0; d < spec.size; ++d) new (seg->MailboxAt(s, d)) Mailbox{};
    }
    h->ready.store(1, std::memory_order_release);
  } else {
    while (h->ready.load(std::memory_order_acquire) != 1) {
      if (tcp::NowNanos() >= spec.deadline_ns) {
        return DeadlineExceededError(who, ": rank 0 never finished initializing it");
      }
      SleepBriefly();
    }
    if (h->magic != kShmMagic || h->version != kShmVersion ||
        h->size != static_cast<uint32_t>(spec.size) || h->group != group ||
        h->slot_bytes != static_cast<uint64_t>(seg->spec_.slot_bytes) ||
        h->mailbox_bytes != static_cast<uint64_t>(seg->spec_.mailbox_bytes) ||
        h->total_bytes != static_cast<uint64_t>(layout.total)) {
      return FailedPreconditionError(who, " does not match this rank: version ", h->version,
                                     " (want ", kShmVersion, "), size ", h->size, " (want ",
                                     spec.size, "), slot ", h->slot_bytes, " (want ",
                                     seg->spec_.slot_bytes, "), mailbox ", h->mailbox_bytes,
                                     " (want ", seg->spec_.mailbox_bytes, ")");
    }
  }
  seg->controls_[spec.rank].pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  h->attached.fetch_add(1, std::memory_order_seq_cst);
  seg->RingAll();
  Status all = seg->WaitFor(
      [&] {
        return h->attached.load(std::memory_order_acquire) >= static_cast<uint32_t>(spec.size);
      },
      spec.deadline_ns, "comm/shm: attaching", -1);
  if (!all.ok()) {
    return DeadlineExceededError(who, ": only ", h->attached.load(), " of ", spec.size,
                                 " ranks attached before the deadline");
  }
  if (spec.rank == 0) {
    ::shm_unlink(seg->name_.c_str());
    seg->unlinked_ = true;
  }
  seg->pidfds_.resize(static_cast<size_t>(spec.size));
  for (int r = 0; r < spec.size; ++r) {
    if (r == spec.rank) continue;
    const int pid = seg->controls_[r].pid.load(std::memory_order_acquire);
    const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pfd < 0) {
      return UnavailableError(who, ": rank ", r, " (pid ", pid,
                              ") is not a live process here: ", tcp::ErrnoText(errno));
    }
    seg->pidfds_[r] = tcp::Fd(pfd);
  }
  return seg;
}

Segment::~Segment() {
  if (spec_.rank == 0 && !unlinked_ && !name_.empty()) ::shm_unlink(name_.c_str());
  if (base_ != nullptr) ::munmap(base_, static_cast<size_t>(mapped_bytes_));
}

void Segment::Ring(int r) {
  RankControl& c = controls_[r];
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (c.waiters.load(std::memory_order_seq_cst) == 0) return;
  c.bell.fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&c.bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
}

void Segment::RingAll() {
  for (int r = 0; r < spec_.size; ++r) {
    if (r != spec_.rank) Ring(r);
  }
}

void Segment::Sleep(uint32_t seen, int64_t max_ns) {
  if (max_ns <= 0) return;
  timespec ts{static_cast<time_t>(max_ns / 1'000'000'000),
              static_cast<long>(max_ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&controls_[spec_.rank].bell), FUTEX_WAIT, seen,
            &ts, nullptr, 0);
}

Status Segment::CheckPeers(const char* what, int waiting_for) {
  LOOM_RETURN_IF_ERROR(AbortStatus());
  for (int r = 0; r < static_cast<int>(pidfds_.size()); ++r) {
    if (!pidfds_[r].valid()) continue;
    pollfd p{pidfds_[r].get(), POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) {
      return UnavailableError(what, ": rank ", r, " (pid ", controls_[r].pid.load(),
                              ") exited without finishing");
    }
  }
  return OkStatus();
}

void Segment::Abort(const Status& status) {
  int32_t expected = -1;
  if (!header_->abort_rank.compare_exchange_strong(expected, -2)) return;
  const std::string text = status.ToString();
  const size_t n = std::min(text.size(), kAbortReasonBytes - 1);
  std::memcpy(header_->abort_reason, text.data(), n);
  header_->abort_reason[n] = '\0';
  header_->abort_rank.store(spec_.rank, std::memory_order_release);
  RingAll();
}

Status Segment::AbortStatus() const {
  const int32_t r = header_->abort_rank.load(std::memory_order_acquire);
  if (r < 0 || r == spec_.rank) return OkStatus();
  char reason[kAbortReasonBytes];
  std::memcpy(reason, header_->abort_reason, kAbortReasonBytes);
  reason[kAbortReasonBytes - 1] = '\0';
  return UnavailableError("rank ", r, " failed: ", reason);
}

}  // namespace loom::comm::shm
