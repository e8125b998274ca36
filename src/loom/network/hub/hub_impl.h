// The hub's state and the functions over it, split across hub.cc (listening, routes, admin,
// timers), hub_nodes.cc (node connections: authentication, registry, heartbeats) and hub_jobs.cc
// (consumer requests, attempts, streaming, failover).  Everything runs on the io_context thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "loom/net/http_server.h"
#include "loom/net/websocket.h"
#include "loom/network/hub/hub.h"
#include "loom/network/hub/world.h"
#include "loom/network/placement/placement.h"
#include "loom/network/protocol/frames.h"
#include "loom/network/store/store.h"
#include "loom/network/verify/verify.h"

namespace loom::network::hub {

using json = nlohmann::json;

// Speeds the hub measured itself, by timing a benchmark job on that node (never self-reported).
struct Measured {
  double prefill_tps = 0;  // prompt tokens / time to the first token
  double decode_tps = 0;   // (tokens - 1) / first-to-last token time
};

// One WebSocket from a node agent, from the first frame on.
struct NodeConn {
  enum class Phase { kHello, kRegister, kReady };
  uint64_t conn_id = 0;
  std::shared_ptr<net::WebSocket> ws;
  std::string remote;
  Phase phase = Phase::kHello;
  double phase_deadline = 0;   // hello and register must arrive by then
  std::string node_id;         // claimed in hello; proven by register's signature
  std::string nonce;           // this connection's challenge
  std::string public_key;
  std::string name;
  protocol::NodeFacts facts;
  std::vector<protocol::ModelInfo> models;
  std::optional<protocol::PodInfo> pod;
  std::optional<protocol::SlotOffer> slot;  // the reserved slot it offers (hub_slots.cc)
  std::optional<protocol::Location> location;  // as declared; the world page rounds it
  int32_t max_concurrency = 1;
  protocol::Heartbeat last;     // the latest heartbeat
  double last_heartbeat = 0;
  double connected_at = 0;
  std::set<std::string> attempts;       // attempt ids running there now
  std::set<std::string> benchmarking;   // models whose benchmark is in flight
  int64_t fleet_index = -1;             // into Impl::fleet_ when ready
  // Residency (hub_models.cc): when the hub asked this node to load or unload a model (until a
  // heartbeat shows it done, or the request times out), and when each loaded model last ran an
  // attempt here or was first seen loaded.
  std::map<std::string, double> load_sent, unload_sent;
  std::map<std::string, double> model_used;
};

// One consumer request (or a hub benchmark), across its attempts.
struct Job {
  std::string id;               // also the response id ("chatcmpl-..." / "cmpl-...")
  int64_t account_id = 0;
  std::string model;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  json request;                 // the validated body, forwarded to the node
  std::optional<int64_t> max_tokens;
  int64_t prompt_estimate = 0;  // tokens, for placement (the hub does not tokenize)
  int64_t created_unix = 0;
  double created_at = 0;
  std::shared_ptr<net::Responder> consumer;  // null for benchmarks
  bool head_sent = false;       // streaming: the 200 head and the first chunk are out
  bool prompt_known = false;
  std::vector<int32_t> prompt_ids;  // the prompt as the first node tokenized it
  std::vector<int32_t> generated;   // every token the consumer has been sent, all attempts
  std::string text;                 // non-streaming: the whole text so far
  int attempts = 0;
  std::vector<std::string> excluded;  // nodes that failed this job
  // The running attempt.
  std::string attempt_id;
  std::string node_id;
  double assigned_at = 0;
  double first_token_at = 0;    // this attempt's first token (0: none yet)
  double last_chunk_at = 0;
  double first_token_deadline = 0;
  int64_t next_index = 0;
  int64_t attempt_tokens = 0;
  // Waiting for a target.
  bool queued = false;
  double queued_at = 0;
  std::string queue_reason;
  // Credits: what admission reserved (0: a free model), and each ended attempt's work.
  int64_t reserved = 0;
  std::vector<ledger::Work> work;
  // The store's writes, two commits a request (settlement's throughput is its commits): the job
  // and its reservation wait for the first placement, to be written with the first attempt (or
  // alone when the request queues or fails first); an attempt's end waits to be written with the
  // job's end (or alone when another attempt follows).
  std::optional<store::JobRecord> unwritten;
  std::optional<store::LedgerTx> unwritten_reserve;
  std::optional<store::Store::AttemptEnd> attempt_end;
  // Benchmarks, availability probes and canaries (consumer == null): the hub's own jobs, not
  // written to the store.
  bool benchmark = false;
  bool probe = false;
  int64_t bench_prompt_tokens = 0;
  bool canary = false;
  std::string canary_key;  // hub_verify.cc: which canary and which weights
  bool recorded() const { return !benchmark && !probe && !canary; }
};

// What the hub tells a node's operator (hub_standing.cc), kept per node id across reconnects.
struct NodeStanding {
  std::deque<protocol::Earning> recent;        // newest first, at most protocol::kMaxEarnings
  std::map<std::string, int64_t> passed_over;  // why placement chose another node, and how often
  int64_t placed = 0;                          // attempts placed there since the last report
  double due = 0;                              // when the next report goes out
};

// What the hub can tell a node's operator now (hub_standing.cc, ViewOf): the standing frame and
// the account page (hub_account.cc) are both made from it.
struct OperatorView {
  int64_t pending_micro = 0, available_micro = 0;  // its pending and available books
  struct Slot {
    int64_t slot_id = 0;
    std::string model;
    std::string state;  // store::SlotStateName
    int32_t begin_minute = 0, end_minute = 1440;
    double availability = 1;  // answered / sent over 30 days
    int64_t probes = 0;       // ...sent
    std::string lost_reason;
  };
  std::optional<Slot> slot;  // its reserved slot, if it offered one
  // Why it got no work since its last standing report (none when it got some), at most
  // protocol::kMaxReasons.
  std::vector<std::string> idle_reasons;
};

inline constexpr int64_t kDayMs = 86'400'000;  // a UTC day, as slot probes are counted

// A reserved slot as the hub tracks it (hub_slots.cc).
struct SlotLive {
  store::SlotRecord record;
  std::map<int64_t, store::SlotDay> days;  // UTC day -> probes, the last 30 days
  double next_probe_at = 0;
  bool probing = false;
  int64_t period = 0;  // the current period of slot_period_s, and its probes so far
  int64_t period_probes = 0, period_answered = 0;
  int64_t credited = 0;  // availability credit paid since the hub started (micro-credits)
  std::string last_probe;
  json last_period;
  // Answered / sent over the 30 days up to `today` (1 when none were sent).
  double Availability(int64_t today, int64_t* probes) const;
};

// hub_verify.cc: one re-execution of an attempt's output on another node (a scoring request).
struct Check {
  std::string id;          // the check's own id (the hub's)
  std::string scoring_id;  // the running scoring attempt's id on the verifier
  std::string attempt_id;  // the attempt checked ("" for a canary's)
  std::string node_id;     // whose work it is
  std::string model;
  int64_t account_id = 0;  // who paid: a failed check gives the operator's share back there
  bool priced = false;
  std::string canary_key;       // a canary's output: on a pass it becomes the expected one
  std::vector<int32_t> prompt;  // as the attempt saw it (the prompt and earlier attempts' tokens)
  // A completion's text prompt as the consumer sent it (a first attempt's, a canary's): sent to
  // the verifier instead of `prompt`, whose own tokenization must then equal `prompt`.
  json prompt_text;
  std::vector<int32_t> verifier_prompt;  // the verifier's tokenization (accepted)
  std::vector<int32_t> tokens;           // what the attempt returned
  bool greedy = false;
  double temperature = 1;
  std::vector<std::string> tried;  // verifiers asked so far
  bool disputed = false;           // an unestablished verifier failed it: a second one must agree
  // The running scoring attempt (verifier empty: waiting for one).
  std::string verifier;
  double deadline = 0;   // no verifier by then, or no answer: the next verifier, or dropped
  double next_look = 0;  // waiting for a verifier: when to look again
  int64_t next_index = 0;
  std::vector<int32_t> scored;
  std::vector<double> logprobs, best;
  verify::Verdict verdict;  // the last comparison, for the log
};

// The public world page's state (hub_world.cc): what the hub remembers of each machine for it,
// the history read from the store, the cached snapshot and the event-stream clients.
struct WorldCache {
  struct Seen {  // from a node's latest register, kept after it disconnects (this run only)
    std::string chip;
    int64_t memory_gb = -1;  // world::MemoryTierGb of what it lends
    std::optional<protocol::Location> location;  // rounded (world::RoundLocation)
    std::optional<protocol::PodInfo> pod;
  };
  std::unordered_map<std::string, Seen> seen;          // node id -> ...
  std::unordered_map<std::string, std::string> names;  // node id -> pseudonym
  std::unordered_map<std::string, std::string> taken;  // pseudonym -> node id
  // From the store, refreshed every minute (every 5 s while nodes come and go).
  double history_at = -1e9;
  bool history_dirty = true;
  std::vector<std::pair<std::string, int64_t>> enrolled;  // node id, enrolled_ms (by node id)
  std::unordered_map<std::string, int64_t> enrolled_ms;   // the same, by node id
  std::unordered_map<std::string, store::Store::NodeActivity> activity;
  std::unordered_map<std::string, int64_t> requests_last_hour;  // model -> count
  int64_t tokens_per_day = 0;
  double last_extend = 0;  // when open node sessions were last moved forward
  // The snapshot, rebuilt at most once a second.
  double built_at = -1e9;
  double build_ms = 0;    // how long the last rebuild took (the history's refresh apart)
  double build_cpu_ms = 0;  // ...in CPU time of the hub's thread
  double history_ms = 0;  // ...and the last refresh of the history
  std::string json;     // /world.json
  int64_t generated_ms = 0;  // its "generated_ms"
  std::string totals;   // its "totals" object
  struct Row {
    size_t hash = 0;          // of its JSON text
    uint64_t generation = 0;  // the build that last wrote it
  };
  std::unordered_map<std::string, Row> rows;  // pseudonym -> its machine's row
  uint64_t generation = 0;
  std::vector<std::shared_ptr<net::Responder>> clients;  // /world/events
  double last_ping = 0;
};

class Hub::Impl {
 public:
  Impl(boost::asio::io_context& io, HubOptions options, std::unique_ptr<store::Store> store);
  ~Impl();
  Status Listen();
  void Stop();
  int port() const { return server_ ? server_->port() : 0; }

