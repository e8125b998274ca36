// Internal to hub_sim (see the header of hub_sim.cc for what it measures): the options, the
// simulated nodes and the simulator, split across hub_sim.cc (main, flags, the hub, the phases and
// the summary), hub_sim_fleet.cc (the fleet: keys and enrolment, the node WebSockets, handshake,
// heartbeats and assign frames) and hub_sim_proc.cc (child processes, /proc and sock_diag).
// Everything runs on one thread (one io_context).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "loom/base/clock.h"
#include "loom/net/url.h"
#include "loom/net/websocket.h"
#include "loom/network/protocol/frames.h"
#include "loom/network/protocol/identity.h"

#include "hub_sim_proc.h"

namespace hub_sim {

namespace asio = boost::asio;
namespace protocol = loom::network::protocol;
namespace net = loom::net;
using json = nlohmann::json;
using loom::base::NowSeconds;

inline constexpr const char* kApiKey = "loom-hub-sim-consumer-key-0123456789abcdef";

// ---- The fleet ----

struct CatalogueModel {
  std::string name;
  int64_t weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;
};

struct SimNode {
  enum class State { kIdle, kDialing, kHello, kRegister, kReady, kClosed };
  std::string id;
  std::optional<protocol::NodeKey> key;
  std::vector<int> models;  // catalogue indices
  int64_t mem_total = 0;
  int64_t mem_free = 0;  // heartbeats report mem_free - round
  double bandwidth_gbps = 0;
  int cores = 1;
  double bench_prefill_ms = 0, bench_decode_ms = 0;  // how this node answers the hub's benchmark
  std::shared_ptr<net::WebSocket> ws;
  State state = State::kIdle;
  double dial_at = 0, ready_at = 0;
  int64_t round = 0;
  double last_heartbeat = 0;
  std::string hb_prefix, hb_suffix;  // a heartbeat with mem_free_bytes cut out
  std::string chip;                  // for the world page
  protocol::Location location;
  // How it computes (the simulator's model, below): 0 ms per token answers at once.
  double decode_ms_per_token = 0, prefill_ms = 0;
  // --phase economy (hub_sim_economy.cc).
  int machine_class = 0;                   // index into the economy's machine classes
  std::optional<protocol::SlotOffer> slot;  // a reserved slot offered in register
  enum class Cheat { kHonest, kRandom, kSmallerModel } cheat = Cheat::kHonest;
  double die_at = 0, died_at = 0;           // when it drops its connection for good (0: never)
  int64_t first_work_ms = 0;                // Unix ms of its first consumer-looking assign
  int64_t work_attempts = 0;                // consumer-looking assigns (requests and canaries)
  int64_t scorings = 0;                     // scoring assigns it answered (it was the verifier)
};

// ---- The simulator's "model" ----
// A deterministic language model: the honest next token after a prefix (prompt and generated
// tokens) is a hash of the model's key and the prefix; under it that token has log-probability
// -0.1 and every other token -20.  Text tokenizes to one token per byte.  An honest node generates
// and scores with its model's key; a cheater generates random tokens or those of "a smaller model"
// (another key), and when asked to verify it scores every token -0.1 (it runs nothing).
inline uint64_t ModelKey(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}
inline uint64_t ExtendPrefix(uint64_t h, int32_t token) {
  h ^= static_cast<uint32_t>(token) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}
inline int32_t HonestNext(uint64_t model_key, uint64_t prefix) {
  uint64_t x = (prefix ^ model_key) * 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return 3 + static_cast<int32_t>(x % 31997);
}
inline constexpr double kHonestLogprob = -0.1, kOtherLogprob = -20;


struct Options {
  int nodes = 10000;
  int requests = 2000;
  double seconds = 10;
  std::string loom;
  int clients = 8;
  int dials = 200;
  uint64_t seed = 1;
  std::string perf;
  bool keep = false;
  bool json = false;
  int world_runs = 7;       // timed GET /world.json, each on a fresh snapshot
  double world_hold = 0;    // then keep the fleet up this long (for a browser on /world)
  // --phase economy (hub_sim_economy.cc): "" runs the phases above.
  std::string phase;
  double reserve_share = 0.3, cheat_share = 0.1, die_share = 0.05;
  // --established: every node (cheaters too) starts with a record of passed checks, written
  // into the store before the hub starts, as in a network that has run for a while.
  bool established = false;
};

// The simulator.  The fleet's members (MakeCatalogue, MakeFleet, Enrol, DialMore, OnDialed,
// OnFrame, OnAssign, SendHeartbeat, Keepalive) are in hub_sim_fleet.cc, the rest in hub_sim.cc.
class Sim {
 public:
  explicit Sim(Options o) : o_(std::move(o)), rng_(o_.seed), keepalive_(io_) {}

