// Part of hub_sim (see the header of hub_sim.cc): --phase economy, the network's credits, reserved
// slots and verification at fleet scale against a real `loom hub`.
//   - The fleet: --nodes machines of three Apple classes (docs APPLE.md): 64 GB M4 Pro (273 GB/s),
//     128 GB M4 Max (546 GB/s), 512 GB M3 Ultra (819 GB/s), half / 35% / 15% of them, each holding
//     the two largest of four models that fit (5, 20, 70 and 240 GB: 8B, 32B, 70B and 405B at about
//     4.5 bits), priced by size (--price, credits per million tokens).  A node decodes a token in
//     weights / (0.8 x bandwidth), so the hub's own benchmark measures that speed.
//   - --reserve-share of them offer a reserved slot (SlotOffer, all day) for their largest model;
//     --cheat-share cheat (half return random tokens, half those of "a smaller model", and as
//     verifiers they vouch for anything); --die-share drop their connection for good at a random
//     time in the middle of the run.  Cheaters are spare or reserved like the rest.
//   - Consumers: --clients concurrent priced completions (greedy, 24 tokens, the model by demand
//     40/30/20/10% small to large) for --seconds, on an account credited before the hub starts
//     (`loom hub account credit` on the store).  The hub runs with short probe, slot-period,
//     verification-window and canary intervals so that a run of minutes shows all of it.
//   - --established: before the hub starts, every node (cheaters too) gets a record in the store
//     (a streak of kEstablishedPasses passed checks, through the store's reputation API), as in a
//     network that has run for a while: checks start at the floor rate, and a failure resets it.
//   - Nothing polls the hub during the window (GET /v1/admin/status is ~1 s of its only thread at
//     10,000 nodes).  After it: running checks drain, then the world page and the hub's status
//     (verification, slots); then, the hub stopped, hub_sim_economy_report.cc reads every node's
//     books and reputation (checks, when it was made untrusted) from the store and runs
//     `loom hub ledger check`.
// The earnings table: per class x (spare | reserved), honest nodes only, the median over nodes of
// (pending + available) credits per hour of lending (registration until death or the end).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>

#include "hub_sim.h"
#include "hub_sim_economy.h"
#include "loom/net/http_client.h"
#include "loom/network/store/store.h"