  // hub.cc
  void OnHttp(net::Request request, std::shared_ptr<net::Responder> responder);
  void Tick();
  std::optional<int64_t> Authenticate(const net::Request& request);
  bool IsAdmin(const net::Request& request) const;
  json StatusJson() const;
  json ModelsJson() const;

  // hub_nodes.cc
  void OnNodeSocket(std::shared_ptr<net::WebSocket> ws);
  void OnNodeMessage(uint64_t conn_id, std::string_view text);
  void OnNodeClosed(uint64_t conn_id, std::string_view reason);
  void HandleHello(NodeConn& c, const protocol::Hello& f);
  void HandleRegister(NodeConn& c, const protocol::Register& f);
  void RejectNode(NodeConn& c, std::string code, std::string message, int status);
  // The node's placement target: all of it (after register, capacity, a new measurement), or
  // only what heartbeats and attempts change.
  void UpdateFleet(NodeConn& c);
  void UpdateLoad(NodeConn& c);
  void RemoveFromFleet(NodeConn& c);
  void StartBenchmarks(NodeConn& c);
  void CheckNodes(double now);
  void Enroll(const net::Request& request, const std::shared_ptr<net::Responder>& responder);
  NodeConn* ReadyNode(const std::string& node_id);

  // hub_jobs.cc
  void OnCompletion(bool chat, const net::Request& request,
                    const std::shared_ptr<net::Responder>& responder, int64_t account_id);
  void TryPlace(Job& job);
  void StartAttempt(Job& job, NodeConn& node, const placement::Decision& decision);
  void OnAccepted(NodeConn& c, const protocol::Accepted& f);
  void OnChunk(NodeConn& c, const protocol::Chunk& f);
  void OnComplete(NodeConn& c, const protocol::Complete& f);
  void OnNodeError(NodeConn& c, const protocol::Error& f);
  // The running attempt failed for a reason that is not the consumer's: retry or resume elsewhere
  // while attempts remain, else end the job with `message`.
  void FailAttempt(Job& job, const std::string& message);
  void EndJob(Job& job, store::JobState state, const std::string& finish_reason,
              const std::string& error, int status, const std::string& code);
  void CancelJob(const std::string& job_id);
  // Writes the running attempt's end to the store (its first token's time included).
  void RecordAttemptEnd(Job& job, store::AttemptState state, const std::string& error);
  void WriteAttemptEnd(Job& job);  // job.attempt_end on its own, when the job goes on
  // Writes job.unwritten (with `first` when given); false when the store refused it, after
  // answering the consumer (402 or 500) and forgetting the job.
  bool WriteJob(Job& job, const store::AttemptRecord* first);
  void SendCancel(const Job& job);  // to the node running it, if it is still connected
  void CheckJobs(double now);
  void DrainQueues();
  Job* JobOfAttempt(const std::string& attempt_id);
  void IndexModels();
  // The largest context any ready target offers for `model` (0: none holds it).
  int64_t LargestContext(const std::string& model);
  void SendFrame(NodeConn& c, const protocol::Frame& f);

