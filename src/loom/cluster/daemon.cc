// The cluster daemon's connections and membership: announcements, dialling, the handshake,
// heartbeats and departures.
#include "loom/cluster/daemon.h"

#include <algorithm>

#include <boost/asio/ip/multicast.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "loom/cluster/daemon_impl.h"
#include "loom/cluster/machine.h"

namespace loom::cluster {
namespace {

Nonce RandomNonce(std::mt19937_64& rng) {
  Nonce n{};
  for (size_t i = 0; i < n.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(n.data() + i, &v, 8);
  }
  return n;
}

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

bool SplitHostPort(const std::string& spec, std::string* host, uint16_t* port) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string p = spec.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const int v = std::stoi(p);
  if (v < 1 || v > 65535) return false;
  *host = spec.substr(0, colon);
  *port = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

std::string Conn::label() const {
  if (state == State::kUp) return StrCat(peer_name, " (", ShortId(peer_id), ") at ", remote_host);
  return remote_host.empty() ? static_peer : remote_host;
}

Daemon::Impl::Impl(asio::io_context& io, DaemonOptions options, Facts facts)
    : io_(io),
      opt_(std::move(options)),
      facts_(std::move(facts)),
      rng_(std::random_device{}()),
      acceptor_(io),
      udp_(io),
      control_(io),
      announce_timer_(io),
      heartbeat_timer_(io),
      probe_timer_(io) {
  for (size_t i = 0; i < id_.size(); i += 8) {
    const uint64_t v = rng_();
    std::memcpy(id_.data() + i, &v, 8);
  }
  announce_key_ = DeriveKey(opt_.secret, KeyPurpose::kAnnounce);
  handshake_key_ = DeriveKey(opt_.secret, KeyPurpose::kHandshake);
}

Daemon::Impl::~Impl() {
  if (worker_.joinable()) worker_.join();
}

Status Daemon::Impl::Start() {
  if (opt_.secret.empty()) {
    return InvalidArgumentError("cluster: a secret is required (--secret or --secret-file): "
                                "every member must share it");
  }
  for (const std::string& p : opt_.peers) {
    std::string host;
    uint16_t port = 0;
    if (!SplitHostPort(p, &host, &port)) {
      return InvalidArgumentError("cluster: --peer '", p, "' is not HOST:PORT");
    }
    static_next_[p] = Clock::now();
  }
  boost::system::error_code ec;
  const auto bind_addr = asio::ip::make_address(opt_.bind_host, ec);
  if (ec) return InvalidArgumentError("cluster: bad bind address '", opt_.bind_host, "'");
  acceptor_.open(bind_addr.is_v6() ? tcp::v6() : tcp::v4(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(tcp::endpoint(bind_addr, static_cast<uint16_t>(opt_.port)), ec);
  if (!ec) acceptor_.listen(64, ec);
  if (!ec) port_ = acceptor_.local_endpoint(ec).port();
  if (ec) {
    return UnavailableError("cluster: cannot listen on ", opt_.bind_host, ":", opt_.port, ": ",
                            ec.message(),
                            opt_.port == kDefaultPort ? " (is another daemon running?)" : "");
  }
  if (opt_.multicast) {
    const auto group = asio::ip::make_address(opt_.multicast_group, ec);
    if (ec || !group.is_v4() || !group.is_multicast()) {
      return InvalidArgumentError("cluster: '", opt_.multicast_group,
                                  "' is not an IPv4 multicast group");
    }
    udp_.open(udp::v4(), ec);
    if (!ec) udp_.set_option(udp::socket::reuse_address(true), ec);
    if (!ec) udp_.bind(udp::endpoint(asio::ip::address_v4::any(),
                                     static_cast<uint16_t>(opt_.multicast_port)), ec);
    if (ec) {
      return UnavailableError("cluster: cannot bind UDP port ", opt_.multicast_port, ": ",
                              ec.message());
    }
    udp_.set_option(asio::ip::multicast::enable_loopback(false), ec);
    udp_.set_option(asio::ip::multicast::hops(1), ec);
    int joined = 0;
    for (const Interface& i : ListInterfaces()) {
      if (i.address.rfind("127.", 0) == 0) continue;
      udp_.set_option(asio::ip::multicast::join_group(group.to_v4(),
                                                      asio::ip::make_address_v4(i.address)), ec);
      if (!ec) ++joined;
    }
    if (joined == 0) Log("note: no interface joined the multicast group; static peers only");
  }
  if (!opt_.control_path.empty()) {
    // A live daemon answers on its socket; a stale file from a crash is removed.
    if (QueryDaemon(opt_.control_path, 1).ok()) {
      return FailedPreconditionError("cluster: a daemon already answers at ", opt_.control_path,
                                     " (stop it, or give this one --control)");
    }
    ::unlink(opt_.control_path.c_str());
    control_.open(asio::local::stream_protocol(), ec);
    if (!ec) control_.bind(asio::local::stream_protocol::endpoint(opt_.control_path), ec);
    if (ec) {
      return UnavailableError("cluster: cannot create the control socket ", opt_.control_path,
                              ": ", ec.message());
    }
    ::chmod(opt_.control_path.c_str(), 0600);
    control_.listen(16, ec);
    if (ec) return UnavailableError("cluster: listen on ", opt_.control_path, ": ", ec.message());
    AcceptControl();
  }
  Accept();
  if (opt_.multicast) {
    ReceiveAnnouncement();
    StartAnnouncing();
  }
  DialStaticPeers();
  Tick();
  Log(StrCat("member ", ShortId(id_), " (", facts_.name, ") listening on port ",
             port_,
             opt_.multicast ? StrCat(", announcing on ", opt_.multicast_group, ":",
                                     opt_.multicast_port)
                            : std::string(", multicast off")));
  return OkStatus();
}

void Daemon::Impl::Stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  udp_.close(ec);
  control_.close(ec);
  if (!opt_.control_path.empty()) ::unlink(opt_.control_path.c_str());
  announce_timer_.cancel();
  heartbeat_timer_.cancel();
  probe_timer_.cancel();
  const std::set<ConnPtr> all = conns_;
  for (const ConnPtr& c : all) Close(c, "this daemon is stopping");
  StopRanks([](const LocalRank&) { return true; }, "this daemon is stopping");
  launches_.clear();
}

// ---- announcements ----

void Daemon::Impl::StartAnnouncing() {
  Announce();
  announce_timer_.expires_after(Ms(opt_.announce_s));
  announce_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) StartAnnouncing();
  });
}

