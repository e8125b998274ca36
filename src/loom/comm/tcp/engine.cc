#include "loom/comm/tcp/engine.h"

#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "loom/comm/reduce.h"

namespace loom::comm::tcp {

namespace {

constexpr int64_t kInBufferBytes = 256 << 10;
// Payload still missing beyond this is read straight into the destination, not via the buffer.
constexpr int64_t kDirectReadMin = 64 << 10;
// Polls without progress before the spinning loop starts yielding the CPU.
constexpr int kSpinsBeforeYield = 64;
// How long before an emulated delivery time a sleeping wait wakes up to spin.
constexpr int64_t kSleepMargin = 1'000'000;

bool IsReceive(const Transfer& t) { return t.kind != Transfer::Kind::kSend; }

std::string Describe(const MessageHeader& h) {
  if (h.op == Op::kSend) return StrCat("send (tag ", h.tag, ", ", h.bytes, " bytes)");
  return StrCat(OpName(h.op), " #", h.index, " (", h.bytes, " bytes at offset ", h.offset, ")");
}

void SleepNanos(int64_t ns) {
  if (ns <= 0) return;
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  ::nanosleep(&ts, nullptr);
}

}  // namespace

Engine::Engine(EngineOptions options, std::vector<Fd> conns) : options_(std::move(options)) {
  conns_.resize(conns.size());
  for (size_t i = 0; i < conns.size(); ++i) {
    conns_[i].fd = std::move(conns[i]);
    if (conns_[i].fd.valid()) conns_[i].in = base::AlignedBuffer<uint8_t>(kInBufferBytes);
  }
  // Each peer's emulated delay, by its host (LinkEmulation::delay_us_from).
  delay_ns_.assign(static_cast<size_t>(options_.size), 0);
  for (int p = 0; p < options_.size; ++p) {
    std::string host = p < static_cast<int>(options_.peers.size()) ? options_.peers[p] : "";
    if (const size_t colon = host.rfind(':'); colon != std::string::npos) host.resize(colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    host = SplitHostAlternatives(host).front();
    delay_ns_[static_cast<size_t>(p)] =
        static_cast<int64_t>(options_.link.DelayFromUs(host) * 1000.0);
  }
  send_busy_.resize(conns_.size());
  recv_busy_.resize(conns_.size());
  pollfds_.reserve(conns_.size());
}

std::string Engine::PeerName(int peer, int channel) const {
  const std::string addr =
      peer >= 0 && peer < static_cast<int>(options_.peers.size()) ? options_.peers[peer] : "?";
  if (options_.channels == 1) return StrCat("rank ", peer, " (", addr, ")");
  return StrCat("rank ", peer, " (", addr, ", channel ", channel, ")");
}

void Engine::CloseAll() {
  for (Connection& c : conns_) ShutdownAndClose(c.fd);
}

Status Engine::Fill(Connection& c, int peer, int channel, bool* got) {
  *got = false;
  if (c.in_begin == c.in_end) c.in_begin = c.in_end = 0;
  if (c.in_end == c.in.size()) {
    std::memmove(c.in.data(), c.in.data() + c.in_begin, static_cast<size_t>(c.in_end - c.in_begin));
    c.in_end -= c.in_begin;
    c.in_begin = 0;
  }
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), c.in.data() + c.in_end,
                             static_cast<size_t>(c.in.size() - c.in_end), MSG_DONTWAIT);
    if (n > 0) {
      c.in_end += n;
      *got = true;
      return OkStatus();
    }
    // A peer that dies with bytes of ours unread resets the connection instead of closing it.
    if (n == 0 || errno == ECONNRESET) {
      return UnavailableError(PeerName(peer, channel),
                              " closed the connection (the process exited or failed)");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return OkStatus();
    return UnavailableError("receiving from ", PeerName(peer, channel), ": ", ErrnoText(errno));
  }
}