namespace hub_sim {

using namespace economy;  // NOLINT: the phase's constants and statistics
namespace store = loom::network::store;

namespace {

constexpr int64_t kMaxTokens = 24;
constexpr double kTickS = 0.5;
constexpr double kProbesPerS = 200;  // slot probes per second the hub is asked for, about
constexpr int64_t kEstablishedJobs = 1000;  // --established: jobs on record (no effect on rates)

}  // namespace

// Runs a command, its stdout and stderr into *out; its exit status.
int economy::RunCommand(const std::vector<std::string>& argv, std::string* out) {
  std::string cmd;
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  cmd += "2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int rc = ::pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void Sim::MakeEconomyFleet() {
  for (const EconomyModel& m : kModels) {
    catalogue_.push_back(CatalogueModel{.name = m.name,
                                        .weight_bytes = static_cast<int64_t>(m.weight_gb * kGb),
                                        .kv_bytes_per_token = 131072});
  }
  std::uniform_real_distribution<double> u(0, 1);
  nodes_.resize(static_cast<size_t>(o_.nodes));
  for (int i = 0; i < o_.nodes; ++i) {
    SimNode& n = nodes_[static_cast<size_t>(i)];
    NameAndKey(n, i);
    const double r = u(rng_);
    n.machine_class = r < kClasses[0].share ? 0 : r < kClasses[0].share + kClasses[1].share ? 1 : 2;
    const MachineClass& c = kClasses[n.machine_class];
    n.mem_total = static_cast<int64_t>(c.memory_gb * kGb);
    n.mem_free = n.mem_total / 4;
    n.bandwidth_gbps = c.bandwidth_gbps;
    n.cores = 12 + 8 * n.machine_class;
    n.chip = c.chip;
    // The two largest models that fit in 60% of its memory together.
    double room = 0.6 * c.memory_gb;
    for (int m = static_cast<int>(std::size(kModels)) - 1; m >= 0 && n.models.size() < 2; --m) {
      if (kModels[m].weight_gb <= room) {
        n.models.insert(n.models.begin(), m);
        room -= kModels[m].weight_gb;
      }
    }
    // One speed per node, its largest model's (the smaller one answers no faster).
    const double largest_gb = kModels[n.models.back()].weight_gb;
    n.decode_ms_per_token = largest_gb / (0.8 * c.bandwidth_gbps) * 1e3;
    n.prefill_ms = 20 + 80 * u(rng_);
    n.bench_prefill_ms = n.prefill_ms;
    if (u(rng_) < o_.reserve_share) {
      n.slot = protocol::SlotOffer{.model = kModels[n.models.back()].name};
    }
    const double cheat = u(rng_);
    if (cheat < o_.cheat_share) {
      n.cheat = cheat < o_.cheat_share / 2 ? SimNode::Cheat::kRandom
                                          : SimNode::Cheat::kSmallerModel;
    }
    n.die_at = u(rng_) < o_.die_share ? 0.3 + 0.4 * u(rng_) : 0;  // a share of the window, for now
    n.location.lat = 10 + 50 * u(rng_);
    n.location.lon = -120 + 240 * u(rng_);
    PrepareHeartbeat(n);
  }
}

void Sim::EconomyRequest() {
  if (NowSeconds() >= econ_end_) return;
  econ_sent_ += 1;
  double r = std::uniform_real_distribution<double>(0, 1)(rng_);
  size_t m = 0;
  while (m + 1 < std::size(kModels) && r >= kModels[m].demand) r -= kModels[m++].demand;
  net::ClientRequest req;
  req.method = "POST";
  req.url = completions_url_;
  req.headers = {{"Authorization", std::string("Bearer ") + kApiKey},
                 {"Content-Type", "application/json"}};
  req.body = json{{"model", kModels[m].name},
                  {"prompt", "Simulated request " + std::to_string(econ_sent_) +
                                 ": tell me a story about topic " + std::to_string(rng_() % 997)},
                  {"max_tokens", kMaxTokens},
                  {"temperature", 0},
                  {"stream", false}}
                 .dump();
  req.timeout_s = 120;
  req.idle_timeout_s = 120;
  auto status = std::make_shared<int>(0);
  const double start = NowSeconds();
  net::StartRequest(
      io_, std::move(req), nullptr,
      [status](int s, const std::vector<std::pair<std::string, std::string>>&) { *status = s; },
      [](std::string_view) {},
      [this, status, start](loom::Status s) {
        finished_ += 1;
        const int code = s.ok() ? *status : -1;
        econ_statuses_[code] += 1;
        if (code == 200) econ_latency_ms_.push_back((NowSeconds() - start) * 1e3);
        EconomyRequest();
      });
}

// With --established: every node has passed kEstablishedPasses checks in a row and failed none,
// written through the store's reputation API before the hub starts (the hub loads it).  Its
// served and check tokens stay 0, so the run's verification share is the run's alone.
void Sim::SeedReputations(const std::string& db) {
  auto s = store::OpenStore(db);
  if (!s.ok()) Die(s.status().ToString());
  const int64_t now_ms = loom::base::UnixMillis();
  for (const SimNode& n : nodes_) {
    store::NodeReputation r;
    r.node_id = n.id;
    r.jobs = kEstablishedJobs;
    r.checks_passed = kEstablishedPasses;
    r.streak = kEstablishedPasses;
    r.last_result = "passed";
    r.last_check_ms = now_ms - 3600 * 1000;
    loom::Status put = (*s)->PutReputation(r);
    if (!put.ok()) Die(put.ToString());
  }
}

// Deaths.  (When the hub made a node untrusted is read from the store at the end: polling
// /v1/admin/status, ~1 s of the hub's only thread at 10,000 nodes, would cost the hub more than
// the run it measures.)
void Sim::EconomyTick() {
  const double now = NowSeconds();
  for (SimNode& n : nodes_) {
    if (n.die_at > 0 && n.died_at == 0 && n.state == SimNode::State::kReady && now >= n.die_at) {
      n.died_at = now;
      n.ws->Close("simulated death");
    }
  }
}

// After the window: checks still running end within --check-wait-s per try (3 tries); canaries
// go on meanwhile, so wait until no scoring assign came for a try's wait, at most 40 s.
void Sim::EconomyDrain() {
  const double drain0 = NowSeconds();
  last_scoring_at_ = std::max(last_scoring_at_, drain0);
  RunUntil([&] { return NowSeconds() - last_scoring_at_ > 11; }, 40);
}

int Sim::Economy(const std::string& db) {
  double t = NowSeconds();
  MakeEconomyFleet();
  const double keys_s = NowSeconds() - t;
  t = NowSeconds();
  Enrol(db);
  if (o_.established) SeedReputations(db);
  std::fprintf(stderr, "hub_sim: economy: %d keys in %.1f s, enrolled%s in %.1f s\n", o_.nodes,
               keys_s, o_.established ? " with a record" : "", NowSeconds() - t);
  std::string out;
  if (RunCommand({o_.loom, "hub", "account", "credit", "sim", "1000000", "--db", db}, &out) !=
      0) {
    Die("loom hub account credit failed: " + out);
  }
  for (const EconomyModel& m : kModels) {
    char price[96];
    std::snprintf(price, sizeof price, "%s=%g:%g", m.name, m.prompt_price, m.completion_price);
    hub_args_.insert(hub_args_.end(), {"--price", price});
  }
  // Probes: every slot every --probe-interval-s (3 s at a few hundred nodes).  At 10,000 nodes,
  // 3,000 slots probed every 3 s would be 1,000 probes/s, each a job and a store write (measured:
  // 1,256 probes/s took most of the hub's core); a real hub probes every 300 s.  So the interval
  // grows with the slots to keep about kProbesPerS, and a slot period holds 4 probes.
  int64_t slots = 0;
  for (const SimNode& n : nodes_) slots += n.slot.has_value();
  const double probe_s = std::max(3.0, static_cast<double>(slots) / kProbesPerS);
  const double period_s = std::max(20.0, 4 * probe_s);
  r_["economy_hub"] = {{"probe_interval_s", probe_s}, {"slot_period_s", period_s}};
  hub_args_.insert(hub_args_.end(),
                   {"--probe-interval-s", std::to_string(probe_s), "--slot-period-s",
                    std::to_string(period_s), "--min-probes", "5", "--verify-window-s", "20",
                    "--canary-interval-s", "5", "--check-wait-s", "10", "--first-token-s", "20"});
  StartHub(db);
  std::fprintf(stderr, "hub_sim: economy: hub pid %d on port %d (log %s/hub.log)\n", g_hub_pid,
               port_, tmp_.c_str());
  auto guard = asio::make_work_guard(io_);
  RunUntil([] { return false; }, 0.3);
  Keepalive();
  Register();
  if (ready_ == 0) Die("no node registered: " + first_failure_);

  std::fprintf(stderr, "hub_sim: economy: %d clients for %.0f s...\n", o_.clients, o_.seconds);
  econ_start_ = NowSeconds();
  econ_end_ = econ_start_ + o_.seconds;
  for (SimNode& n : nodes_) {
    if (n.die_at > 0) n.die_at = econ_start_ + n.die_at * o_.seconds;
  }
  const double cpu0 = ProcCpuSeconds(g_hub_pid);
  const double self0 = SelfCpuSeconds();
  const int64_t scoring0 = scoring_assigns_;
  for (int c = 0; c < o_.clients; ++c) EconomyRequest();
  int64_t rss_max = 0;
  double next_report = econ_start_ + 60;
  while (NowSeconds() < econ_end_) {
    RunUntil([] { return false; }, kTickS);
    EconomyTick();
    rss_max = std::max(rss_max, ProcRssKb(g_hub_pid));
    if (NowSeconds() >= next_report) {
      next_report += 60;
      std::fprintf(stderr, "hub_sim: economy: %.0f s: %d requests done, %lld checks scored\n",
                   NowSeconds() - econ_start_, finished_,
                   static_cast<long long>(scoring_assigns_ - scoring0));
    }
  }
  const double window = NowSeconds() - econ_start_;
  const double cpu = ProcCpuSeconds(g_hub_pid) - cpu0;
  const double self_cpu = SelfCpuSeconds() - self0;
  RunUntil([&] { return finished_ >= econ_sent_; }, 120);
  EconomyDrain();
  std::vector<double> place_us;
  if (auto d = GetJson("/v1/admin/decisions")) {
    for (const json& rec : (*d)["decisions"]) place_us.push_back(rec.value("place_us", 0.0));
  }
  o_.world_runs = 3;
  World();
  const double status_t0 = NowSeconds();
  econ_status_ = GetJson("/v1/admin/status");
  const double status_ms = (NowSeconds() - status_t0) * 1e3;
  const json status = econ_status_.value_or(json::object());
  r_["economy"] = {{"window_s", window},
                   {"requests_sent", econ_sent_},
                   {"requests_per_s", static_cast<double>(econ_sent_) / window},
                   {"hub_cpu_s", cpu},
                   {"hub_cpu_share", cpu / window},
                   {"hub_rss_max_mb", static_cast<double>(rss_max) / 1024},
                   {"sim_cpu_share", self_cpu / window},
                   {"status_ms", status_ms},
                   {"latency_ms_p50", Quantile(econ_latency_ms_, 0.5)},
                   {"latency_ms_p99", Quantile(econ_latency_ms_, 0.99)},
                   {"place_us_p50", Quantile(place_us, 0.5)},
                   {"place_us_p99", Quantile(place_us, 0.99)},
                   {"scoring_assigns", scoring_assigns_},
                   {"probe_assigns", probe_assigns_}};
  json statuses = json::object();
  for (const auto& [code, count] : econ_statuses_) statuses[std::to_string(code)] = count;
  r_["economy"]["statuses"] = statuses;
  if (status.contains("verification")) {
    json v = status["verification"];
    v.erase("nodes");
    v.erase("recent");
    r_["economy"]["verification"] = v;
  }
  keepalive_.cancel();
  StopChild(&g_hub_pid, SIGTERM, 20);
  EconomyReport(db);
  if (!o_.keep) {
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
  } else {
    std::fprintf(stderr, "hub_sim: kept %s\n", tmp_.c_str());
  }
  return 0;
}

}  // namespace hub_sim
