// A fleet of simulated nodes against a real `loom hub` process.  The simulator
//   1. enrols N nodes (Ed25519 keys made here) straight into a fresh SQLite store, with an account
//      and an API key, before the hub starts;
//   2. starts `loom hub` on a free loopback port with that store and opens N node WebSockets
//      (at most --dials handshakes outstanding): hello, the signed challenge, register (1-5 models
//      of a catalogue of 50, all loaded; 8-512 GB of memory; max_concurrency 4), and times how
//      long registration of all N took; the hub's own benchmark jobs are answered on the way;
//   3. heartbeat ingest: for --seconds, every node sends heartbeats round after round, paced so
//      that at most about one round is unread in the hub's socket buffers (the hub's receive
//      queues, summed over netlink sock_diag); it reports frames/s sent and the hub's CPU time
//      (/proc/PID/stat utime+stime) until it has read everything, so frames per hub CPU-second;
//      then checks on GET /v1/admin/status that the hub holds every node's last heartbeat (each
//      carries mem_free_bytes = base - round) and how old it is;
//   4. placement under the warm fleet: --requests non-streaming completions (max_tokens 8) from
//      --clients concurrent HTTP clients; the nodes answer their assign frames (accepted, one
//      chunk "ok" with max_tokens token ids, complete "length"); reports end-to-end latency
//      p50/p99 and the hub's own place_us (GET /v1/admin/decisions, the latest 256);
//   5. memory: the hub's VmRSS before the nodes connect and after all registered, per node;
//   6. the public world page: --world-runs GETs of /world.json, each on a fresh snapshot (its size,
//      the transfer time and the hub's own build time from /v1/admin/status); with --world-hold S
//      the fleet then stays up S seconds for a browser on /world (bench/world_page.mjs).
//      Every node declares a location (around 12 cities) and a chip.
// Everything runs on one thread (one io_context); the hub process is stopped at the end (also on
// SIGINT/SIGTERM, and it gets SIGKILL if the simulator dies).
//
// Usage: hub_sim [--nodes N] [--requests M] [--seconds S] [--loom PATH] [--clients C]
//                [--dials D] [--seed S] [--perf PREFIX] [--keep] [--json]
//                [--world-runs R] [--world-hold S]
//        hub_sim --phase economy [--nodes N] [--seconds S] [--clients C] [--reserve-share F]
//                [--cheat-share F] [--die-share F] [--established] [--seed S] [--keep] [--json]
// (--phase economy: credits, reserved slots and verification with honest, cheating and dying
// nodes of three Apple machine classes; see the header of bench/hub_sim_economy.cc.)
// (--perf: `perf record -g` of the hub during the idle, ingest and placement phases, into
// PREFIX-idle.data, PREFIX-ingest.data and PREFIX-placement.data.)
// The code: this file has main(), the flags, the hub, the phases and the summary;
// hub_sim_fleet.cc the simulated nodes; hub_sim_proc.cc child processes, /proc and sock_diag;
// hub_sim.h (and hub_sim_proc.h) the declarations they share; hub_sim_economy.cc --phase economy
// (hub_sim_economy_report.cc its outcome and summary).
// Every node answers with the simulator's deterministic model (hub_sim.h): its tokens, and the
// hub's scoring assigns (verification) with per-token logprobs.
#include "hub_sim.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "loom/net/http_client.h"