  // hub_verify.cc: sampled re-execution, canaries and reputations (docs/network.md,
  // "Verification").  The frames of a scoring attempt come to OnCheck* instead of a job.
  Status LoadVerification();
  void ConsiderChecks(const Job& job);  // at a consumer job's end, after its settlement
  void OnCanaryEnd(const Job& job);
  Check* CheckOfAttempt(const std::string& scoring_id);
  void OnCheckAccepted(NodeConn& c, Check& check, const protocol::Accepted& f);
  void OnCheckChunk(NodeConn& c, Check& check, const protocol::Chunk& f);
  void OnCheckComplete(NodeConn& c, Check& check);
  // The verifier found the node's output wrong: it counts when the verifier is established or a
  // second one agrees, else the next verifier is asked.
  void OnCheckFailed(Check& check, const std::string& why);
  // The running try of `check` ended without a verdict (an error, a timeout, scores that do
  // not cover the tokens): the next verifier, or dropped after check_tries.
  void NextTry(Check& check, const std::string& why);
  void SendCheck(Check& check);
  void StopTry(Check& check);  // forgets the running scoring attempt
  void EndCheck(const std::string& check_id, std::optional<bool> passed, const std::string& why);
  void CheckVerification(double now);  // deadlines, and a canary when one is due
  void StartCanary();
  store::NodeReputation& ReputationOf(const std::string& node_id);
  void SaveReputation(const store::NodeReputation& r);
  void MarkUntrusted(const std::string& node_id);
  bool Untrusted(const std::string& node_id) const { return untrusted_.count(node_id) > 0; }
  json VerificationJson() const;
  // hub_world.cc: the public world page.
  void OnWorld(const net::Request& request, const std::shared_ptr<net::Responder>& responder);
  void WorldTick(double now);
  void NoteNodeUp(const NodeConn& c);    // registered: its session opens, the page learns it
  void NoteNodeDown(const NodeConn& c);  // disconnected: its session closes
  void RefreshWorldHistory();
  void BuildWorld(double now);
  const std::string& WorldName(const std::string& node_id);

