// The cluster daemon's link measurements.  Of each pair of members the one with the smaller id
// measures; it asks the other (ProbeStart), which either answers Busy (it is measuring another
// link: every member takes part in one probe at a time, so probes never share a machine's links
// or cores) or listens as rank 0 of a two-rank tcp group and says where (ProbeReady).  Both then
// run the ping-pong of link_probe.h on a worker thread; the measuring member keeps the result and
// sends its row of the link matrix to every member (Links).
#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "loom/cluster/daemon_impl.h"
#include "loom/cluster/machine.h"
#include "loom/comm/tcp/socket.h"

namespace loom::cluster {
namespace {

constexpr int kMaxProbeAttempts = 20;
constexpr auto kProbeAnswerTimeout = std::chrono::seconds(5);

bool IsLoopback(const std::string& host) { return host.rfind("127.", 0) == 0 || host == "::1"; }

// Where to listen for a probe on `host`: an address on several links ("a+b") listens on all.
std::string ListenHost(const std::string& host) {
  return host.find('+') != std::string::npos ? "0.0.0.0" : host;
}

std::string InterfaceOf(const Facts& f, const std::string& address) {
  for (const Interface& i : f.interfaces) {
    if (i.address == address) return i.name;
  }
  return "?";
}

}  // namespace

// Every interface pair in one subnet is a link to measure (two cables between two machines are
// two links); a pair reached only through a router is measured over the control connection's
// addresses.
void Daemon::Impl::QueueProbes(const ConnPtr& c) {
  if (!opt_.probe_links || !(id_ < c->peer_id) || probed_.count(c->peer_id)) return;
  probed_.insert(c->peer_id);
  std::vector<PendingProbe> found;
  if (!IsLoopback(c->remote_host)) {
    for (const Interface& mine : facts_.interfaces) {
      if (IsLoopback(mine.address)) continue;
      for (const Interface& theirs : c->facts->interfaces) {
        if (IsLoopback(theirs.address) || mine.address == theirs.address) continue;
        const int prefix = std::min(mine.prefix, theirs.prefix);
        if (!SameSubnet(mine.address, theirs.address, prefix)) continue;
        found.push_back({c->peer_id, mine.address, theirs.address, mine.name, {}, 0});
      }
    }
  }
  if (found.empty()) {
    found.push_back({c->peer_id, c->local_host, c->remote_host,
                     IsLoopback(c->local_host) ? "lo" : InterfaceOf(facts_, c->local_host), {},
                     0});
  }
  for (PendingProbe& p : found) probes_.push_back(std::move(p));
  NextProbe();
}

// Two or more links of one kind to a member (similar bandwidth: two cables between two machines):
// once each is measured, measure them together, the tcp backend striping large messages over
// them ("a+b" addresses, lower latency first).  The link matrix then holds the combined link,
// and ranks use it when it is the fastest.
void Daemon::Impl::QueueStripedProbe(const MemberId& peer) {
  if (striped_.count(peer)) return;
  for (const PendingProbe& p : probes_) {
    if (p.peer == peer) return;  // not every link measured yet
  }
  std::vector<const LinkMeasure*> single;
  double best = 0;
  for (const auto& [key, m] : links_) {
    if (m.a != id_ || m.b != peer || m.interface.find('+') != std::string::npos) continue;
    single.push_back(&m);
    best = std::max(best, m.bytes_per_s);
  }
  std::erase_if(single, [&](const LinkMeasure* m) { return m->bytes_per_s < 0.75 * best; });
  if (single.size() < 2) return;
  std::sort(single.begin(), single.end(), [](const LinkMeasure* x, const LinkMeasure* y) {
    return x->latency_s < y->latency_s;
  });
  PendingProbe p;
  p.peer = peer;
  for (const LinkMeasure* m : single) {
    const bool first = p.my_host.empty();
    p.my_host += (first ? "" : "+") + m->a_host;
    p.peer_host += (first ? "" : "+") + m->b_host;
    p.interface += (first ? "" : "+") + m->interface;
  }
  striped_.insert(peer);
  probes_.push_back(std::move(p));
}

void Daemon::Impl::TellMeasuring() {
  if (Measuring() == told_measuring_) return;
  for (const auto& [id, c] : up_) SendSession(c, MessageType::kHeartbeat);
}

void Daemon::Impl::NextProbe() {
  if (stopped_) return;
  struct Tell {
    Daemon::Impl* d;
    ~Tell() { d->TellMeasuring(); }
  } tell{this};
  const auto now = Clock::now();
  if (probing_) {
    // Waiting for the other side to answer ProbeStart: give up after a while and try later.
    if (current_ && !worker_running_ && now > probe_deadline_) {
      Log(StrCat("no answer to the link probe of ", current_->peer_host, "; trying again later"));
      PendingProbe p = *current_;
      current_.reset();
      current_listener_ = base::Fd();
      probing_ = false;
      p.not_before = now + std::chrono::seconds(1);
      if (++p.attempts < kMaxProbeAttempts) probes_.push_back(std::move(p));
    } else {
      return;
    }
  }
  Clock::time_point wake = Clock::time_point::max();
  for (auto it = probes_.begin(); it != probes_.end(); ++it) {
    auto up = up_.find(it->peer);
    if (up == up_.end()) continue;
    if (it->not_before > now) {
      wake = std::min(wake, it->not_before);
      continue;
    }
    auto listener = comm::tcp::Listen(ListenHost(it->my_host), 0, &current_port_);
    if (!listener.ok()) {
      Log(StrCat("cannot measure the link from ", it->my_host, ": ", listener.status().message()));
      probes_.erase(it);
      break;
    }
    current_listener_ = std::move(*listener);
    current_ = std::move(*it);
    probes_.erase(it);
    probing_ = true;
    current_probe_ = rng_();
    probe_deadline_ = now + kProbeAnswerTimeout;
    wake = probe_deadline_ + std::chrono::milliseconds(10);
    ProbeStart m{current_probe_, current_->my_host, static_cast<uint16_t>(current_port_),
                 current_->peer_host};
    const ConnPtr& c = up->second;
    Send(c, EncodeProbeStart(m, c->session, c->send_seq++));
    break;
  }
  if (wake == Clock::time_point::max()) return;
  probe_timer_.expires_at(wake);
  probe_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) NextProbe();
  });
}