Status Engine::ReadHeader(Connection& c, int peer, int channel, MessageHeader* h, bool* have) {
  *have = false;
  while (c.in_end - c.in_begin < static_cast<int64_t>(kHeaderBytes)) {
    bool got = false;
    LOOM_RETURN_IF_ERROR(Fill(c, peer, channel, &got));
    if (!got) return OkStatus();
  }
  Status decoded = DecodeHeader({c.in.data() + c.in_begin, kHeaderBytes}, h);
  if (!decoded.ok()) return decoded.WithContext(StrCat("from ", PeerName(peer, channel)));
  c.in_begin += static_cast<int64_t>(kHeaderBytes);
  if (h->group != options_.group) {
    return DataLossError("message from ", PeerName(peer, channel), " belongs to group ", h->group,
                         ", not this group (", options_.group, ")");
  }
  if (h->seq != c.recv_seq + 1) {
    return DataLossError("message from ", PeerName(peer, channel), " has sequence number ", h->seq,
                         ", expected ", c.recv_seq + 1, " (lost or duplicated message)");
  }
  c.recv_seq = h->seq;
  *have = true;
  return OkStatus();
}

// `c` is channel 0 of the sending peer: the channels of a peer pair share one emulated link.
int64_t Engine::DeliveryTime(int peer, Connection& c, const MessageHeader& h) {
  const LinkEmulation& link = options_.link;
  if (!link.enabled()) return 0;
  const int64_t sent = h.send_time_ns > 0 ? h.send_time_ns : NowNanos();
  const int64_t serialize =
      link.gbps > 0
          ? static_cast<int64_t>(static_cast<double>(h.bytes + kHeaderBytes) * 8.0 / link.gbps)
          : 0;
  const int64_t start = std::max(c.link_free_ns, sent);
  c.link_free_ns = start + serialize;
  return c.link_free_ns + delay_ns_[static_cast<size_t>(peer)];
}

Status Engine::MatchHeader(Transfer& t, const MessageHeader& h, bool* stash) {
  *stash = false;
  const MessageHeader& want = t.header;
  const bool same = h.op == want.op && h.tag == want.tag && h.index == want.index;
  if (!same) {
    // Point-to-point messages may interleave with anything on channel 0; set them aside.
    if (t.channel == 0 && (h.op == Op::kSend || want.op == Op::kSend)) {
      *stash = true;
      return OkStatus();
    }
    return FailedPreconditionError(PeerName(t.peer, t.channel), " sent ", Describe(h),
                                   " where this rank expects ", Describe(want),
                                   ": the ranks called collectives in different orders");
  }
  if (h.bytes != want.bytes || h.offset != want.offset) {
    if (want.op == Op::kSend) {
      return InvalidArgumentError(PeerName(t.peer, t.channel), " sent a ", h.bytes,
                                  "-byte message (tag ", h.tag, ") but the receive expects ",
                                  want.bytes, " bytes");
    }
    return InvalidArgumentError(PeerName(t.peer, t.channel), " sent ", Describe(h),
                                " where this rank expects ", Describe(want),
                                ": the ranks passed different sizes");
  }
  if (h.dtype != want.dtype) {
    return InvalidArgumentError(PeerName(t.peer, t.channel), " sent ", Describe(h), " of ",
                                ElementTypeName(static_cast<ElementType>(h.dtype)),
                                " but this rank reduces ",
                                ElementTypeName(static_cast<ElementType>(want.dtype)));
  }
  return OkStatus();
}

StatusOr<bool> Engine::TakeFromStash(Transfer& t) {
  if (stash_.empty() || t.channel != 0) return false;
  const MessageHeader& want = t.header;
  for (auto it = stash_.begin(); it != stash_.end(); ++it) {
    if (it->peer != t.peer || it->header.op != want.op || it->header.tag != want.tag ||
        it->header.index != want.index) {
      continue;
    }
    bool stash = false;
    LOOM_RETURN_IF_ERROR(MatchHeader(t, it->header, &stash));
    const int64_t bytes = static_cast<int64_t>(it->payload.size());
    if (t.kind == Transfer::Kind::kRecvReduce) {
      const auto type = static_cast<ElementType>(want.dtype);
      AddInto(t.data, it->payload.data(), bytes / ElementSize(type), type);
    } else if (bytes > 0) {
      std::memcpy(t.data, it->payload.data(), static_cast<size_t>(bytes));
    }
    t.done = bytes;
    t.matched = t.received = true;
    t.ready_at_ns = it->ready_at_ns;
    stashed_bytes_ -= bytes;
    stash_.erase(it);
    return true;
  }
  return false;
}