namespace hub_sim {
namespace {

const char* kAdminKey = "hub-sim-admin-key";

// ---- Statistics ----

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

void Sim::StartHub(const std::string& db) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) Die("pipe");
  std::vector<std::string> argv = {o_.loom,   "hub",      "--listen",          "127.0.0.1:0",
                                   "--db",     db,         "--admin-key",       kAdminKey,
                                   "--max-connections", "30000"};
  argv.insert(argv.end(), hub_args_.begin(), hub_args_.end());
  g_hub_pid = Spawn(argv, out[1], out[0], tmp_ + "/hub.log");
  ::close(out[1]);
  std::string text;
  const double end = NowSeconds() + 60;
  const std::string marker = "listening on http://127.0.0.1:";
  while (NowSeconds() < end) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[512];
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    const size_t at = text.find(marker);
    if (at != std::string::npos && text.find('/', at + marker.size()) != std::string::npos) {
      port_ = std::atoi(text.c_str() + at + marker.size());
      break;
    }
  }
  // (The read end stays open: the hub never writes to stdout again, and a closed pipe would not
  // hurt it either, since it ignores SIGPIPE.)
  if (port_ <= 0) Die("the hub did not start; its log is " + tmp_ + "/hub.log:\n" + text);
  base_url_ = "http://127.0.0.1:" + std::to_string(port_);
  auto url = net::ParseUrl("ws://127.0.0.1:" + std::to_string(port_) + "/v1/node/connect");
  if (!url.ok()) Die(url.status().ToString());
  ws_url_ = *url;
  auto completions = net::ParseUrl(base_url_ + "/v1/completions");
  if (!completions.ok()) Die(completions.status().ToString());
  completions_url_ = *completions;
}

bool Sim::RunUntil(const std::function<bool()>& done, double timeout_s) {
  const double end = NowSeconds() + timeout_s;
  while (!done()) {
    if (NowSeconds() > end) return false;
    io_.run_for(std::chrono::milliseconds(5));
  }
  return true;
}

void Sim::Register() {
  const double rss_before = static_cast<double>(ProcRssKb(g_hub_pid));
  const double cpu_before = ProcCpuSeconds(g_hub_pid);
  const double start = NowSeconds();
  DialMore();
  const bool all = RunUntil(
      [&] { return ready_ + failed_ >= o_.nodes && dials_outstanding_ == 0; }, 600);
  double last_ready = start;
  std::vector<double> handshake_ms;
  for (const SimNode& n : nodes_) {
    if (n.ready_at > 0) {
      last_ready = std::max(last_ready, n.ready_at);
      handshake_ms.push_back((n.ready_at - n.dial_at) * 1e3);
    }
  }
  const double reg_s = last_ready - start;
  const double reg_cpu = ProcCpuSeconds(g_hub_pid) - cpu_before;
  std::fprintf(stderr, "hub_sim: %d of %d nodes registered in %.2f s (%d failed%s%s)\n", ready_,
               o_.nodes, reg_s, failed_, first_failure_.empty() ? "" : ": ",
               first_failure_.c_str());
  if (!all) std::fprintf(stderr, "hub_sim: registration did not finish within 600 s\n");
  // The hub benchmarks every loaded model of every node it just welcomed; let that finish so that
  // the fleet is warm (measured) before the next phases.
  int64_t expected = 0;
  for (const SimNode& n : nodes_) {
    if (n.state == SimNode::State::kReady) expected += static_cast<int64_t>(n.models.size());
  }
  const double bench_start = NowSeconds();
  const bool benched = RunUntil([&] { return bench_done_ >= expected; }, 120);
  RunUntil([] { return false; }, 0.5);  // the last completes reach the hub
  const double rss_after = static_cast<double>(ProcRssKb(g_hub_pid));
  std::fprintf(stderr, "hub_sim: the hub's benchmarks: %lld of %lld answered%s (%.1f s more)\n",
               static_cast<long long>(bench_done_), static_cast<long long>(expected),
               benched ? "" : " (timed out)", NowSeconds() - bench_start);
  r_["registration"] = {
      {"nodes", o_.nodes}, {"ready", ready_}, {"failed", failed_}, {"seconds", reg_s},
      {"per_second", ready_ / std::max(reg_s, 1e-9)},
      {"handshake_ms_p50", Percentile(handshake_ms, 0.5)},
      {"handshake_ms_p99", Percentile(handshake_ms, 0.99)},
      {"hub_cpu_s", reg_cpu}, {"hub_cpu_us_per_node", reg_cpu * 1e6 / std::max(ready_, 1)},
      {"benchmarks_expected", expected}, {"benchmarks_answered", bench_done_},
      {"first_failure", first_failure_}};
  r_["memory"] = {{"rss_before_mb", rss_before / 1024}, {"rss_after_mb", rss_after / 1024},
                  {"per_node_kb", (rss_after - rss_before) / std::max(ready_, 1)}};
}