void Daemon::Impl::Announce() {
  cluster::Announce a;
  a.id = id_;
  a.port = port_;
  a.name = facts_.name;
  const std::vector<uint8_t> bytes = EncodeAnnounce(a, announce_key_, announce_seq_++);
  boost::system::error_code ec;
  const udp::endpoint to(asio::ip::make_address(opt_.multicast_group, ec),
                         static_cast<uint16_t>(opt_.multicast_port));
  for (const Interface& i : ListInterfaces()) {
    if (i.address.rfind("127.", 0) == 0) continue;
    udp_.set_option(asio::ip::multicast::outbound_interface(asio::ip::make_address_v4(i.address)),
                    ec);
    if (!ec) udp_.send_to(asio::buffer(bytes), to, 0, ec);
  }
}

void Daemon::Impl::ReceiveAnnouncement() {
  udp_.async_receive_from(asio::buffer(udp_buf_), udp_from_,
                          [this](const boost::system::error_code& ec, size_t n) {
                            if (ec || stopped_) return;
                            OnAnnouncement(n);
                            ReceiveAnnouncement();
                          });
}

void Daemon::Impl::OnAnnouncement(size_t bytes) {
  const std::string from = udp_from_.address().to_string();
  auto envelope = SplitEnvelope(std::span<const uint8_t>(udp_buf_.data(), bytes));
  if (!envelope.ok()) {
    Log(StrCat("ignored a datagram from ", from, ": ", envelope.status().message()));
    return;
  }
  if (Status s = Authenticate(*envelope, announce_key_); !s.ok()) {
    if (refused_++ % 64 == 0) Log(StrCat("ignored an announcement from ", from, ": ", s.message()));
    return;
  }
  auto a = DecodeAnnounce(*envelope);
  if (!a.ok()) {
    Log(StrCat("ignored an announcement from ", from, ": ", a.status().message()));
    return;
  }
  if (a->id == id_ || up_.count(a->id) || dialling_.count(a->id)) return;
  // Of two members, the one with the smaller id dials: one connection per pair.
  if (id_ < a->id) Dial(from, a->port, "", a->id);
}

// ---- connections ----