  int Run();

 private:
  // Setup.
  void MakeCatalogue();
  void MakeFleet();
  void Enrol(const std::string& db);
  void StartHub(const std::string& db);
  // The event loop, until `done()` or `timeout_s` (false on timeout).
  bool RunUntil(const std::function<bool()>& done, double timeout_s);
  // Phases.
  void Register();
  void DialMore();
  void OnDialed(size_t i, loom::StatusOr<std::shared_ptr<net::WebSocket>> ws);
  void OnFrame(size_t i, std::string_view text);
  void OnAssign(SimNode& n, const protocol::Assign& a);
  void OnScore(SimNode& n, const protocol::Assign& a);
  void PrepareHeartbeat(SimNode& n);
  // --phase economy (hub_sim_economy.cc).
  int Economy(const std::string& db);
  void NameAndKey(SimNode& n, int i);  // "sim-%06d" and a fresh Ed25519 key
  void MakeEconomyFleet();
  void SeedReputations(const std::string& db);
  void EconomyRequest();
  void EconomyTick();
  void EconomyDrain();
  void EconomyReport(const std::string& db);
  void PrintEconomy(const json& table);
  void SendHeartbeat(SimNode& n);
  void Keepalive();
  void IngestRound();
  void Ingest();
  void Placement();
  void StartRequest();
  void World();
  // A blocking GET on the loop (other work keeps running meanwhile); `fetch_ms`: the time until
  // the whole body was read, `bytes` its size.
  std::optional<json> GetJson(const std::string& path, double timeout_s = 120,
                              double* fetch_ms = nullptr, int64_t* bytes = nullptr);
  void Send(SimNode& n, const protocol::Frame& f) { n.ws->Send(protocol::SerializeFrame(f)); }
  void Report();
  // With --perf PREFIX: `perf record -g` of the hub into PREFIX-<phase>.data.
  void StartPerf(const std::string& phase) {
    if (o_.perf.empty()) return;
    g_perf_pid = Spawn({"/usr/bin/perf", "record", "-F", "999", "-g", "-p",
                        std::to_string(g_hub_pid), "-o", o_.perf + "-" + phase + ".data"},
                       -1, -1, tmp_ + "/perf-" + phase + ".log");
    ::usleep(300000);
  }
  void StopPerf() {
    if (g_perf_pid > 0) StopChild(&g_perf_pid, SIGINT, 30);
  }

  Options o_;
  asio::io_context io_;
  std::mt19937_64 rng_;
  asio::steady_timer keepalive_;
  std::vector<CatalogueModel> catalogue_;
  std::vector<SimNode> nodes_;
  std::string tmp_;
  int port_ = 0;
  net::Url ws_url_;
  net::Url completions_url_;
  std::string base_url_;
  std::vector<std::string> hub_args_;  // more flags for `loom hub`

  // Registration.
  size_t next_dial_ = 0;
  int dials_outstanding_ = 0;
  int ready_ = 0, failed_ = 0, disconnected_ = 0;
  std::string first_failure_;
  double heartbeat_s_ = 5;
  int64_t bench_assigns_ = 0, bench_done_ = 0, assigns_ = 0, errors_ = 0, cancels_ = 0;
  std::string first_error_;
  bool keepalive_on_ = true;

  // Ingest.
  SockDiag diag_;
  bool ingest_sending_ = false;
  double ingest_end_ = 0;
  int64_t round_bytes_ = 0;
  int64_t hb_frames_ = 0, hb_bytes_ = 0, hb_rounds_ = 0, hb_skipped_ = 0, pace_waits_ = 0;
  int64_t max_backlog_ = 0;
  std::optional<asio::steady_timer> pace_timer_;

  // Placement.
  int sent_ = 0, finished_ = 0, ok_ = 0;
  std::map<int, int> statuses_;
  std::string first_bad_response_;
  std::vector<double> latency_ms_;

  // Economy.
  double econ_end_ = 0, econ_start_ = 0;
  int econ_sent_ = 0;
  int64_t scoring_assigns_ = 0, probe_assigns_ = 0;
  std::vector<double> econ_latency_ms_;
  std::map<int, int> econ_statuses_;
  std::optional<json> econ_status_;
  double last_scoring_at_ = 0;

  // Results.
  json r_ = json::object();
};

}  // namespace hub_sim