  // hub_models.cc: which models stay loaded where (load_model / unload_model).
  void ManageModels(double now);
  void NoteLoaded(NodeConn& c, const std::vector<std::string>& before, double now);
  // For a request placement could not place: unloads the least recently used idle models on the
  // one holder of `model` where that frees the most memory for the fewest bytes.  True when a copy
  // is loaded, loading or about to have room (the request should wait), false when nothing helps.
  bool MakeRoom(const Job& job, int64_t positions, double now);
  void SendResidency(NodeConn& c, const std::string& model, bool load, double now,
                     const std::string& why);

  // hub_standing.cc: each operator's earnings and why its node gets no work.
  void NoteDecision(const Job& job, const placement::Decision& d);
  void NoteSettlement(const Job& job, const store::LedgerTx& settle);
  void NoteEarning(const std::string& node_id, protocol::Earning e);
  void SendStandings(double now);
  protocol::Standing StandingOf(NodeConn& c, NodeStanding& s, double now);
  // `c`: the node's connection, null when it is not connected.
  OperatorView ViewOf(const std::string& node_id, const NodeConn* c, double now);

  // hub_account.cc: the operator account page (GET /account) and its JSON (GET /v1/account).
  void OnAccount(const net::Request& request, const std::shared_ptr<net::Responder>& responder);
  json AccountJson(const store::Account& account, int64_t earnings_limit, double now);