void Daemon::Impl::Accept() {
  auto c = std::make_shared<Conn>(io_);
  acceptor_.async_accept(c->socket, [this, c](const boost::system::error_code& ec) {
    if (stopped_) return;
    if (!ec) {
      boost::system::error_code e2;
      c->socket.set_option(tcp::no_delay(true), e2);
      c->remote_host = c->socket.remote_endpoint(e2).address().to_string();
      c->local_host = c->socket.local_endpoint(e2).address().to_string();
      c->last_heard = Clock::now();
      conns_.insert(c);
      StartReading(c);
    }
    Accept();
  });
}

void Daemon::Impl::Dial(const std::string& host, uint16_t port, const std::string& static_peer,
                        std::optional<MemberId> expected) {
  auto c = std::make_shared<Conn>(io_);
  c->client = true;
  c->static_peer = static_peer;
  c->expected = expected;
  c->remote_host = host;
  if (expected) dialling_.insert(*expected);
  conns_.insert(c);
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto found = resolver.resolve(host, std::to_string(port), ec);
  if (ec || found.empty()) {
    Close(c, StrCat("cannot resolve ", host, ": ", ec.message()));
    return;
  }
  const tcp::endpoint to = *found.begin();
  c->socket.async_connect(to, [this, c, host, port](const boost::system::error_code& ec) {
    if (c->state == Conn::State::kClosed) return;
    if (ec) {
      Close(c, StrCat("cannot connect to ", host, ":", port, ": ", ec.message()));
      return;
    }
    boost::system::error_code e2;
    c->socket.set_option(tcp::no_delay(true), e2);
    c->remote_host = c->socket.remote_endpoint(e2).address().to_string();
    c->local_host = c->socket.local_endpoint(e2).address().to_string();
    c->last_heard = Clock::now();
    c->my_nonce = RandomNonce(rng_);
    Hello h;
    h.id = id_;
    h.nonce = c->my_nonce;
    h.port = port_;
    h.name = facts_.name;
    Send(c, EncodeHello(h, handshake_key_));
    StartReading(c);
  });
}

void Daemon::Impl::DialStaticPeers() {
  const auto now = Clock::now();
  for (auto& [peer, next] : static_next_) {
    if (now < next) continue;
    bool have = false;
    for (const ConnPtr& c : conns_) have = have || c->static_peer == peer;
    if (have) continue;
    std::string host;
    uint16_t port = 0;
    SplitHostPort(peer, &host, &port);
    next = now + std::chrono::seconds(refused_by_.count(peer) ? 5 : 1);
    Dial(host, port, peer, std::nullopt);
  }
}

void Daemon::Impl::StartReading(const ConnPtr& c) {
  c->rbuf.resize(kHeaderBytes);
  asio::async_read(c->socket, asio::buffer(c->rbuf),
                   [this, c](const boost::system::error_code& ec, size_t) {
    if (c->state == Conn::State::kClosed) return;
    if (ec) {
      Close(c, ec == asio::error::eof ? "connection closed by the peer" : ec.message());
      return;
    }
    auto size = EnvelopeSize(c->rbuf);
    if (!size.ok()) {
      const bool version = size.status().code() == StatusCode::kFailedPrecondition;
      Refuse(c, version ? RejectReason::kVersion : RejectReason::kMalformed,
             std::string(size.status().message()));
      return;
    }
    c->rbuf.resize(static_cast<size_t>(*size));
    asio::async_read(c->socket, asio::buffer(c->rbuf.data() + kHeaderBytes,
                                             c->rbuf.size() - kHeaderBytes),
                     [this, c](const boost::system::error_code& ec, size_t) {
      if (c->state == Conn::State::kClosed) return;
      if (ec) {
        Close(c, ec.message());
        return;
      }
      c->last_heard = Clock::now();
      OnFrame(c);
      if (c->state != Conn::State::kClosed && !c->close_after_write) StartReading(c);
    });
  });
}

void Daemon::Impl::OnFrame(const ConnPtr& c) {
  auto e = SplitEnvelope(c->rbuf);
  if (!e.ok()) {
    Refuse(c, RejectReason::kMalformed, std::string(e.status().message()));
    return;
  }
  const Status s = c->state == Conn::State::kHandshake ? OnHandshakeFrame(c, *e)
                                                        : OnSessionFrame(c, *e);
  if (!s.ok()) {
    if (c->state == Conn::State::kHandshake) {
      const bool auth = s.code() == StatusCode::kPermissionDenied;
      Refuse(c, auth ? RejectReason::kAuthentication : RejectReason::kMalformed,
             std::string(s.message()));
    } else {
      Close(c, std::string(s.message()));
    }
  }
}

