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
//   - Every 2 s GET /v1/admin/status: when each cheater was made untrusted.  At the end the hub's
//     status (verification, slots), the world page, then (the hub stopped) every node's pending and
//     available books from the store and `loom hub ledger check`.
// The earnings table: per class x (spare | reserved), honest nodes only, the median over nodes of
// (pending + available) credits per hour of lending (registration until death or the end).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "hub_sim.h"
#include "loom/net/http_client.h"
#include "loom/network/store/store.h"

namespace hub_sim {
namespace {

namespace store = loom::network::store;

constexpr double kGb = 1e9;
constexpr int64_t kMaxTokens = 24;
constexpr double kPollS = 2;

struct MachineClass {
  const char* name;
  const char* chip;
  double memory_gb, bandwidth_gbps, share;
};
constexpr MachineClass kClasses[] = {{"64 GB M4 Pro", "Apple M4 Pro", 64, 273, 0.5},
                                     {"128 GB M4 Max", "Apple M4 Max", 128, 546, 0.35},
                                     {"512 GB M3 Ultra", "Apple M3 Ultra", 512, 819, 0.15}};

struct EconomyModel {
  const char* name;
  double weight_gb;
  double prompt_price, completion_price;  // credits per million tokens
  double demand;                          // share of the requests
};
constexpr EconomyModel kModels[] = {{"sim/llama-8b", 5, 0.5, 1, 0.4},
                                    {"sim/qwen-32b", 20, 1.5, 3, 0.3},
                                    {"sim/llama-70b", 70, 4, 8, 0.2},
                                    {"sim/llama-405b", 240, 12, 25, 0.1}};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double Quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Runs a command, its stdout and stderr into *out; its exit status.
int RunCommand(const std::vector<std::string>& argv, std::string* out) {
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

}  // namespace

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

// Deaths, and when the hub made each node untrusted.
void Sim::EconomyPoll() {
  const double now = NowSeconds();
  for (SimNode& n : nodes_) {
    if (n.die_at > 0 && n.died_at == 0 && n.state == SimNode::State::kReady && now >= n.die_at) {
      n.died_at = now;
      n.ws->Close("simulated death");
    }
  }
  econ_status_ = GetJson("/v1/admin/status");
  if (!econ_status_ || !econ_status_->contains("verification")) return;
  std::map<std::string, SimNode*> by_id;
  for (SimNode& n : nodes_) by_id[n.id] = &n;
  for (const json& v : (*econ_status_)["verification"]["nodes"]) {
    auto it = by_id.find(v["node_id"].get<std::string>());
    if (it != by_id.end() && v.value("untrusted", false) && it->second->untrusted_at == 0) {
      it->second->untrusted_at = now;
    }
  }
}

int Sim::Economy(const std::string& db) {
  MakeEconomyFleet();
  Enrol(db);
  std::string out;
  if (RunCommand({o_.loom, "hub", "account", "credit", "sim", "1000000", "--db", db}, &out) != 0) {
    Die("loom hub account credit failed: " + out);
  }
  for (const EconomyModel& m : kModels) {
    char price[96];
    std::snprintf(price, sizeof price, "%s=%g:%g", m.name, m.prompt_price, m.completion_price);
    hub_args_.insert(hub_args_.end(), {"--price", price});
  }
  hub_args_.insert(hub_args_.end(),
                   {"--probe-interval-s", "3", "--slot-period-s", "20", "--min-probes", "5",
                    "--verify-window-s", "20", "--canary-interval-s", "5", "--check-wait-s", "10",
                    "--first-token-s", "20"});
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
  for (int c = 0; c < o_.clients; ++c) EconomyRequest();
  int64_t rss_max = 0;
  while (NowSeconds() < econ_end_) {
    RunUntil([] { return false; }, kPollS);
    EconomyPoll();
    rss_max = std::max(rss_max, ProcRssKb(g_hub_pid));
  }
  const double window = NowSeconds() - econ_start_;
  const double cpu = ProcCpuSeconds(g_hub_pid) - cpu0;
  RunUntil([&] { return finished_ >= econ_sent_; }, 120);
  // Checks still running end within --check-wait-s per try.
  const double drain0 = NowSeconds();
  while (NowSeconds() - drain0 < 40) {
    RunUntil([] { return false; }, kPollS);
    EconomyPoll();
    if (econ_status_ && (*econ_status_)["verification"].value("checks_running", 1) == 0) break;
  }
  std::vector<double> place_us;
  if (auto d = GetJson("/v1/admin/decisions")) {
    for (const json& rec : (*d)["decisions"]) place_us.push_back(rec.value("place_us", 0.0));
  }
  o_.world_runs = 3;
  World();
  const json status = econ_status_.value_or(json::object());
  r_["economy"] = {{"window_s", window},
                   {"requests_sent", econ_sent_},
                   {"hub_cpu_s", cpu},
                   {"hub_cpu_share", cpu / window},
                   {"hub_rss_max_mb", static_cast<double>(rss_max) / 1024},
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

void Sim::EconomyReport(const std::string& db) {
  // The ledger, from the store (the hub has stopped), and its invariants.
  std::string check_out;
  const int check_rc = RunCommand({o_.loom, "hub", "ledger", "check", "--db", db}, &check_out);
  auto s = store::OpenStore(db);
  if (!s.ok()) Die(s.status().ToString());
  const json status = econ_status_.value_or(json::object());
  std::map<std::string, json> slot_of, rep_of;
  for (const json& sl : status.value("slots", json::array())) {
    slot_of[sl.value("node_id", "")] = sl;
  }
  if (status.contains("verification")) {
    for (const json& v : status["verification"]["nodes"]) rep_of[v["node_id"]] = v;
  }
  const double lend_end = econ_end_;
  // cell = class * 2 + reserved
  std::vector<std::vector<double>> per_hour(std::size(kClasses) * 2);
  std::vector<int> cell_died(per_hour.size());
  int cheaters = 0, caught = 0, cheaters_working = 0, honest_failed = 0, honest_untrusted = 0;
  int slots_active = 0, slots_lost = 0, slots_lost_died = 0;
  std::vector<double> catch_s;
  int64_t cheater_pending = 0, cheater_available = 0;
  for (const SimNode& n : nodes_) {
    if (n.ready_at == 0) continue;
    const auto pending = (*s)->Balance("pending:" + n.id);
    const auto available = (*s)->Balance("available:" + n.id);
    const int64_t earned = (pending.ok() ? *pending : 0) + (available.ok() ? *available : 0);
    auto rep = rep_of.find(n.id);
    const int64_t failed =
        rep == rep_of.end() ? 0 : rep->second.value("checks_failed", int64_t{0});
    auto sl = slot_of.find(n.id);
    if (sl != slot_of.end()) {
      const bool lost = sl->second.value("state", "") == "lost";
      slots_lost += lost;
      slots_active += !lost;
      slots_lost_died += lost && n.died_at > 0;
    }
    if (n.cheat != SimNode::Cheat::kHonest) {
      cheaters += 1;
      cheater_pending += pending.ok() ? *pending : 0;
      cheater_available += available.ok() ? *available : 0;
      if (n.work_attempts > 0) cheaters_working += 1;
      if (n.untrusted_at > 0) {
        caught += 1;
        if (n.first_work_at > 0) catch_s.push_back(n.untrusted_at - n.first_work_at);
      }
      continue;
    }
    honest_failed += failed > 0;
    honest_untrusted += n.untrusted_at > 0;
    const double hours = ((n.died_at > 0 ? n.died_at : lend_end) - n.ready_at) / 3600;
    if (hours <= 0) continue;
    const size_t cell = static_cast<size_t>(n.machine_class) * 2 + (n.slot ? 1 : 0);
    per_hour[cell].push_back(static_cast<double>(earned) / 1e6 / hours);
    cell_died[cell] += n.died_at > 0;
  }
  json& e = r_["economy"];
  e["ledger_check_rc"] = check_rc;
  e["ledger_check"] = check_out;
  e["cheaters"] = cheaters;
  e["cheaters_with_work"] = cheaters_working;
  e["cheaters_caught"] = caught;
  e["catch_s_p50"] = Median(catch_s);
  e["catch_s_max"] = catch_s.empty() ? 0 : *std::max_element(catch_s.begin(), catch_s.end());
  e["cheaters_pending_micro"] = cheater_pending;
  e["cheaters_available_micro"] = cheater_available;
  e["honest_with_failed_check"] = honest_failed;
  e["honest_untrusted"] = honest_untrusted;
  e["slots_active"] = slots_active;
  e["slots_lost"] = slots_lost;
  e["slots_lost_of_dead_nodes"] = slots_lost_died;
  json table = json::array();
  for (size_t c = 0; c < std::size(kClasses); ++c) {
    for (int reserved = 0; reserved < 2; ++reserved) {
      const std::vector<double>& v = per_hour[c * 2 + static_cast<size_t>(reserved)];
      table.push_back(json{{"class", kClasses[c].name},
                           {"models", c == 0 ? "8b, 32b" : c == 1 ? "32b, 70b" : "70b, 405b"},
                           {"lending", reserved ? "reserved" : "spare"},
                           {"nodes", static_cast<int64_t>(v.size())},
                           {"died", cell_died[c * 2 + static_cast<size_t>(reserved)]},
                           {"credits_per_hour_median", Median(v)},
                           {"credits_per_hour_p10", Quantile(v, 0.1)},
                           {"credits_per_hour_p90", Quantile(v, 0.9)}});
    }
  }
  e["earnings"] = table;
  r_["nodes_disconnected"] = disconnected_;
  r_["load_average"] = LoadAverage();
  if (o_.json) {
    std::printf("%s\n", r_.dump(1).c_str());
    return;
  }
  const json& w = r_["world"];
  const json v = e.value("verification", json::object());
  std::printf("\n| hub_sim --phase economy, %d nodes, %d clients, %.0f s | value |\n|---|---|\n",
              o_.nodes, o_.clients, e["window_s"].get<double>());
  std::printf("| requests sent / ok | %d / %d |\n", econ_sent_,
              e["statuses"].value("200", 0));
  std::printf("| request latency p50 / p99 (24 tokens at the node's speed) | %.0f / %.0f ms |\n",
              e["latency_ms_p50"].get<double>(), e["latency_ms_p99"].get<double>());
  std::printf("| place_us p50 / p99 (last 256 decisions) | %.0f / %.0f us |\n",
              e["place_us_p50"].get<double>(), e["place_us_p99"].get<double>());
  std::printf("| hub CPU over the window (share of a core), RSS max | %.1f s (%.2f), %.1f MB |\n",
              e["hub_cpu_s"].get<double>(), e["hub_cpu_share"].get<double>(),
              e["hub_rss_max_mb"].get<double>());
  std::printf("| world snapshot build p50 / max | %.1f / %.1f ms |\n",
              w.value("build_ms_p50", 0.0), w.value("build_ms_max", 0.0));
  std::printf("| cheaters caught (untrusted) / cheaters / cheaters given work | %d / %d / %d |\n",
              caught, cheaters, cheaters_working);
  std::printf("| time from a cheater's first attempt to untrusted p50 / max | %.1f / %.1f s |\n",
              e["catch_s_p50"].get<double>(), e["catch_s_max"].get<double>());
  std::printf("| cheaters' credit left pending / available | %lld / %lld micro |\n",
              static_cast<long long>(cheater_pending), static_cast<long long>(cheater_available));
  std::printf("| honest nodes with a failed check / untrusted | %d / %d |\n", honest_failed,
              honest_untrusted);
  std::printf("| checks passed / failed / dropped, canaries sent | %lld / %lld / %lld, %lld |\n",
              static_cast<long long>(v.value("checks_passed", int64_t{0})),
              static_cast<long long>(v.value("checks_failed", int64_t{0})),
              static_cast<long long>(v.value("checks_dropped", int64_t{0})),
              static_cast<long long>(v.value("canaries_sent", int64_t{0})));
  std::printf("| **verification share of tokens** | **%.1f%%** |\n", 100 * v.value("share", 0.0));
  std::printf("| scoring assigns / probe assigns answered | %lld / %lld |\n",
              static_cast<long long>(scoring_assigns_), static_cast<long long>(probe_assigns_));
  std::printf("| slots active / lost (of nodes that died) | %d / %d (%d) |\n", slots_active,
              slots_lost, slots_lost_died);
  std::printf("| `loom hub ledger check` | exit %d%s |\n", check_rc,
              check_rc == 0 ? ", clean" : "");
  std::printf("| load average at the end | %s |\n", r_["load_average"].get<std::string>().c_str());
  std::printf("\n| machine (models) | lending | nodes (died) | credits/hour median | p10 | p90 |\n"
              "|---|---|---|---|---|---|\n");
  for (const json& row : table) {
    std::printf("| %s (%s) | %s | %lld (%d) | **%.4f** | %.4f | %.4f |\n",
                row["class"].get<std::string>().c_str(), row["models"].get<std::string>().c_str(),
                row["lending"].get<std::string>().c_str(),
                static_cast<long long>(row["nodes"].get<int64_t>()), row["died"].get<int>(),
                row["credits_per_hour_median"].get<double>(),
                row["credits_per_hour_p10"].get<double>(),
                row["credits_per_hour_p90"].get<double>());
  }
  if (check_rc != 0) std::printf("\nledger check:\n%s\n", check_out.c_str());
}

}  // namespace hub_sim