  // hub_slots.cc: reserved slots, their probes and availability credit.
  void LoadSlots();
  void OfferSlot(NodeConn& c);
  // Whether `model` on `node_id` is an active reserved slot inside its window at `unix_ms`.
  bool SlotReserves(const std::string& node_id, const std::string& model, int64_t unix_ms) const;
  int32_t OperatorShareFor(const std::string& node_id, const std::string& model) const;
  void ManageSlots(double now);
  void EndProbe(Job& job, bool answered, const std::string& why);  // erases the job
  void EndProbe(SlotLive& live, bool answered, const std::string& why);
  int64_t SlotPeriodCredit(const SlotLive& live) const;  // a whole period, all probes answered
  void PaySlotPeriod(SlotLive& live);
  json SlotsJson() const;

  boost::asio::io_context& io_;
  HubOptions options_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<net::HttpServer> server_;
  boost::asio::steady_timer tick_;
  std::shared_ptr<int> life_ = std::make_shared<int>(0);  // callbacks check it is still alive
  double started_at_ = 0;
  double last_node_check_ = 0;
  double last_release_ = 0;      // when pending credits were last released (ReleasePending)
  int64_t released_through_ = 0;  // ...and the settlement through which it looked
  std::mt19937_64 random_;
  placement::Tuning tuning_;

  uint64_t next_conn_ = 1;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<NodeConn>> conns_;
  std::unordered_map<std::string, uint64_t> ready_;          // node id -> conn id
  std::vector<placement::Target> fleet_;                     // ready nodes, for placement
  std::vector<uint64_t> fleet_conn_;                         // fleet_[i]'s conn id
  // model -> fleet_ indices of its holders (registry order) and their largest context; rebuilt
  // by IndexModels when UpdateFleet or RemoveFromFleet changed the fleet's models.
  std::unordered_map<std::string, std::vector<int32_t>> holders_;
  std::unordered_map<std::string, int64_t> contexts_;
  bool models_dirty_ = true;
  std::map<std::string, std::map<std::string, Measured>> measured_;  // node -> model -> speeds
  std::map<std::string, double> bench_retry_at_;  // "node model" -> when a failed one is retried
  std::unordered_map<std::string, std::unique_ptr<Job>> jobs_;
  std::unordered_map<std::string, std::string> attempt_job_;  // attempt id -> job id
  std::map<std::string, std::deque<std::string>> queues_;     // model -> waiting job ids
  std::deque<json> decisions_;                                // the latest, for admins
  std::map<std::string, SlotLive> slots_;  // node id -> its reserved slot
  std::map<std::string, NodeStanding> standing_;        // node id -> its operator's report
  std::map<std::string, double> last_request_at_;        // model -> its latest consumer request
  std::deque<json> model_actions_;  // the latest load_model / unload_model sent, and why
  // API key hash -> (account, when looked up): a short cache in front of the store.
  std::unordered_map<std::string, std::pair<std::optional<int64_t>, double>> key_cache_;
  int64_t jobs_completed_ = 0, jobs_failed_ = 0, failovers_ = 0;
  // Verification (hub_verify.cc).
  std::string verify_seed_;
  std::map<std::string, store::NodeReputation> reputations_;
  std::set<std::string> untrusted_;
  std::map<std::string, std::unique_ptr<Check>> checks_;         // check id -> check
  std::map<std::string, std::string> check_attempts_;            // scoring attempt id -> check id
  std::deque<json> check_log_;                                   // the latest verdicts, for admins
  std::map<std::string, std::vector<int32_t>> canary_expected_;  // canary key -> greedy output
  double last_canary_ = 0;
  int64_t checks_passed_ = 0, checks_failed_ = 0, checks_dropped_ = 0, canaries_sent_ = 0;
  WorldCache world_;
};

// Headers of the hub's own web pages (hub_world.cc): no caching, no sniffing, nothing loaded from
// elsewhere, never framed.
net::Headers WebPageHeaders();

// Store writes the hub cannot undo are logged and the work goes on (the consumer is served).
void LogError(const Status& s);
std::string ErrorBody(const std::string& message, const std::string& type,
                      const std::string& code, const std::string& param = "");

}  // namespace loom::network::hub
