// Internals of the cluster daemon (daemon.cc: connections and membership; daemon_probe.cc: link
// measurements; daemon_view.cc: the status view and the control socket).
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "loom/cluster/daemon.h"
#include "loom/cluster/link_probe.h"
#include "loom/cluster/messages.h"

namespace loom::cluster {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using udp = asio::ip::udp;
using Clock = std::chrono::steady_clock;

// One control connection to another daemon, from the first byte of the handshake to its close.
struct Conn {
  explicit Conn(asio::io_context& io) : socket(io) {}
  enum class State { kHandshake, kUp, kClosed };
  tcp::socket socket;
  State state = State::kHandshake;
  bool client = false;        // we dialled it
  std::string static_peer;    // the --peer it was dialled for, if any
  std::optional<MemberId> expected;  // dialled after an announcement from this member
  Nonce my_nonce{}, peer_nonce{};
  MemberId peer_id{};
  std::string peer_name;
  uint16_t peer_port = 0;
  std::string remote_host, local_host;
  Key session{};
  uint64_t send_seq = 0, recv_seq = 0;
  std::vector<uint8_t> rbuf;
  std::deque<std::vector<uint8_t>> wq;
  bool writing = false;
  bool close_after_write = false;
  Clock::time_point last_heard = Clock::now(), up_since{};
  std::optional<Facts> facts;
  bool measuring = false;  // its last heartbeat said it has links left to measure
  std::string label() const;  // "name (id) at host" for logs
};
using ConnPtr = std::shared_ptr<Conn>;

struct Departed {
  MemberId id{};
  std::string name;
  Clock::time_point when;
  std::string why;
};

// A link this daemon is going to measure (it has the smaller id of the pair).
struct PendingProbe {
  MemberId peer{};
  std::string my_host, peer_host, interface;
  Clock::time_point not_before{};
  int attempts = 0;
};

using ControlSocket = std::shared_ptr<asio::local::stream_protocol::socket>;

// A launch this daemon coordinates for a local `loom cluster run` (which runs rank 0 itself).
struct Launch {
  uint64_t id = 0;
  ControlSocket client;            // the command waiting for the peers of rank 0
  std::vector<MemberId> members;   // per rank; [0] is this daemon
  std::vector<uint16_t> ports;     // per rank's listener; [0] the command's own
  std::vector<std::string> args;   // "run" or "serve" and its options
  std::string group_id;
  int reserved = 1;                // ranks with a port
  int exited = 0;
  bool started = false;
  Clock::time_point deadline{};
};

// A rank this daemon runs for another member's launch.
struct LocalRank {
  uint64_t launch = 0;
  uint16_t rank = 0;
  MemberId requester{};
  base::Fd listener;  // 0.0.0.0:port, handed to the rank
  int pid = -1;
  std::shared_ptr<asio::posix::stream_descriptor> output;  // the rank's stdout and stderr
  std::string partial, last_line;
};

class Daemon::Impl {
 public:
  Impl(asio::io_context& io, DaemonOptions options, Facts facts);
  ~Impl();
  Status Start();
  void Stop();
  nlohmann::json View() const;

  asio::io_context& io_;
  DaemonOptions opt_;
  Facts facts_;
  MemberId id_{};
  uint16_t port_ = 0;  // the bound control port
  Key announce_key_{}, handshake_key_{};
  std::mt19937_64 rng_;
  tcp::acceptor acceptor_;
  udp::socket udp_;
  udp::endpoint udp_from_;
  std::array<uint8_t, kHeaderBytes + kMaxBodyBytes + kMacBytes> udp_buf_{};
  asio::local::stream_protocol::acceptor control_;
  asio::steady_timer announce_timer_, heartbeat_timer_, probe_timer_;
  bool stopped_ = false;
  uint64_t announce_seq_ = 0;
  Clock::time_point started_ = Clock::now();