void Sim::IngestRound() {
  if (NowSeconds() >= ingest_end_) {
    ingest_sending_ = false;
    return;
  }
  // At most about one round unread at the hub: beyond that the kernel's buffers (megabytes per
  // socket) would hold what the hub has not processed, and frames sent would not be frames ingested.
  if (auto b = diag_.RecvBacklog(static_cast<uint16_t>(port_))) {
    max_backlog_ = std::max(max_backlog_, b->bytes);
    if (b->bytes > std::max<int64_t>(round_bytes_, 256 << 10)) {
      pace_waits_ += 1;
      pace_timer_->expires_after(std::chrono::microseconds(500));
      pace_timer_->async_wait([this](const boost::system::error_code& ec) {
        if (!ec) IngestRound();
      });
      return;
    }
  }
  for (SimNode& n : nodes_) {
    if (n.state != SimNode::State::kReady) continue;
    if (n.ws->queued_bytes() > 0) {  // its last one is still being written
      hb_skipped_ += 1;
      continue;
    }
    n.round += 1;
    SendHeartbeat(n);
    hb_frames_ += 1;
  }
  hb_rounds_ += 1;
  asio::post(io_, [this] { IngestRound(); });
}

void Sim::Ingest() {
  pace_timer_.emplace(io_);
  if (!diag_.RecvBacklog(static_cast<uint16_t>(port_))) {
    std::fprintf(stderr, "hub_sim: netlink sock_diag unavailable: heartbeats are not paced\n");
  }
  // The hub idle (but for its 100 ms tick over every connection), without heartbeats, 2 s.
  keepalive_on_ = false;
  StartPerf("idle");
  const double idle_cpu0 = ProcCpuSeconds(g_hub_pid);
  const double idle_t0 = NowSeconds();
  RunUntil([] { return false; }, 2);
  const double idle_cpu_per_s = (ProcCpuSeconds(g_hub_pid) - idle_cpu0) / (NowSeconds() - idle_t0);
  StopPerf();

  StartPerf("ingest");
  const double cpu0 = ProcCpuSeconds(g_hub_pid);
  const double self0 = SelfCpuSeconds();
  const double t0 = NowSeconds();
  ingest_end_ = t0 + o_.seconds;
  ingest_sending_ = true;
  IngestRound();
  RunUntil([&] { return !ingest_sending_; }, o_.seconds + 60);
  const double t_sent = NowSeconds();
  // Until the hub has read everything: our queues empty and its receive queues empty, twice.
  int quiet = 0;
  RunUntil(
      [&] {
        bool flushed = true;
        for (const SimNode& n : nodes_) {
          if (n.state == SimNode::State::kReady && n.ws->queued_bytes() > 0) {
            flushed = false;
            break;
          }
        }
        auto b = diag_.RecvBacklog(static_cast<uint16_t>(port_));
        quiet = flushed && b && b->bytes == 0 ? quiet + 1 : 0;
        return quiet >= 2;
      },
      120);
  const double t_read = NowSeconds();
  RunUntil([] { return false; }, 0.05);  // the last frames read get parsed
  const double cpu = ProcCpuSeconds(g_hub_pid) - cpu0;
  const double self_cpu = SelfCpuSeconds() - self0;
  const double t1 = NowSeconds();
  StopPerf();

  // Did the hub take them all?  Every node's last heartbeat carried mem_free - round.
  const double status_t0 = NowSeconds();
  std::optional<json> status = GetJson("/v1/admin/status");
  const double status_ms = (NowSeconds() - status_t0) * 1e3;
  keepalive_on_ = true;
  int64_t seen = 0, current = 0;
  std::vector<double> ages;
  if (status) {
    std::map<std::string, const json*> by_id;
    for (const json& node : (*status)["nodes"]) by_id[node["node_id"].get<std::string>()] = &node;
    for (const SimNode& n : nodes_) {
      if (n.state != SimNode::State::kReady) continue;
      auto it = by_id.find(n.id);
      if (it == by_id.end()) continue;
      seen += 1;
      current += (*it->second)["mem_free_bytes"].get<int64_t>() == n.mem_free - n.round;
      ages.push_back((*it->second)["heartbeat_age_s"].get<double>());
    }
  }
  const double window = t_read - t0;
  r_["ingest"] = {
      {"seconds_sending", t_sent - t0}, {"seconds_until_read", window},
      {"frames", hb_frames_}, {"rounds", hb_rounds_}, {"bytes", hb_bytes_},
      {"skipped_busy", hb_skipped_}, {"pace_waits", pace_waits_},
      {"max_backlog_kb", static_cast<double>(max_backlog_) / 1024},
      {"frames_per_s", static_cast<double>(hb_frames_) / window},
      {"hub_cpu_s", cpu}, {"hub_cpu_share", cpu / (t1 - t0)},
      {"frames_per_hub_cpu_s", static_cast<double>(hb_frames_) / std::max(cpu, 1e-9)},
      {"hub_idle_cpu_share", idle_cpu_per_s},
      {"sim_cpu_s", self_cpu},
      {"nodes_in_status", seen}, {"nodes_with_last_heartbeat", current},
      {"heartbeat_age_s_max", ages.empty() ? -1 : *std::max_element(ages.begin(), ages.end())},
      {"heartbeat_age_s_p50", Percentile(ages, 0.5)},
      {"status_ms", status_ms},
      {"status_bytes", status ? static_cast<int64_t>(status->dump().size()) : 0}};
}