Status Daemon::Impl::OnHandshakeFrame(const ConnPtr& c, const Envelope& e) {
  if (e.type == MessageType::kReject) {
    auto r = DecodeReject(e);
    const std::string why = r.ok() ? r->text : std::string(r.status().message());
    if (!c->static_peer.empty()) refused_by_[c->static_peer] = why;
    Log(StrCat(c->label(), " refused this daemon: ", why));
    Close(c, "refused");
    return OkStatus();
  }
  LOOM_RETURN_IF_ERROR(Authenticate(e, handshake_key_));
  if (!c->client && e.type == MessageType::kHello && c->peer_port == 0) {
    LOOM_ASSIGN_OR_RETURN(Hello h, DecodeHello(e));
    if (h.id == id_) {
      Refuse(c, RejectReason::kSelf, "that is this daemon itself");
      return OkStatus();
    }
    c->peer_id = h.id;
    c->peer_nonce = h.nonce;
    c->peer_port = h.port;
    c->peer_name = h.name;
    c->my_nonce = RandomNonce(rng_);
    Welcome w;
    w.id = id_;
    w.nonce = c->my_nonce;
    w.echo = h.nonce;
    w.port = port_;
    w.name = facts_.name;
    Send(c, EncodeWelcome(w, handshake_key_));
    return OkStatus();
  }
  if (!c->client && e.type == MessageType::kConfirm && c->peer_port != 0) {
    LOOM_ASSIGN_OR_RETURN(Confirm m, DecodeConfirm(e));
    if (m.echo != c->my_nonce) return PermissionDeniedError("cluster: confirm of another nonce");
    c->session = DeriveSessionKey(opt_.secret, c->peer_nonce, c->my_nonce);
    BecomeUp(c);
    return OkStatus();
  }
  if (c->client && e.type == MessageType::kWelcome) {
    LOOM_ASSIGN_OR_RETURN(Welcome w, DecodeWelcome(e));
    if (w.echo != c->my_nonce) return PermissionDeniedError("cluster: welcome to another nonce");
    if (w.id == id_) {
      Close(c, "dialled this daemon itself");
      return OkStatus();
    }
    c->peer_id = w.id;
    c->peer_nonce = w.nonce;
    c->peer_port = w.port;
    c->peer_name = w.name;
    Send(c, EncodeConfirm(Confirm{w.nonce}, handshake_key_));
    c->session = DeriveSessionKey(opt_.secret, c->my_nonce, c->peer_nonce);
    BecomeUp(c);
    return OkStatus();
  }
  return DataLossError("cluster: unexpected ", MessageTypeName(e.type), " during the handshake");
}

void Daemon::Impl::BecomeUp(const ConnPtr& c) {
  if (c->expected) dialling_.erase(*c->expected);
  if (auto it = up_.find(c->peer_id); it != up_.end()) {
    // Two connections to one member: keep the one the smaller id dialled (both sides agree).
    const ConnPtr old = it->second;
    const MemberId old_client = old->client ? id_ : old->peer_id;
    const MemberId new_client = c->client ? id_ : c->peer_id;
    const bool keep_new = old_client == new_client || new_client == std::min(id_, c->peer_id);
    if (!keep_new) {
      c->state = Conn::State::kUp;  // so that Close does not log a failed handshake
      Close(c, "duplicate connection");
      return;
    }
    up_.erase(it);
    old->state = Conn::State::kHandshake;  // leave quietly: the member stays
    Close(old, "replaced by a newer connection");
  }
  c->state = Conn::State::kUp;
  c->up_since = Clock::now();
  if (!c->static_peer.empty()) refused_by_.erase(c->static_peer);
  up_[c->peer_id] = c;
  std::erase_if(departed_, [&](const Departed& d) { return d.id == c->peer_id; });
  Log(StrCat("member ", c->label(), " joined (", up_.size() + 1, " members)"));
  SendSession(c, MessageType::kFacts);
  SendSession(c, MessageType::kHeartbeat);
  if (!links_.empty()) SendSession(c, MessageType::kLinks);
}