void Daemon::Impl::OnProbeStart(const ConnPtr& c, const ProbeStart& m) {
  if (probing_) {
    Send(c, EncodeProbeBusy(m.probe, c->session, c->send_seq++));
    return;
  }
  int port = 0;
  auto listener = comm::tcp::Listen(ListenHost(m.peer_host), 0, &port);
  if (!listener.ok()) {
    Log(StrCat("cannot measure the link from ", c->label(), " at ", m.peer_host, ": ",
               listener.status().message()));
    Send(c, EncodeProbeBusy(m.probe, c->session, c->send_seq++));
    return;
  }
  probing_ = true;
  Send(c, EncodeProbeReady(ProbeReady{m.probe, m.peer_host, static_cast<uint16_t>(port)},
                           c->session, c->send_seq++));
  LinkProbeSpec spec;
  spec.rank = 0;
  spec.rank0_host = m.peer_host;
  spec.rank0_port = port;
  spec.rank1_host = m.host;
  spec.rank1_port = m.port;
  spec.probe = m.probe;
  spec.secret = opt_.secret;
  spec.options = opt_.probe_options;
  spec.seconds_per_size = opt_.probe_seconds_per_size;
  RunWorker(std::move(spec), std::move(*listener), /*initiator=*/false);
}

void Daemon::Impl::OnProbeReady(const ConnPtr& c, const ProbeReady& m) {
  if (!current_ || worker_running_ || m.probe != current_probe_ || c->peer_id != current_->peer) {
    Log(StrCat("ignored a stale probe answer from ", c->label()));
    return;
  }
  LinkProbeSpec spec;
  spec.rank = 1;
  spec.rank0_host = m.host;
  spec.rank0_port = m.port;
  spec.rank1_host = current_->my_host;
  spec.rank1_port = current_port_;
  spec.probe = m.probe;
  spec.secret = opt_.secret;
  spec.options = opt_.probe_options;
  spec.seconds_per_size = opt_.probe_seconds_per_size;
  RunWorker(std::move(spec), std::move(current_listener_), /*initiator=*/true);
}

void Daemon::Impl::OnProbeBusy(const ConnPtr& c, uint64_t probe) {
  if (!current_ || worker_running_ || probe != current_probe_ || c->peer_id != current_->peer) {
    return;
  }
  PendingProbe p = *current_;
  current_.reset();
  current_listener_ = base::Fd();
  probing_ = false;
  // Try again after a random pause, so that two members do not keep colliding.
  p.not_before = Clock::now() + std::chrono::milliseconds(100 + rng_() % 400);
  if (++p.attempts < kMaxProbeAttempts) {
    probes_.push_back(std::move(p));
  } else {
    Log(StrCat("gave up measuring the link to ", c->label(), " (always busy)"));
  }
  NextProbe();
}

void Daemon::Impl::RunWorker(LinkProbeSpec spec, base::Fd listener, bool initiator) {
  if (worker_.joinable()) worker_.join();
  worker_running_ = true;
  auto work = asio::make_work_guard(io_);
  worker_ = std::thread([this, spec = std::move(spec), listener = std::move(listener), initiator,
                         work = std::move(work)]() mutable {
    StatusOr<LinkProbeResult> result = RunLinkProbe(spec, std::move(listener));
    asio::post(io_, [this, initiator, result = std::move(result)]() mutable {
      OnProbeDone(initiator, std::move(result));
    });
  });
}

void Daemon::Impl::OnProbeDone(bool initiator, StatusOr<LinkProbeResult> result) {
  if (worker_.joinable()) worker_.join();
  worker_running_ = false;
  probing_ = false;
  if (stopped_) return;
  if (initiator && current_) {
    PendingProbe p = *current_;
    current_.reset();
    auto up = up_.find(p.peer);
    if (!result.ok()) {
      Log(StrCat("measuring the link to ", p.peer_host, " failed: ", result.status().message()));
      p.not_before = Clock::now() + std::chrono::seconds(1);
      if (up != up_.end() && ++p.attempts < 3) probes_.push_back(std::move(p));
    } else if (up != up_.end()) {
      LinkMeasure m;
      m.a = id_;
      m.b = p.peer;
      m.a_host = p.my_host;
      m.b_host = p.peer_host;
      m.interface = p.interface;
      m.latency_s = result->latency_s;
      m.bytes_per_s = result->bytes_per_s;
      Log(StrCat("link to ", up->second->peer_name, " over ", p.interface, " (", p.my_host, " -> ",
                 p.peer_host, "): ", static_cast<int64_t>(m.latency_s * 1e6 + 0.5), " us, ",
                 static_cast<int64_t>(m.bytes_per_s / 1e6 + 0.5), " MB/s"));
      links_[{m.a, m.a_host, m.b_host}] = m;
      for (const auto& [id, c] : up_) SendSession(c, MessageType::kLinks);
      QueueStripedProbe(p.peer);
    }
  } else if (!result.ok()) {
    Log(StrCat("answering a link probe failed: ", result.status().message()));
  }
  NextProbe();
}

}  // namespace loom::cluster