std::optional<json> Sim::GetJson(const std::string& path, double timeout_s, double* fetch_ms,
                                 int64_t* bytes) {
  const double t0 = NowSeconds();
  auto url = net::ParseUrl(base_url_ + path);
  if (!url.ok()) return std::nullopt;
  net::ClientRequest req;
  req.url = *url;
  req.headers = {{"Authorization", std::string("Bearer ") + kAdminKey}};
  req.timeout_s = timeout_s;
  req.idle_timeout_s = timeout_s;
  auto body = std::make_shared<std::string>();
  auto code = std::make_shared<int>(0);
  auto done = std::make_shared<std::optional<loom::Status>>();
  net::StartRequest(
      io_, req, nullptr,
      [code](int status, const std::vector<std::pair<std::string, std::string>>&) {
        *code = status;
      },
      [body](std::string_view d) { body->append(d); },
      [done](loom::Status s) { *done = std::move(s); });
  RunUntil([&] { return done->has_value(); }, timeout_s + 5);
  if (!done->has_value() || !(*done)->ok() || *code != 200) {
    std::fprintf(stderr, "hub_sim: GET %s failed: HTTP %d %s\n", path.c_str(), *code,
                 done->has_value() ? (*done)->ToString().c_str() : "timeout");
    return std::nullopt;
  }
  if (fetch_ms != nullptr) *fetch_ms = (NowSeconds() - t0) * 1e3;
  if (bytes != nullptr) *bytes = static_cast<int64_t>(body->size());
  json j = json::parse(*body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// The public world page at this size: GET /world.json, each after the snapshot aged past its
// second (so each GET rebuilds it), the hub's own time to build it (GET /v1/admin/status), and
// whether it lists every node.
void Sim::World() {
  std::vector<double> fetch_ms, build_ms, build_cpu_ms, history_ms;
  int64_t bytes = 0, machines = 0, located = 0;
  for (int i = 0; i < o_.world_runs; ++i) {
    RunUntil([] { return false; }, 1.2);
    double ms = 0;
    auto w = GetJson("/world.json", 120, &ms, &bytes);
    if (!w) continue;
    fetch_ms.push_back(ms);
    machines = static_cast<int64_t>((*w)["machines"].size());
    located = 0;
    for (const json& m : (*w)["machines"]) located += !m["location"].is_null();
    auto s = GetJson("/v1/admin/status");
    if (s && s->contains("world")) {
      build_ms.push_back((*s)["world"]["build_ms"].get<double>());
      build_cpu_ms.push_back((*s)["world"]["build_cpu_ms"].get<double>());
      history_ms.push_back((*s)["world"]["history_ms"].get<double>());
    }
  }
  r_["world"] = {{"runs", static_cast<int64_t>(fetch_ms.size())},
                 {"machines", machines}, {"located", located}, {"bytes", bytes},
                 {"fetch_ms_p50", Percentile(fetch_ms, 0.5)},
                 {"fetch_ms_max", Percentile(fetch_ms, 1.0)},
                 {"build_ms_p50", Percentile(build_ms, 0.5)},
                 {"build_ms_max", Percentile(build_ms, 1.0)},
                 {"build_cpu_ms_p50", Percentile(build_cpu_ms, 0.5)},
                 {"build_cpu_ms_max", Percentile(build_cpu_ms, 1.0)},
                 {"history_ms_p50", Percentile(history_ms, 0.5)},
                 {"history_ms_max", Percentile(history_ms, 1.0)}};
  if (o_.world_hold > 0) {
    std::fprintf(stderr, "hub_sim: world page at %s/world for %.0f s\n", base_url_.c_str(),
                 o_.world_hold);
    RunUntil([] { return false; }, o_.world_hold);
  }
}

void Sim::StartRequest() {
  if (sent_ >= o_.requests) return;
  sent_ += 1;
  // A model some node holds (one of a random node's): popular models get more requests.
  const SimNode* holder = &nodes_[rng_() % nodes_.size()];
  for (int tries = 0; tries < 100 && holder->state != SimNode::State::kReady; ++tries) {
    holder = &nodes_[rng_() % nodes_.size()];
  }
  const std::string& model =
      catalogue_[static_cast<size_t>(holder->models[rng_() % holder->models.size()])].name;
  net::ClientRequest req;
  req.method = "POST";
  req.url = completions_url_;
  req.headers = {{"Authorization", std::string("Bearer ") + kApiKey},
                 {"Content-Type", "application/json"}};
  req.body = json{{"model", model}, {"prompt", "Hello from the simulator"}, {"max_tokens", 8},
                  {"temperature", 0}, {"stream", false}}
                 .dump();
  req.timeout_s = 60;
  req.idle_timeout_s = 60;
  struct Call {
    int status = 0;
    std::string body;
    double start = 0;
  };
  auto call = std::make_shared<Call>();
  call->start = NowSeconds();
  net::StartRequest(
      io_, std::move(req), nullptr,
      [call](int status, const std::vector<std::pair<std::string, std::string>>&) {
        call->status = status;
      },
      [call](std::string_view d) { call->body.append(d); },
      [this, call](loom::Status s) {
        finished_ += 1;
        const int status = s.ok() ? call->status : -1;
        statuses_[status] += 1;
        bool good = false;
        if (status == 200) {
          json j = json::parse(call->body, nullptr, false);
          good = !j.is_discarded() && j.contains("choices") &&
                 j["choices"][0].value("text", "") == "ok";
        }
        if (good) {
          ok_ += 1;
          latency_ms_.push_back((NowSeconds() - call->start) * 1e3);
        } else if (first_bad_response_.empty()) {
          first_bad_response_ = "HTTP " + std::to_string(status) + " " +
                                (s.ok() ? call->body.substr(0, 300) : s.ToString());
        }
        StartRequest();
      });
}

void Sim::Placement() {
  StartPerf("placement");
  const double cpu0 = ProcCpuSeconds(g_hub_pid);
  const double t0 = NowSeconds();
  for (int c = 0; c < o_.clients; ++c) StartRequest();
  RunUntil([&] { return finished_ >= o_.requests; }, 600);
  const double wall = NowSeconds() - t0;
  const double cpu = ProcCpuSeconds(g_hub_pid) - cpu0;
  StopPerf();
  std::vector<double> place_us;
  int64_t fleet_min = -1, fleet_max = -1, placed = 0;
  std::vector<double> holders;
  if (auto d = GetJson("/v1/admin/decisions")) {
    for (const json& rec : (*d)["decisions"]) {
      place_us.push_back(rec.value("place_us", 0.0));
      const int64_t fleet = rec.value("fleet_size", int64_t{0});
      fleet_min = fleet_min < 0 ? fleet : std::min(fleet_min, fleet);
      fleet_max = std::max(fleet_max, fleet);
      placed += rec.value("placed", false);
      holders.push_back(rec.value("holders", 0.0));
    }
  }
  json statuses = json::object();
  for (const auto& [code, count] : statuses_) statuses[std::to_string(code)] = count;
  r_["placement"] = {
      {"requests", o_.requests}, {"clients", o_.clients}, {"ok", ok_}, {"statuses", statuses},
      {"first_bad_response", first_bad_response_}, {"seconds", wall},
      {"requests_per_s", finished_ / wall},
      {"latency_ms_p50", Percentile(latency_ms_, 0.5)},
      {"latency_ms_p99", Percentile(latency_ms_, 0.99)},
      {"latency_ms_max", Percentile(latency_ms_, 1.0)},
      {"hub_cpu_ms_per_request", cpu * 1e3 / std::max(finished_, 1)},
      {"decisions", static_cast<int64_t>(place_us.size())}, {"decisions_placed", placed},
      {"fleet_size_min", fleet_min}, {"fleet_size_max", fleet_max},
      {"holders_p50", Percentile(holders, 0.5)},
      {"place_us_p50", Percentile(place_us, 0.5)}, {"place_us_p99", Percentile(place_us, 0.99)},
      {"place_us_max", Percentile(place_us, 1.0)}, {"node_assigns", assigns_}};
}

void Sim::Report() {
  r_["nodes_disconnected"] = disconnected_;
  r_["node_errors"] = errors_;
  r_["first_node_error"] = first_error_;
  r_["cancels"] = cancels_;
  r_["load_average"] = LoadAverage();
  if (o_.json) {
    std::printf("%s\n", r_.dump(1).c_str());
    return;
  }
  const json& g = r_["registration"];
  const json& h = r_["ingest"];
  const json& p = r_["placement"];
  const json& m = r_["memory"];
  auto f = [](const json& v, const char* fmt) {
    char b[64];
    std::snprintf(b, sizeof(b), fmt, v.get<double>());
    return std::string(b);
  };
  std::printf("\n| hub_sim, %d nodes | value |\n|---|---|\n", o_.nodes);
  std::printf("| registration: nodes ready / failed | %d / %d |\n", g["ready"].get<int>(),
              g["failed"].get<int>());
  std::printf("| registration of all nodes | %s s (%s nodes/s) |\n",
              f(g["seconds"], "%.2f").c_str(), f(g["per_second"], "%.0f").c_str());
  std::printf("| handshake (dial to welcome) p50 / p99 | %s / %s ms |\n",
              f(g["handshake_ms_p50"], "%.1f").c_str(), f(g["handshake_ms_p99"], "%.1f").c_str());
  std::printf("| hub CPU per registration | %s us |\n", f(g["hub_cpu_us_per_node"], "%.0f").c_str());
  std::printf("| heartbeats sent (in %s s, %lld rounds) | %lld = %s frames/s |\n",
              f(h["seconds_until_read"], "%.2f").c_str(),
              static_cast<long long>(h["rounds"].get<int64_t>()),
              static_cast<long long>(h["frames"].get<int64_t>()),
              f(h["frames_per_s"], "%.0f").c_str());
  std::printf("| hub CPU over the window (share of a core) | %s s (%s) |\n",
              f(h["hub_cpu_s"], "%.2f").c_str(), f(h["hub_cpu_share"], "%.2f").c_str());
  std::printf("| **heartbeat frames per hub CPU-second** | **%s** |\n",
              f(h["frames_per_hub_cpu_s"], "%.0f").c_str());
  std::printf("| hub idle CPU with the fleet connected (share of a core) | %s |\n",
              f(h["hub_idle_cpu_share"], "%.3f").c_str());
  std::printf("| simulator CPU over the window | %s s |\n", f(h["sim_cpu_s"], "%.2f").c_str());
  std::printf("| nodes whose last heartbeat the hub holds | %lld / %lld |\n",
              static_cast<long long>(h["nodes_with_last_heartbeat"].get<int64_t>()),
              static_cast<long long>(h["nodes_in_status"].get<int64_t>()));
  std::printf("| heartbeat_age_s p50 / max after the window | %s / %s |\n",
              f(h["heartbeat_age_s_p50"], "%.2f").c_str(),
              f(h["heartbeat_age_s_max"], "%.2f").c_str());
  std::printf("| GET /v1/admin/status at this size | %s ms, %s MB |\n",
              f(h["status_ms"], "%.0f").c_str(),
              f(json(h["status_bytes"].get<double>() / 1e6), "%.1f").c_str());
  std::printf("| requests ok / sent (%d clients) | %d / %d |\n", o_.clients, p["ok"].get<int>(),
              o_.requests);
  std::printf("| request latency p50 / p99 / max | %s / %s / %s ms |\n",
              f(p["latency_ms_p50"], "%.2f").c_str(), f(p["latency_ms_p99"], "%.2f").c_str(),
              f(p["latency_ms_max"], "%.2f").c_str());
  std::printf("| requests/s, hub CPU per request | %s, %s ms |\n",
              f(p["requests_per_s"], "%.0f").c_str(),
              f(p["hub_cpu_ms_per_request"], "%.2f").c_str());
  std::printf("| **place_us p50 / p99 / max** (last %lld decisions, fleet %lld) | **%s / %s** / %s us |\n",
              static_cast<long long>(p["decisions"].get<int64_t>()),
              static_cast<long long>(p["fleet_size_max"].get<int64_t>()),
              f(p["place_us_p50"], "%.0f").c_str(), f(p["place_us_p99"], "%.0f").c_str(),
              f(p["place_us_max"], "%.0f").c_str());
  std::printf("| hub RSS before / after registration | %s / %s MB |\n",
              f(m["rss_before_mb"], "%.1f").c_str(), f(m["rss_after_mb"], "%.1f").c_str());
  std::printf("| **hub memory per node** | **%s KB** |\n", f(m["per_node_kb"], "%.1f").c_str());
  const json& w = r_["world"];
  std::printf("| GET /world.json: machines (located), size | %lld (%lld), %s MB |\n",
              static_cast<long long>(w["machines"].get<int64_t>()),
              static_cast<long long>(w["located"].get<int64_t>()),
              f(json(static_cast<double>(w["bytes"].get<int64_t>()) / 1e6), "%.1f").c_str());
  std::printf("| **world snapshot build p50 / max** (%lld runs) | **%s** / %s ms |\n",
              static_cast<long long>(w["runs"].get<int64_t>()),
              f(w["build_ms_p50"], "%.1f").c_str(), f(w["build_ms_max"], "%.1f").c_str());
  std::printf("| world snapshot build, CPU time of the hub's thread p50 / max | %s / %s ms |\n",
              f(w["build_cpu_ms_p50"], "%.1f").c_str(), f(w["build_cpu_ms_max"], "%.1f").c_str());
  std::printf("| world history refresh from the store (every 5-60 s) p50 / max | %s / %s ms |\n",
              f(w["history_ms_p50"], "%.1f").c_str(), f(w["history_ms_max"], "%.1f").c_str());
  std::printf("| GET /world.json (rebuild + transfer) p50 / max | %s / %s ms |\n",
              f(w["fetch_ms_p50"], "%.1f").c_str(), f(w["fetch_ms_max"], "%.1f").c_str());
  std::printf("| load average at the end | %s |\n", r_["load_average"].get<std::string>().c_str());
  if (!g["first_failure"].get<std::string>().empty()) {
    std::printf("\nfirst failure: %s\n", g["first_failure"].get<std::string>().c_str());
  }
  if (!p["first_bad_response"].get<std::string>().empty()) {
    std::printf("first bad response: %s\n", p["first_bad_response"].get<std::string>().c_str());
  }
  if (!first_error_.empty()) std::printf("first error frame: %s\n", first_error_.c_str());
  if (disconnected_ > 0) std::printf("nodes disconnected during the run: %d\n", disconnected_);
}

int Sim::Run() {
  // Every node is a file descriptor here and at the hub.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  const int64_t fd_room = static_cast<int64_t>(files.rlim_cur) - 200;
  if (o_.nodes > fd_room) {
    std::fprintf(stderr,
                 "hub_sim: RLIMIT_NOFILE's hard limit is %llu: each of the simulator and the hub "
                 "needs one descriptor per node plus ~200; running %lld nodes instead of %d\n",
                 static_cast<unsigned long long>(files.rlim_max), static_cast<long long>(fd_room),
                 o_.nodes);
    o_.nodes = static_cast<int>(fd_room);
  }
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/loom-hub-sim-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) Die("mkdtemp");
  tmp_ = pattern;
  const std::string db = tmp_ + "/hub.db";
  if (o_.phase == "economy") return Economy(db);

  double t = NowSeconds();
  MakeCatalogue();
  MakeFleet();
  const double keys_s = NowSeconds() - t;
  t = NowSeconds();
  Enrol(db);
  const double enrol_s = NowSeconds() - t;
  std::fprintf(stderr, "hub_sim: %d keys in %.2f s, enrolled in the store in %.2f s (%s)\n",
               o_.nodes, keys_s, enrol_s, db.c_str());
  r_["setup"] = {{"keys_s", keys_s}, {"enrol_s", enrol_s}, {"load_average_start", LoadAverage()}};

  StartHub(db);
  std::fprintf(stderr, "hub_sim: hub pid %d on port %d (log %s/hub.log)\n", g_hub_pid, port_,
               tmp_.c_str());
  auto guard = asio::make_work_guard(io_);
  RunUntil([] { return false; }, 0.3);
  Keepalive();

  Register();
  if (ready_ == 0) Die("no node registered: " + first_failure_);
  std::fprintf(stderr, "hub_sim: heartbeat ingest for %.0f s...\n", o_.seconds);
  Ingest();
  std::fprintf(stderr, "hub_sim: %d requests from %d clients...\n", o_.requests, o_.clients);
  Placement();
  std::fprintf(stderr, "hub_sim: the world page...\n");
  World();
  Report();

  keepalive_.cancel();
  StopChild(&g_hub_pid, SIGTERM, 20);
  if (o_.keep) {
    std::fprintf(stderr, "hub_sim: kept %s\n", tmp_.c_str());
  } else {
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
  }
  return 0;
}

namespace {

std::string DefaultLoom(const char* argv0) {
  if (const char* env = std::getenv("LOOM_BIN"); env && *env) return env;
  // This binary is build/bench/hub_sim; loom is build/src/loom/cli/loom.
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) self = argv0;
  return (self.parent_path().parent_path() / "src/loom/cli/loom").string();
}

}  // namespace
}  // namespace hub_sim

