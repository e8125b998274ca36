#include "loom/comm/tcp/handshake.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <deque>

#include "loom/comm/config.h"
#include "loom/comm/wire.h"

namespace loom::comm::tcp {

namespace {

constexpr size_t kMaxPendingHandshakes = 64;

std::string Who(const MeshSpec& spec, int rank) {
  return StrCat("rank ", rank, " (", spec.peers[static_cast<size_t>(rank)], ")");
}

// An accepted socket waiting for its ClientHello.
struct Pending {
  Fd fd;
  Nonce nonce{};
  std::array<uint8_t, kClientHelloBytes> buf{};
  size_t have = 0;
};

// Validates a complete ClientHello; returns kNone to accept.
RejectReason Judge(const MeshSpec& spec, uint64_t group, const Pending& p, const ClientHello& m,
                   const std::vector<Fd>& conns) {
  if (m.group != group || m.size != static_cast<uint32_t>(spec.size)) {
    return RejectReason::kWrongGroup;
  }
  const Digest want = HelloMac(spec.secret, "client", group, m.size, m.rank, m.server_rank,
                               m.channel, p.nonce, m.nonce);
  if (!DigestEqual(want, m.mac)) return RejectReason::kAuthFailed;
  if (m.server_rank != static_cast<uint32_t>(spec.rank) ||
      m.rank <= static_cast<uint32_t>(spec.rank) ||
      m.channel >= static_cast<uint32_t>(spec.channels)) {
    return RejectReason::kBadRank;
  }
  if (conns[m.rank * spec.channels + m.channel].valid()) return RejectReason::kDuplicate;
  return RejectReason::kNone;
}

Status AcceptAll(const MeshSpec& spec, Fd& listener, std::vector<Fd>& conns) {
  const uint64_t group = GroupFingerprint(spec.group_id);
  int missing = (spec.size - 1 - spec.rank) * spec.channels;
  const int flags = ::fcntl(listener.get(), F_GETFL, 0);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return UnavailableError("comm/tcp: cannot make the listener non-blocking: ", ErrnoText(errno));
  }
  std::deque<Pending> pending;
  std::vector<pollfd> fds;
  Status last_refusal;
  while (missing > 0) {
    if (NowNanos() >= spec.deadline_ns) {
      std::string who;
      for (int r = spec.rank + 1; r < spec.size; ++r) {
        for (int c = 0; c < spec.channels; ++c) {
          if (!conns[r * spec.channels + c].valid()) {
            who = Who(spec, r);
            break;
          }
        }
        if (!who.empty()) break;
      }
      return DeadlineExceededError(
          "comm/tcp: rank ", spec.rank, " (", spec.peers[spec.rank], ") waited for ", missing,
          " connection(s); ", who, " never connected",
          last_refusal.ok() ? "" : " (refused others: ",
          last_refusal.ok() ? "" : last_refusal.message(), last_refusal.ok() ? "" : ")");
    }
    fds.clear();
    fds.push_back({listener.get(), POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    const int64_t left_ms = (spec.deadline_ns - NowNanos()) / 1'000'000 + 1;
    const int rc =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left_ms, 200)));
    if (rc < 0 && errno != EINTR) {
      return UnavailableError("comm/tcp: poll failed while accepting: ", ErrnoText(errno));
    }
    // Read what arrived on pending handshakes (before accepting, so that indices stay valid).
    for (size_t i = pending.size(); i-- > 0;) {
      if (fds[i + 1].revents == 0) continue;
      Pending& p = pending[i];
      bool drop = false;
      const ssize_t n =
          ::recv(p.fd.get(), p.buf.data() + p.have, p.buf.size() - p.have, MSG_DONTWAIT);
      if (n > 0) {
        p.have += static_cast<size_t>(n);
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        drop = true;
      }
      if (!drop && p.have == p.buf.size()) {
        ClientHello m;
        RejectReason reason = RejectReason::kWrongGroup;
        Status decoded = DecodeClientHello(p.buf, &m);
        if (decoded.ok()) reason = Judge(spec, group, p, m, conns);
        HelloReply reply;
        std::array<uint8_t, kHelloReplyBytes> out{};
        if (reason == RejectReason::kNone) {
          reply.accept = true;
          reply.mac = HelloMac(spec.secret, "server", group, m.size, m.rank, m.server_rank,
                               m.channel, p.nonce, m.nonce);
          EncodeHelloReply(reply, out);
          Status sent = WriteFull(p.fd.get(), out, spec.deadline_ns, Who(spec, m.rank));
          if (sent.ok()) {
            conns[m.rank * spec.channels + m.channel] = std::move(p.fd);
            --missing;
          }
        } else {
          reply.reason = reason;
          EncodeHelloReply(reply, out);
          (void)WriteFull(p.fd.get(), out, std::min(spec.deadline_ns, NowNanos() + 100'000'000),
                          "refused peer");
          last_refusal = decoded.ok() ? PermissionDeniedError("a peer claiming rank ", m.rank, ": ",
                                                              RejectReasonText(reason))
                                      : decoded;
        }
        drop = true;
      }
      if (drop) pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (fds[0].revents != 0) {
      for (;;) {
        Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd.valid()) break;
        if (!ConfigureStream(fd.get()).ok()) continue;
        Pending p;
        LOOM_RETURN_IF_ERROR(RandomNonce(&p.nonce));
        ServerHello hello;
        hello.group = group;
        hello.rank = static_cast<uint32_t>(spec.rank);
        hello.size = static_cast<uint32_t>(spec.size);
        hello.nonce = p.nonce;
        std::array<uint8_t, kServerHelloBytes> out{};
        EncodeServerHello(hello, out);
        if (!WriteFull(fd.get(), out, NowNanos() + 100'000'000, "new peer").ok()) continue;
        p.fd = std::move(fd);
        pending.push_back(std::move(p));
        if (pending.size() > kMaxPendingHandshakes) pending.pop_front();
      }
    }
  }
  return OkStatus();
}

}  // namespace

