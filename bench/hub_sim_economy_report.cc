// Part of hub_sim's --phase economy (see the header of hub_sim_economy.cc): the outcome, read back
// from the store once the hub has stopped (every node's pending and available books, its
// reputation: checks passed and failed, and when it was made untrusted) and from the hub's last
// /v1/admin/status (verification totals, slots), then the summary and the earnings table.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "hub_sim.h"
#include "hub_sim_economy.h"
#include "loom/network/store/store.h"

namespace hub_sim {

using namespace economy;  // NOLINT: the phase's constants and statistics
namespace store = loom::network::store;

void Sim::EconomyReport(const std::string& db) {
  std::string check_out;
  const int check_rc = RunCommand({o_.loom, "hub", "ledger", "check", "--db", db}, &check_out);
  auto s = store::OpenStore(db);
  if (!s.ok()) Die(s.status().ToString());
  const json status = econ_status_.value_or(json::object());
  std::map<std::string, json> slot_of;
  for (const json& sl : status.value("slots", json::array())) {
    slot_of[sl.value("node_id", "")] = sl;
  }
  std::map<std::string, store::NodeReputation> rep_of;
  if (auto reps = (*s)->ListReputations(); reps.ok()) {
    for (store::NodeReputation& r : *reps) rep_of[r.node_id] = std::move(r);
  } else {
    Die(reps.status().ToString());
  }
  const int64_t seeded = o_.established ? kEstablishedPasses : 0;
  const double lend_end = econ_end_;
  // cell = class * 2 + reserved
  std::vector<std::vector<double>> per_hour(std::size(kClasses) * 2);
  std::vector<int> cell_died(per_hour.size());
  struct Cheats {
    int nodes = 0, with_work = 0, checked = 0, failed_once = 0, caught = 0;
    int uncaught_failed = 0;   // with work, a failed check, not untrusted by the end
    int only_passed = 0;       // checked, every check passed: a cheating verifier vouched each time
    int64_t passed = 0, failed = 0;
    int64_t attempts_uncaught_max = 0;  // the most work any uncaught cheater got
    std::vector<double> catch_s;
    int64_t pending = 0, available = 0;
    // By the work they got (consumer-looking attempts: 1-4, 5-9, 10-19, 20-49, 50+): cheaters,
    // caught.
    int by_work[5] = {}, caught_by_work[5] = {};
  } ch;
  auto work_bucket = [](int64_t attempts) {
    return attempts < 5 ? 0 : attempts < 10 ? 1 : attempts < 20 ? 2 : attempts < 50 ? 3 : 4;
  };
  int honest_failed = 0, honest_untrusted = 0;
  int64_t scorings = 0, cheater_scorings = 0;
  int slots_active = 0, slots_lost = 0, slots_lost_died = 0;
  for (const SimNode& n : nodes_) {
    if (n.ready_at == 0) continue;
    const auto pending = (*s)->Balance("pending:" + n.id);
    const auto available = (*s)->Balance("available:" + n.id);
    const int64_t earned = (pending.ok() ? *pending : 0) + (available.ok() ? *available : 0);
    store::NodeReputation rep;
    if (auto it = rep_of.find(n.id); it != rep_of.end()) rep = it->second;
    const int64_t passed = std::max<int64_t>(0, rep.checks_passed - seeded);  // in this run
    const int64_t failed = rep.checks_failed;
    if (auto sl = slot_of.find(n.id); sl != slot_of.end()) {
      const bool lost = sl->second.value("state", "") == "lost";
      slots_lost += lost;
      slots_active += !lost;
      slots_lost_died += lost && n.died_at > 0;
    }
    scorings += n.scorings;
    if (n.cheat != SimNode::Cheat::kHonest) {
      cheater_scorings += n.scorings;
      ch.nodes += 1;
      ch.pending += pending.ok() ? *pending : 0;
      ch.available += available.ok() ? *available : 0;
      ch.passed += passed;
      ch.failed += failed;
      if (n.work_attempts > 0) {
        ch.with_work += 1;
        ch.by_work[work_bucket(n.work_attempts)] += 1;
        ch.caught_by_work[work_bucket(n.work_attempts)] += rep.untrusted;
      }
      if (passed + failed > 0) ch.checked += 1;
      if (failed > 0) ch.failed_once += 1;
      if (failed == 0 && passed > 0) ch.only_passed += 1;
      if (rep.untrusted) {
        ch.caught += 1;
        if (n.first_work_ms > 0) {
          ch.catch_s.push_back(static_cast<double>(rep.untrusted_ms - n.first_work_ms) / 1e3);
        }
      } else {
        ch.uncaught_failed += failed > 0;
        ch.attempts_uncaught_max = std::max(ch.attempts_uncaught_max, n.work_attempts);
      }
      continue;
    }
    honest_failed += failed > 0;
    honest_untrusted += rep.untrusted;
    const double hours = ((n.died_at > 0 ? n.died_at : lend_end) - n.ready_at) / 3600;
    if (hours <= 0) continue;
    const size_t cell = static_cast<size_t>(n.machine_class) * 2 + (n.slot ? 1 : 0);
    per_hour[cell].push_back(static_cast<double>(earned) / 1e6 / hours);
    cell_died[cell] += n.died_at > 0;
  }
  json& e = r_["economy"];
  e["established_start"] = o_.established;
  e["ledger_check_rc"] = check_rc;
  e["ledger_check"] = check_out;
  e["cheaters"] = ch.nodes;
  e["cheaters_with_work"] = ch.with_work;
  e["cheaters_checked"] = ch.checked;
  e["cheaters_with_failed_check"] = ch.failed_once;
  e["cheaters_caught"] = ch.caught;
  e["cheaters_uncaught_with_failed_check"] = ch.uncaught_failed;
  e["cheaters_checked_only_passed"] = ch.only_passed;
  e["cheaters_checks_passed"] = ch.passed;
  e["cheaters_checks_failed"] = ch.failed;
  e["cheaters_uncaught_attempts_max"] = ch.attempts_uncaught_max;
  e["cheaters_by_work"] = json::array();
  for (int b = 0; b < 5; ++b) {
    e["cheaters_by_work"].push_back(
        json{{"attempts", std::vector<const char*>{"1-4", "5-9", "10-19", "20-49", "50+"}[b]},
             {"cheaters", ch.by_work[b]},
             {"caught", ch.caught_by_work[b]}});
  }
  e["catch_s_p50"] = Median(ch.catch_s);
  e["catch_s_max"] = ch.catch_s.empty() ? 0 : *std::max_element(ch.catch_s.begin(), ch.catch_s.end());
  e["cheaters_pending_micro"] = ch.pending;
  e["cheaters_available_micro"] = ch.available;
  e["checks_scored_by_cheaters"] = cheater_scorings;
  e["checks_scored"] = scorings;
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
  PrintEconomy(table);
}

void Sim::PrintEconomy(const json& table) {
  const json& e = r_["economy"];
  const json& w = r_["world"];
  const json v = e.value("verification", json::object());
  auto i64 = [&](const char* k) { return static_cast<long long>(e.value(k, int64_t{0})); };
  auto dbl = [&](const char* k) { return e.value(k, 0.0); };
  std::printf("\n| hub_sim --phase economy, %d nodes%s, %d clients, %.0f s | value |\n|---|---|\n",
              o_.nodes, o_.established ? " (established start)" : "", o_.clients,
              dbl("window_s"));
  std::printf("| nodes registered (handshake p50 / p99), registration | %d (%.0f / %.0f ms), %.1f s |\n",
              r_["registration"].value("ready", 0),
              r_["registration"].value("handshake_ms_p50", 0.0),
              r_["registration"].value("handshake_ms_p99", 0.0),
              r_["registration"].value("seconds", 0.0));
  std::printf("| slot probe interval, slot period (scaled to the slots) | %.0f s, %.0f s |\n",
              r_["economy_hub"].value("probe_interval_s", 0.0),
              r_["economy_hub"].value("slot_period_s", 0.0));
  std::printf("| requests sent / ok (per s) | %lld / %d (%.1f) |\n", i64("requests_sent"),
              e["statuses"].value("200", 0), dbl("requests_per_s"));
  std::printf("| request latency p50 / p99 (24 tokens at the node's speed) | %.0f / %.0f ms |\n",
              dbl("latency_ms_p50"), dbl("latency_ms_p99"));
  std::printf("| place_us p50 / p99 (last 256 decisions) | %.0f / %.0f us |\n",
              dbl("place_us_p50"), dbl("place_us_p99"));
  std::printf("| hub CPU over the window (share of a core), RSS max | %.1f s (%.2f), %.1f MB |\n",
              dbl("hub_cpu_s"), dbl("hub_cpu_share"), dbl("hub_rss_max_mb"));
  std::printf("| simulator CPU over the window (share of a core) | %.2f |\n", dbl("sim_cpu_share"));
  std::printf("| world snapshot build p50 / max | %.1f / %.1f ms |\n",
              w.value("build_ms_p50", 0.0), w.value("build_ms_max", 0.0));
  std::printf("| GET /v1/admin/status at the end | %.0f ms |\n", dbl("status_ms"));
  std::printf("| cheaters: all / given work / checked / with a failed check | %lld / %lld / %lld / %lld |\n",
              i64("cheaters"), i64("cheaters_with_work"), i64("cheaters_checked"),
              i64("cheaters_with_failed_check"));
  std::printf("| **cheaters caught (untrusted)**; uncaught with a failed check | **%lld**; %lld |\n",
              i64("cheaters_caught"), i64("cheaters_uncaught_with_failed_check"));
  std::printf("| cheaters' checks passed (a cheating verifier vouched) / failed; checked, never failed | %lld / %lld; %lld |\n",
              i64("cheaters_checks_passed"), i64("cheaters_checks_failed"),
              i64("cheaters_checked_only_passed"));
  std::printf("| most attempts an uncaught cheater got | %lld |\n",
              i64("cheaters_uncaught_attempts_max"));
  std::string by_work;
  for (const json& b : e["cheaters_by_work"]) {
    by_work += (by_work.empty() ? "" : ", ") + b["attempts"].get<std::string>() + ": " +
               std::to_string(b["caught"].get<int>()) + " / " +
               std::to_string(b["cheaters"].get<int>());
  }
  std::printf("| cheaters caught / given work, by attempts they got | %s |\n", by_work.c_str());
  std::printf("| time from a cheater's first attempt to untrusted p50 / max | %.1f / %.1f s |\n",
              dbl("catch_s_p50"), dbl("catch_s_max"));
  std::printf("| checks scored by cheaters / all scored | %lld / %lld |\n",
              i64("checks_scored_by_cheaters"), i64("checks_scored"));
  std::printf("| cheaters' credit left pending / available | %lld / %lld micro |\n",
              i64("cheaters_pending_micro"), i64("cheaters_available_micro"));
  std::printf("| honest nodes with a failed check / untrusted | %lld / %lld |\n",
              i64("honest_with_failed_check"), i64("honest_untrusted"));
  std::printf("| checks passed / failed / dropped, canaries sent | %lld / %lld / %lld, %lld |\n",
              static_cast<long long>(v.value("checks_passed", int64_t{0})),
              static_cast<long long>(v.value("checks_failed", int64_t{0})),
              static_cast<long long>(v.value("checks_dropped", int64_t{0})),
              static_cast<long long>(v.value("canaries_sent", int64_t{0})));
  std::printf("| **verification share of tokens** | **%.1f%%** |\n", 100 * v.value("share", 0.0));
  std::printf("| scoring assigns / probe assigns answered | %lld / %lld |\n",
              i64("scoring_assigns"), i64("probe_assigns"));
  std::printf("| slots active / lost (of nodes that died) | %lld / %lld (%lld) |\n",
              i64("slots_active"), i64("slots_lost"), i64("slots_lost_of_dead_nodes"));
  const int check_rc = e.value("ledger_check_rc", -1);
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
  if (check_rc != 0) std::printf("\nledger check:\n%s\n", e.value("ledger_check", "").c_str());
}

}  // namespace hub_sim