int main(int argc, char** argv) {
  using hub_sim::Die;
  hub_sim::Options o;
  o.loom = hub_sim::DefaultLoom(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--nodes") o.nodes = std::atoi(next().c_str());
    else if (a == "--requests") o.requests = std::atoi(next().c_str());
    else if (a == "--seconds") o.seconds = std::atof(next().c_str());
    else if (a == "--loom") o.loom = next();
    else if (a == "--clients") o.clients = std::atoi(next().c_str());
    else if (a == "--dials") o.dials = std::atoi(next().c_str());
    else if (a == "--seed") o.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--perf") o.perf = next();
    else if (a == "--keep") o.keep = true;
    else if (a == "--json") o.json = true;
    else if (a == "--world-runs") o.world_runs = std::atoi(next().c_str());
    else if (a == "--world-hold") o.world_hold = std::atof(next().c_str());
    else if (a == "--phase") o.phase = next();
    else if (a == "--reserve-share") o.reserve_share = std::atof(next().c_str());
    else if (a == "--cheat-share") o.cheat_share = std::atof(next().c_str());
    else if (a == "--die-share") o.die_share = std::atof(next().c_str());
    else if (a == "--established") o.established = true;
    else Die("unknown argument " + a + " (see the header of bench/hub_sim.cc)");
  }
  if (!o.phase.empty() && o.phase != "economy") Die("--phase is economy (or absent)");
  if (o.nodes < 1 || o.requests < 0 || o.seconds <= 0 || o.clients < 1 || o.dials < 1) {
    Die("--nodes, --clients and --dials must be >= 1, --seconds > 0, --requests >= 0");
  }
  if (::access(o.loom.c_str(), X_OK) != 0) Die("no loom binary at " + o.loom + " (give --loom)");
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGINT, hub_sim::OnSignal);
  std::signal(SIGTERM, hub_sim::OnSignal);
  std::atexit([] { hub_sim::KillChildrenNow(0); });
  hub_sim::Sim sim(std::move(o));
  return sim.Run();
}