Status ClientHandshake(int fd, const MeshSpec& spec, int server_rank, int channel) {
  const std::string who = Who(spec, server_rank);
  const uint64_t group = GroupFingerprint(spec.group_id);
  std::array<uint8_t, kServerHelloBytes> hello_bytes{};
  LOOM_RETURN_IF_ERROR(ReadFull(fd, hello_bytes, spec.deadline_ns, who));
  ServerHello hello;
  LOOM_RETURN_IF_ERROR(DecodeServerHello(hello_bytes, &hello).WithContext(who));
  if (hello.group != group || hello.size != static_cast<uint32_t>(spec.size) ||
      hello.rank != static_cast<uint32_t>(server_rank)) {
    return FailedPreconditionError(
        who, " answered as rank ", hello.rank, " of a ", hello.size, "-rank group with id hash ",
        hello.group, ", but this rank expects rank ", server_rank, " of a ", spec.size,
        "-rank group with id hash ", group, " (another job on that port?)");
  }
  ClientHello m;
  m.group = group;
  m.rank = static_cast<uint32_t>(spec.rank);
  m.size = static_cast<uint32_t>(spec.size);
  m.server_rank = static_cast<uint32_t>(server_rank);
  m.channel = static_cast<uint32_t>(channel);
  LOOM_RETURN_IF_ERROR(RandomNonce(&m.nonce));
  m.mac = HelloMac(spec.secret, "client", group, m.size, m.rank, m.server_rank, m.channel,
                   hello.nonce, m.nonce);
  std::array<uint8_t, kClientHelloBytes> out{};
  EncodeClientHello(m, out);
  LOOM_RETURN_IF_ERROR(WriteFull(fd, out, spec.deadline_ns, who));
  std::array<uint8_t, kHelloReplyBytes> reply_bytes{};
  LOOM_RETURN_IF_ERROR(ReadFull(fd, reply_bytes, spec.deadline_ns, who));
  HelloReply reply;
  LOOM_RETURN_IF_ERROR(DecodeHelloReply(reply_bytes, &reply).WithContext(who));
  if (!reply.accept) {
    return PermissionDeniedError(who, " refused the connection: ", RejectReasonText(reply.reason));
  }
  const Digest want = HelloMac(spec.secret, "server", group, m.size, m.rank, m.server_rank,
                               m.channel, hello.nonce, m.nonce);
  if (!DigestEqual(want, reply.mac)) {
    return PermissionDeniedError(who, " failed to prove the group secret");
  }
  return OkStatus();
}

StatusOr<std::vector<Fd>> BuildMesh(const MeshSpec& spec, Fd listener) {
  std::vector<Fd> conns(static_cast<size_t>(spec.size * spec.channels));
  for (int peer = 0; peer < spec.rank; ++peer) {
    std::string host;
    int port = 0;
    LOOM_RETURN_IF_ERROR(ParseHostPort(spec.peers[peer], &host, &port));
    // "a+b": the peer's addresses on two links; channel c dials the (c mod n)-th, so large
    // messages (striped over the channels) use both links and small ones (channel 0) the first.
    const std::vector<std::string> hosts = SplitHostAlternatives(host);
    for (int c = 0; c < spec.channels; ++c) {
      auto fd = ConnectWithRetry(hosts[static_cast<size_t>(c) % hosts.size()], port,
                                 spec.deadline_ns, Who(spec, peer));
      if (!fd.ok()) return fd.status().WithContext(StrCat("comm/tcp: rank ", spec.rank));
      Status hs = ClientHandshake(fd->get(), spec, peer, c);
      if (!hs.ok()) return hs.WithContext(StrCat("comm/tcp: rank ", spec.rank));
      conns[peer * spec.channels + c] = std::move(*fd);
    }
  }
  if (spec.rank + 1 < spec.size) LOOM_RETURN_IF_ERROR(AcceptAll(spec, listener, conns));
  return conns;
}

}  // namespace loom::comm::tcp