Status Daemon::Impl::OnSessionFrame(const ConnPtr& c, const Envelope& e) {
  LOOM_RETURN_IF_ERROR(Authenticate(e, c->session));
  if (e.seq != c->recv_seq) {
    return DataLossError("cluster: frame ", e.seq, " from ", c->label(), ", expected ",
                         c->recv_seq, " (replayed or lost)");
  }
  ++c->recv_seq;
  switch (e.type) {
    case MessageType::kFacts: {
      LOOM_ASSIGN_OR_RETURN(Facts f, DecodeFacts(e));
      const bool first = !c->facts.has_value();
      c->facts = std::move(f);
      if (first) QueueProbes(c);
      return OkStatus();
    }
    case MessageType::kHeartbeat: {
      LOOM_ASSIGN_OR_RETURN(cluster::Heartbeat h, DecodeHeartbeat(e));
      c->measuring = h.measuring;
      for (const KnownMember& k : h.members) {
        if (k.id == id_ || up_.count(k.id) || dialling_.count(k.id) || !(id_ < k.id)) continue;
        Dial(k.address, k.port, "", k.id);  // gossip: a member we have not met yet
      }
      return OkStatus();
    }
    case MessageType::kLinks: {
      LOOM_ASSIGN_OR_RETURN(Links l, DecodeLinks(e));
      std::erase_if(links_, [&](const auto& kv) { return std::get<0>(kv.first) == c->peer_id; });
      for (LinkMeasure& m : l.links) {
        if (m.a != c->peer_id) continue;  // a member reports only its own measurements
        links_[{m.a, m.a_host, m.b_host}] = std::move(m);
      }
      return OkStatus();
    }
    case MessageType::kProbeStart: {
      LOOM_ASSIGN_OR_RETURN(ProbeStart m, DecodeProbeStart(e));
      OnProbeStart(c, m);
      return OkStatus();
    }
    case MessageType::kProbeReady: {
      LOOM_ASSIGN_OR_RETURN(ProbeReady m, DecodeProbeReady(e));
      OnProbeReady(c, m);
      return OkStatus();
    }
    case MessageType::kProbeBusy: {
      LOOM_ASSIGN_OR_RETURN(uint64_t probe, DecodeProbeBusy(e));
      OnProbeBusy(c, probe);
      return OkStatus();
    }
    case MessageType::kRankReserve: {
      LOOM_ASSIGN_OR_RETURN(RankReserve m, DecodeRankReserve(e));
      OnRankReserve(c, m);
      return OkStatus();
    }
    case MessageType::kRankReserved: {
      LOOM_ASSIGN_OR_RETURN(RankReserved m, DecodeRankReserved(e));
      OnRankReserved(c, m);
      return OkStatus();
    }
    case MessageType::kRankStart: {
      LOOM_ASSIGN_OR_RETURN(RankStart m, DecodeRankStart(e));
      OnRankStart(c, m);
      return OkStatus();
    }
    case MessageType::kRankExit: {
      LOOM_ASSIGN_OR_RETURN(RankExit m, DecodeRankExit(e));
      OnRankExit(c, m);
      return OkStatus();
    }
    case MessageType::kRankStop: {
      LOOM_ASSIGN_OR_RETURN(uint64_t launch, DecodeRankStop(e));
      const MemberId from = c->peer_id;
      StopRanks([&](const LocalRank& r) { return r.launch == launch && r.requester == from; },
                "stopped by the member that started it");
      return OkStatus();
    }
    default:
      return DataLossError("cluster: unexpected ", MessageTypeName(e.type), " from ", c->label());
  }
}

cluster::Heartbeat Daemon::Impl::MakeHeartbeat() const {
  cluster::Heartbeat h;
  for (const auto& [id, c] : up_) h.members.push_back({id, c->remote_host, c->peer_port});
  h.measuring = Measuring();
  return h;
}

Links Daemon::Impl::MyLinks() const {
  Links l;
  for (const auto& [key, m] : links_) {
    if (m.a == id_) l.links.push_back(m);
  }
  return l;
}

void Daemon::Impl::SendSession(const ConnPtr& c, MessageType type) {
  const uint64_t seq = c->send_seq++;
  switch (type) {
    case MessageType::kFacts: Send(c, EncodeFacts(facts_, c->session, seq)); break;
    case MessageType::kHeartbeat:
      told_measuring_ = Measuring();
      Send(c, EncodeHeartbeat(MakeHeartbeat(), c->session, seq));
      break;
    case MessageType::kLinks: Send(c, EncodeLinks(MyLinks(), c->session, seq)); break;
    default: break;
  }
}