  std::set<ConnPtr> conns_;            // every open connection
  std::map<MemberId, ConnPtr> up_;     // authenticated members
  std::deque<Departed> departed_;      // the most recent that left
  std::set<MemberId> dialling_;        // dials after announcements, in progress
  std::map<std::string, Clock::time_point> static_next_;  // next dial of each --peer
  int64_t refused_ = 0;                // connections and announcements that failed authentication
  std::map<std::string, std::string> refused_by_;  // peer -> why it refused us

  // Links: every measurement known, keyed by the measuring member and the address pair.
  std::map<std::tuple<MemberId, std::string, std::string>, LinkMeasure> links_;
  std::deque<PendingProbe> probes_;
  std::set<MemberId> probed_;   // members whose links were queued
  std::set<MemberId> striped_;  // members whose links were queued to be measured together
  bool probing_ = false;         // measuring a link (either side)
  bool worker_running_ = false;
  Clock::time_point probe_deadline_{};
  std::optional<PendingProbe> current_;
  uint64_t current_probe_ = 0;
  base::Fd current_listener_;  // the initiator's rank-1 listener of the current probe
  int current_port_ = 0;
  std::thread worker_;

  void Log(const std::string& line) const {
    if (opt_.log) opt_.log(line);
  }

  // daemon.cc
  void StartAnnouncing();
  void Announce();
  void ReceiveAnnouncement();
  void OnAnnouncement(size_t bytes);
  void Accept();
  void Dial(const std::string& host, uint16_t port, const std::string& static_peer,
            std::optional<MemberId> expected);
  void DialStaticPeers();
  void Tick();  // heartbeats, timeouts, static peers
  void StartReading(const ConnPtr& c);
  void OnFrame(const ConnPtr& c);
  Status OnHandshakeFrame(const ConnPtr& c, const Envelope& e);
  Status OnSessionFrame(const ConnPtr& c, const Envelope& e);
  void BecomeUp(const ConnPtr& c);
  void Send(const ConnPtr& c, std::vector<uint8_t> bytes);
  void SendSession(const ConnPtr& c, MessageType type);  // facts, heartbeat, links
  void Flush(const ConnPtr& c);
  void Refuse(const ConnPtr& c, RejectReason reason, const std::string& why);
  void Close(const ConnPtr& c, const std::string& why);
  cluster::Heartbeat MakeHeartbeat() const;
  Links MyLinks() const;

  // daemon_probe.cc
  void QueueProbes(const ConnPtr& c);
  void NextProbe();
  void QueueStripedProbe(const MemberId& peer);
  bool Measuring() const { return (probing_ && current_.has_value()) || !probes_.empty(); }
  void TellMeasuring();  // a heartbeat to every member when Measuring() changed
  bool told_measuring_ = false;
  void OnProbeStart(const ConnPtr& c, const ProbeStart& m);
  void OnProbeReady(const ConnPtr& c, const ProbeReady& m);
  void OnProbeBusy(const ConnPtr& c, uint64_t probe);
  void OnProbeDone(bool initiator, StatusOr<LinkProbeResult> result);
  void RunWorker(LinkProbeSpec spec, base::Fd listener, bool initiator);

  std::map<uint64_t, Launch> launches_;
  std::map<std::pair<uint64_t, uint16_t>, LocalRank> ranks_;

  // daemon_ranks.cc
  void OnLaunchRequest(const ControlSocket& client, const nlohmann::json& request);
  void FailLaunch(uint64_t id, const std::string& why);
  void OnRankReserve(const ConnPtr& c, const RankReserve& m);
  void OnRankReserved(const ConnPtr& c, const RankReserved& m);
  void OnRankStart(const ConnPtr& c, const RankStart& m);
  void OnRankExit(const ConnPtr& c, const RankExit& m);
  void StopRanks(const std::function<bool(const LocalRank&)>& which, const std::string& why);
  void ReapRanks();
  void ReadRankOutput(std::pair<uint64_t, uint16_t> key);
  std::string AddressOf(const MemberId& from, const MemberId& to) const;
  std::string GroupSecret(uint64_t launch) const;

  // daemon_view.cc
  void AcceptControl();
  void Reply(const ControlSocket& client, const nlohmann::json& reply);
};

}  // namespace loom::cluster