Status Engine::ContinueStash(Connection& c, int peer, bool* progress) {
  const int64_t total = static_cast<int64_t>(c.stash_header.bytes);
  while (c.stash_done < total) {
    int64_t avail = c.in_end - c.in_begin;
    if (avail == 0) {
      bool got = false;
      LOOM_RETURN_IF_ERROR(Fill(c, peer, 0, &got));
      if (!got) return OkStatus();
      avail = c.in_end - c.in_begin;
    }
    const int64_t take = std::min(avail, total - c.stash_done);
    std::memcpy(c.stash_payload.data() + c.stash_done, c.in.data() + c.in_begin,
                static_cast<size_t>(take));
    c.in_begin += take;
    c.stash_done += take;
    *progress = true;
  }
  stash_.push_back(
      Stashed{peer, c.stash_header, std::move(c.stash_payload), DeliveryTime(peer, c, c.stash_header)});
  c.stash_payload = {};
  c.stashing = false;
  return OkStatus();
}

Status Engine::ConsumePayload(Transfer& t, Connection& c, bool* progress) {
  const int64_t total = static_cast<int64_t>(t.header.bytes);
  const bool reduce = t.kind == Transfer::Kind::kRecvReduce;
  const auto type = static_cast<ElementType>(t.header.dtype);
  const int64_t unit = reduce ? ElementSize(type) : 1;
  while (t.done < total) {
    const int64_t avail = c.in_end - c.in_begin;
    const int64_t take = std::min(avail, total - t.done) / unit * unit;
    if (take > 0) {
      if (reduce) {
        AddInto(t.data + t.done, c.in.data() + c.in_begin, take / unit, type);
      } else {
        std::memcpy(t.data + t.done, c.in.data() + c.in_begin, static_cast<size_t>(take));
      }
      c.in_begin += take;
      t.done += take;
      *progress = true;
      continue;
    }
    if (!reduce && avail == 0 && total - t.done >= kDirectReadMin) {
      const ssize_t n =
          ::recv(c.fd.get(), t.data + t.done, static_cast<size_t>(total - t.done), MSG_DONTWAIT);
      if (n > 0) {
        t.done += n;
        *progress = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return OkStatus();
      if (n == 0 || errno == ECONNRESET) {  // reset: it died with bytes of ours unread
        return UnavailableError(PeerName(t.peer, t.channel),
                                " closed the connection (the process exited or failed)");
      }
      return UnavailableError("receiving from ", PeerName(t.peer, t.channel), ": ",
                              ErrnoText(errno));
    }
    bool got = false;
    LOOM_RETURN_IF_ERROR(Fill(c, t.peer, t.channel, &got));
    if (!got) return OkStatus();
  }
  return OkStatus();
}

Status Engine::ProgressRecv(Transfer& t, bool* progress) {
  Connection& c = Conn(t.peer, t.channel);
  while (!t.received) {
    if (!t.matched) {
      if (c.stashing) {
        LOOM_RETURN_IF_ERROR(ContinueStash(c, t.peer, progress));
        if (c.stashing) return OkStatus();
      }
      LOOM_ASSIGN_OR_RETURN(bool taken, TakeFromStash(t));
      if (taken) {
        *progress = true;
        break;
      }
      MessageHeader h;
      bool have = false;
      LOOM_RETURN_IF_ERROR(ReadHeader(c, t.peer, t.channel, &h, &have));
      if (!have) return OkStatus();
      *progress = true;
      bool stash = false;
      LOOM_RETURN_IF_ERROR(MatchHeader(t, h, &stash));
      if (stash) {
        if (stashed_bytes_ + static_cast<int64_t>(h.bytes) > options_.stash_limit_bytes) {
          return ResourceExhaustedError(
              PeerName(t.peer, 0), " sent ", Describe(h), " while this rank waits for ",
              Describe(t.header), "; setting it aside would exceed the ",
              options_.stash_limit_bytes, "-byte limit for unexpected messages");
        }
        c.stashing = true;
        c.stash_header = h;
        c.stash_payload.assign(h.bytes, std::byte{0});
        c.stash_done = 0;
        stashed_bytes_ += static_cast<int64_t>(h.bytes);
        continue;
      }
      t.matched = true;
      t.ready_at_ns = DeliveryTime(t.peer, Conn(t.peer, 0), h);
    }
    LOOM_RETURN_IF_ERROR(ConsumePayload(t, c, progress));
    if (t.done < static_cast<int64_t>(t.header.bytes)) return OkStatus();
    t.received = true;
  }
  return OkStatus();
}

Status Engine::ProgressSend(Transfer& t, bool* progress) {
  Connection& c = Conn(t.peer, t.channel);
  if (t.header.seq == 0) {
    t.header.seq = ++c.send_seq;
    t.header.group = options_.group;
    t.header.send_time_ns = options_.link.enabled() ? t.posted_ns : 0;
    EncodeHeader(t.header, std::span<uint8_t, kHeaderBytes>(t.wire));
  }
  const int64_t hdr = static_cast<int64_t>(kHeaderBytes);
  const int64_t total = hdr + static_cast<int64_t>(t.header.bytes);
  while (t.done < total) {
    iovec iov[2];
    int n = 0;
    if (t.done < hdr) iov[n++] = {t.wire + t.done, static_cast<size_t>(hdr - t.done)};
    const int64_t payload_done = std::max<int64_t>(t.done - hdr, 0);
    if (payload_done < static_cast<int64_t>(t.header.bytes)) {
      iov[n++] = {t.data + payload_done, static_cast<size_t>(t.header.bytes - payload_done)};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t r = ::sendmsg(c.fd.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      t.done += r;
      *progress = true;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return OkStatus();
    const int err = errno;
    if (err == EPIPE || err == ECONNRESET) {
      return UnavailableError(PeerName(t.peer, t.channel),
                              " closed the connection (the process exited or failed)");
    }
    return UnavailableError("sending to ", PeerName(t.peer, t.channel), ": ", ErrnoText(err));
  }
  t.complete = true;
  return OkStatus();
}

Status Engine::Wait(int64_t until_ns) {
  pollfds_.clear();
  for (size_t i = 0; i < conns_.size(); ++i) {
    short events = 0;
    if (send_busy_[i]) events |= POLLOUT;
    if (recv_busy_[i]) events |= POLLIN;
    if (events != 0) pollfds_.push_back({conns_[i].fd.get(), events, 0});
  }
  const int64_t left = until_ns - NowNanos();
  if (left <= 0) return OkStatus();
  if (pollfds_.empty()) {
    SleepNanos(left);
    return OkStatus();
  }
  timespec ts{static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
  const int rc = ::ppoll(pollfds_.data(), pollfds_.size(), &ts, nullptr);
  if (rc < 0 && errno != EINTR) return UnavailableError("poll failed: ", ErrnoText(errno));
  return OkStatus();
}

std::string Describe(const OpLabel& l) {
  if (l.index == 0) return StrCat(l.op, " rank ", l.peer, " (tag ", l.tag, ", ", l.bytes, " bytes)");
  return StrCat(l.op, " #", l.index, " (", l.bytes, " bytes", *l.note ? ", " : "", l.note, ")");
}

Status Engine::TimeoutError(std::span<Transfer> batch) const {
  std::string waiting;
  int listed = 0;
  for (const Transfer& t : batch) {
    if (t.complete || listed >= 4) continue;
    ++listed;
    waiting += StrCat(waiting.empty() ? "" : "; ");
    if (IsReceive(t)) {
      waiting += StrCat("receiving from ", PeerName(t.peer, t.channel), " (",
                        t.matched ? t.done : 0, " of ", t.header.bytes, " bytes arrived)");
    } else {
      waiting += StrCat("sending to ", PeerName(t.peer, t.channel), " (", t.done, " of ",
                        t.header.bytes + kHeaderBytes, " bytes written)");
    }
  }
  return DeadlineExceededError("timed out; still ", waiting,
                               " (raise LOOM_COMM_TIMEOUT_S if the peer is just slow)");
}

Status Engine::Run(std::span<Transfer> batch, int64_t deadline_ns, const OpLabel& label) {
  auto fail = [&](const Status& s) {
    return s.WithContext(StrCat("comm/tcp: rank ", options_.rank, ": ", Describe(label)));
  };
  if (batch.empty()) return OkStatus();
  int64_t now = NowNanos();
  for (Transfer& t : batch) {
    t.done = 0;
    t.ready_at_ns = 0;
    t.matched = t.received = t.complete = false;
    t.posted_ns = now;
    if (t.kind == Transfer::Kind::kSend) t.header.seq = 0;
    const size_t ci = static_cast<size_t>(t.peer * options_.channels + t.channel);
    if (t.peer < 0 || t.peer >= options_.size || t.peer == options_.rank || t.channel < 0 ||
        t.channel >= options_.channels || !conns_[ci].fd.valid()) {
      return fail(
          InternalError("transfer to rank ", t.peer, " channel ", t.channel, " has no connection"));
    }
  }
  int64_t last_progress = now;
  int idle_spins = 0;
  for (;;) {
    std::fill(send_busy_.begin(), send_busy_.end(), 0);
    std::fill(recv_busy_.begin(), recv_busy_.end(), 0);
    bool progress = false;
    int remaining = 0;
    int64_t next_ready = INT64_MAX;
    bool io_pending = false;
    for (Transfer& t : batch) {
      if (t.complete) continue;
      const size_t ci = static_cast<size_t>(t.peer * options_.channels + t.channel);
      if (t.kind == Transfer::Kind::kSend) {
        if (!send_busy_[ci]) {
          Status s = ProgressSend(t, &progress);
          if (!s.ok()) return fail(s);
          if (!t.complete) send_busy_[ci] = 1;
        }
      } else if (!t.received) {
        if (!recv_busy_[ci]) {
          Status s = ProgressRecv(t, &progress);
          if (!s.ok()) return fail(s);
          if (!t.received) recv_busy_[ci] = 1;
        }
      }
      if (IsReceive(t) && t.received) {
        if (t.ready_at_ns <= 0 || t.ready_at_ns <= NowNanos()) {
          t.complete = true;
        } else {
          next_ready = std::min(next_ready, t.ready_at_ns);
        }
      }
      if (!t.complete) {
        ++remaining;
        if (!(IsReceive(t) && t.received)) io_pending = true;
      }
    }
    if (remaining == 0) return OkStatus();
    now = NowNanos();
    // Checked even while bytes trickle in: a peer that drips data must not extend the deadline.
    if (now >= deadline_ns) return fail(TimeoutError(batch));
    if (progress) {
      last_progress = now;
      idle_spins = 0;
      continue;
    }
    if (!io_pending) {
      // Only emulated link delays are left: spin (yielding) until they pass, sleeping only through
      // long ones.  A sleep overshoots by 50-350 us in our VMs (timer slack, wake-up latency),
      // which made a 300 us link measure 650 us.
      const int64_t wait = std::min(next_ready, deadline_ns) - now;
      if (wait > kSleepMargin + 1'000'000) {
        SleepNanos(wait - kSleepMargin);
      } else {
        sched_yield();
      }
      continue;
    }
    if (now - last_progress < options_.spin_ns) {
      if (options_.spin_yield && ++idle_spins > kSpinsBeforeYield) sched_yield();
      continue;
    }
    Status s = Wait(std::min({deadline_ns, next_ready, now + 1'000'000'000}));
    if (!s.ok()) return fail(s);
  }
}

}  // namespace loom::comm::tcp