void Daemon::Impl::Send(const ConnPtr& c, std::vector<uint8_t> bytes) {
  if (c->state == Conn::State::kClosed) return;
  c->wq.push_back(std::move(bytes));
  Flush(c);
}

void Daemon::Impl::Flush(const ConnPtr& c) {
  if (c->writing || c->wq.empty() || c->state == Conn::State::kClosed) return;
  c->writing = true;
  asio::async_write(c->socket, asio::buffer(c->wq.front()),
                    [this, c](const boost::system::error_code& ec, size_t) {
    c->writing = false;
    if (c->state == Conn::State::kClosed) return;
    if (ec) {
      Close(c, ec.message());
      return;
    }
    c->wq.pop_front();
    if (c->wq.empty() && c->close_after_write) {
      Close(c, "refused");
      return;
    }
    Flush(c);
  });
}

void Daemon::Impl::Refuse(const ConnPtr& c, RejectReason reason, const std::string& why) {
  ++refused_;
  Log(StrCat("refused a connection from ", c->label(), ": ", why));
  c->close_after_write = true;
  Send(c, EncodeReject(Reject{reason, why}));
}

void Daemon::Impl::Close(const ConnPtr& c, const std::string& why) {
  if (c->state == Conn::State::kClosed) return;
  const bool was_up = c->state == Conn::State::kUp;
  c->state = Conn::State::kClosed;
  boost::system::error_code ec;
  c->socket.close(ec);
  conns_.erase(c);
  if (c->expected) dialling_.erase(*c->expected);
  if (!was_up) return;
  auto it = up_.find(c->peer_id);
  if (it == up_.end() || it->second != c) return;
  up_.erase(it);
  departed_.push_front({c->peer_id, c->peer_name, Clock::now(), why});
  if (departed_.size() > 16) departed_.pop_back();
  probed_.erase(c->peer_id);
  striped_.erase(c->peer_id);
  std::erase_if(probes_, [&](const PendingProbe& p) { return p.peer == c->peer_id; });
  std::erase_if(links_, [&](const auto& kv) {
    return kv.second.a == c->peer_id || kv.second.b == c->peer_id;
  });
  Log(StrCat("member ", c->peer_name, " (", ShortId(c->peer_id), ") left: ", why, " (",
             up_.size() + 1, " members)"));
  // Its ranks here have no one to report to; launches waiting for it cannot start.
  const MemberId gone = c->peer_id;
  StopRanks([&](const LocalRank& r) { return r.requester == gone; }, "its member left");
  std::vector<uint64_t> waiting;
  for (const auto& [id, l] : launches_) {
    if (!l.started && std::find(l.members.begin(), l.members.end(), gone) != l.members.end()) {
      waiting.push_back(id);
    }
  }
  for (uint64_t id : waiting) FailLaunch(id, StrCat("member ", c->peer_name, " left"));
}

void Daemon::Impl::Tick() {
  if (stopped_) return;
  const auto now = Clock::now();
  const std::set<ConnPtr> all = conns_;
  for (const ConnPtr& c : all) {
    const double silent = std::chrono::duration<double>(now - c->last_heard).count();
    if (silent > opt_.member_timeout_s) {
      Close(c, StrCat("silent for ", static_cast<int64_t>(silent * 1000), " ms"));
    } else if (c->state == Conn::State::kUp) {
      SendSession(c, MessageType::kHeartbeat);
    }
  }
  DialStaticPeers();
  ReapRanks();
  heartbeat_timer_.expires_after(Ms(opt_.heartbeat_s));
  heartbeat_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Tick();
  });
}

// ---- the public face ----

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() = default;

StatusOr<std::unique_ptr<Daemon>> Daemon::Create(asio::io_context& io, DaemonOptions options,
                                                 Facts facts) {
  auto impl = std::make_unique<Impl>(io, std::move(options), std::move(facts));
  LOOM_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

int Daemon::port() const { return impl_->port_; }
std::string Daemon::id() const { return MemberIdHex(impl_->id_); }
nlohmann::json Daemon::View() const { return impl_->View(); }
void Daemon::Stop() { impl_->Stop(); }

}  // namespace loom::cluster
