// `loom cluster join` (the daemon of a self-forming pod) and `loom cluster status` (its members,
// the measured link matrix, and the plan a model would get).  docs/cluster.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "loom/cli/cluster_common.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/cluster/cost_model.h"
#include "loom/cluster/daemon.h"
#include "loom/cluster/machine.h"
#include "loom/comm/config.h"

namespace loom::cli {
namespace {

using json = nlohmann::json;

struct JoinOptions {
  std::string secret, secret_file;
  std::vector<std::string> peers;
  std::string bind = "0.0.0.0";
  int port = cluster::kDefaultPort;
  bool no_multicast = false;
  std::string group = cluster::kDefaultMulticastGroup;
  int multicast_port = cluster::kDefaultMulticastPort;
  std::string control;
  double timeout_s = 2.5;
  bool no_probe = false;
  bool quiet = false;
  std::string memory;  // offered memory, e.g. "64G"; "" = what is available
  std::string name;    // shown to people; "" = the host name
};

StatusOr<std::string> ReadSecret(const std::string& secret, const std::string& file) {
  if (!secret.empty() && !file.empty()) {
    return InvalidArgumentError("give --secret or --secret-file, not both");
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return NotFoundError("cannot read the secret file ", file);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) return InvalidArgumentError("the secret file ", file, " is empty");
    return line;
  }
  if (!secret.empty()) return secret;
  if (const char* env = std::getenv("LOOM_CLUSTER_SECRET"); env != nullptr && *env) {
    return std::string(env);
  }
  return InvalidArgumentError(
      "a shared secret is required: --secret S, --secret-file F or $LOOM_CLUSTER_SECRET "
      "(the same on every machine; it authenticates members)");
}

int Join(const JoinOptions& o) {
  auto secret = ReadSecret(o.secret, o.secret_file);
  if (!secret.ok()) return Fail("cluster join", secret.status());
  // Probes use the tcp backend's options from the environment (LOOM_LINK_DELAY_US, ...), so the
  // links are measured as the pod's ranks will use them.
  auto env = comm::GroupConfigFromEnvironment();
  if (!env.ok()) return Fail("cluster join", env.status());
  cluster::DaemonOptions d;
  d.secret = *secret;
  d.peers = o.peers;
  d.bind_host = o.bind;
  d.port = o.port;
  d.multicast = !o.no_multicast;
  d.multicast_group = o.group;
  d.multicast_port = o.multicast_port;
  d.control_path = o.control.empty() ? cluster::DefaultControlPath() : o.control;
  d.member_timeout_s = o.timeout_s;
  d.heartbeat_s = std::min(0.5, o.timeout_s / 4);
  d.probe_links = !o.no_probe;
  d.probe_options = env->options;
  if (!o.quiet) {
    d.log = [](const std::string& line) {
      std::fprintf(stderr, "cluster: %s\n", line.c_str());
      std::fflush(stderr);
    };
  }
  int64_t max_memory = 0;
  if (!o.memory.empty()) {
    auto bytes = comm::ParseByteSize(o.memory);
    if (!bytes.ok()) return Fail("cluster join", bytes.status().WithContext("--memory"));
    max_memory = *bytes;
  }
  if (!o.quiet) std::fprintf(stderr, "cluster: measuring this machine...\n");
  cluster::Facts facts = cluster::MeasureMachine(max_memory);
  if (!o.name.empty()) facts.name = o.name;
  boost::asio::io_context io;
  auto daemon = cluster::Daemon::Create(io, std::move(d), std::move(facts));
  if (!daemon.ok()) return Fail("cluster join", daemon.status());
  boost::asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) (*daemon)->Stop();
  });
  io.run();
  return 0;
}

struct StatusOptions {
  std::string control;
  bool json = false;
  std::string model;
  int wait_members = 0;
  double wait_s = 30;
  PlanSpeeds speeds;
};

std::string Gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

}  // namespace

bool Settled(const json& v) {
  const size_t n = v["members"].size();
  return v["fastest"].size() == n * (n - 1) / 2 && !v["probing"].get<bool>() &&
         v["probes_pending"].get<int64_t>() == 0;
}

std::vector<json> MembersInRankOrder(const json& view) {
  std::vector<std::pair<double, json>> others;
  const std::string self = view["id"];
  std::vector<json> out;
  for (const json& m : view["members"]) {
    if (m["state"] == "self") {
      out.push_back(m);
      continue;
    }
    double best = 0;
    for (const json& l : view["fastest"]) {
      if ((l["a"] == self && l["b"] == m["id"]) || (l["b"] == self && l["a"] == m["id"])) {
        best = l["gbytes_per_s"].get<double>();
      }
    }
    others.emplace_back(best, m);
  }
  std::stable_sort(others.begin(), others.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (auto& [bw, m] : others) out.push_back(std::move(m));
  return out;
}

// The cost model's prediction for this pod: ranks at the slowest member's speed, each with its
// member's memory (stages' layers in proportion to it), joined by the slowest of the fastest
// links.  The decode speed is measured here with the model's kernels and scaled by the slowest
// member's measured memory bandwidth.
StatusOr<json> PlanFor(const std::string& model_path, const json& v, const PlanSpeeds& o,
                       bool quiet) {
  LOOM_ASSIGN_OR_RETURN(auto file, model::OpenModel(model_path));
  const std::vector<json> members = MembersInRankOrder(v);
  // Members on one host (one boot id) share its memory bus and its available memory.
  struct Host {
    int members = 0;
    uint64_t available = 0, offered = 0;
  };
  std::map<std::string, Host> hosts;
  double min_bw = 0, self_bw = 0;
  for (const json& m : members) {
    if (!m.contains("facts")) return UnavailableError("member ", m["name"], " sent no facts yet");
    const json& f = m["facts"];
    Host& h = hosts[f["boot_id"].get<std::string>()];
    ++h.members;
    h.available = std::max(h.available, f["memory_available"].get<uint64_t>());
    h.offered += f["memory_offered"].get<uint64_t>();
    const double bw = f["read_gbytes_per_s"].get<double>();
    min_bw = min_bw == 0 ? bw : std::min(min_bw, bw);
    if (m["state"] == "self") self_bw = bw;
  }
  int ranks_on_host = 1;
  for (const auto& [boot, h] : hosts) ranks_on_host = std::max(ranks_on_host, h.members);
  // What each member lends, scaled down where the members of a host offer more than it has.
  std::vector<int64_t> memory;
  uint64_t min_mem = 0;
  for (const json& m : members) {
    const Host& h = hosts[m["facts"]["boot_id"].get<std::string>()];
    const auto offered = m["facts"]["memory_offered"].get<uint64_t>();
    const uint64_t each =
        h.offered <= h.available
            ? offered
            : static_cast<uint64_t>(static_cast<double>(offered) *
                                    static_cast<double>(h.available) / static_cast<double>(h.offered));
    memory.push_back(static_cast<int64_t>(each));
    min_mem = min_mem == 0 ? each : std::min(min_mem, each);
  }
  cluster::CostInputs in;
  in.ranks = static_cast<int>(members.size());
  if (o.decode_gbs > 0 && o.prompt_gflops > 0) {
    in.rank.decode_bytes_per_s = in.rank.decode_bytes_per_s_shared = o.decode_gbs * 1e9;
    in.rank.prompt_flops = o.prompt_gflops * 1e9;
  } else {
    if (!quiet) std::fprintf(stderr, "cluster: measuring this machine with the model...\n");
    LOOM_ASSIGN_OR_RETURN(in.rank, cluster::Calibrate(*file, ranks_on_host));
    if (self_bw > 0 && min_bw > 0 && min_bw < self_bw) {
      in.rank.decode_bytes_per_s *= min_bw / self_bw;
      in.rank.decode_bytes_per_s_shared *= min_bw / self_bw;
    }
    if (o.decode_gbs > 0) {
      in.rank.decode_bytes_per_s = in.rank.decode_bytes_per_s_shared = o.decode_gbs * 1e9;
    }
    if (o.prompt_gflops > 0) in.rank.prompt_flops = o.prompt_gflops * 1e9;
  }
  in.rank.memory_bytes = static_cast<int64_t>(min_mem);
  in.rank_memory = memory;
  for (const json& l : v["fastest"]) {
    in.link.latency_s = std::max(in.link.latency_s, l["latency_us"].get<double>() * 1e-6);
    const double bps = l["gbytes_per_s"].get<double>() * 1e9;
    in.link.bytes_per_s = in.link.bytes_per_s == 0 ? bps : std::min(in.link.bytes_per_s, bps);
  }
  const auto all = cluster::PredictAll(*file, in);
  const cluster::Prediction* best = cluster::PickBest(all);
  json order = json::array();
  for (size_t r = 0; r < members.size(); ++r) {
    order.push_back({{"id", members[r]["id"]}, {"name", members[r]["name"]}, {"memory_bytes", memory[r]}});
  }
  json out = {{"model", model_path},
              {"ranks", in.ranks},
              {"members", order},
              {"ranks_per_host", ranks_on_host},
              {"rank", {{"memory_bytes", in.rank.memory_bytes},
                        {"decode_bytes_per_s", in.rank.decode_bytes_per_s},
                        {"decode_bytes_per_s_shared", in.rank.decode_bytes_per_s_shared},
                        {"prompt_flops", in.rank.prompt_flops}}},
              {"link", {{"latency_us", in.link.latency_s * 1e6},
                        {"gbytes_per_s", in.link.bytes_per_s / 1e9}}},
              {"plans", json::array()}};
  for (const auto& p : all) {
    json e = {{"tp", p.tp}, {"ep", p.ep}, {"pp", p.pp}, {"feasible", p.feasible}};
    if (p.feasible) {
      e["decode_tokens_per_s"] = p.decode_tokens_per_s;
      e["prompt_tokens_per_s"] = p.prompt_tokens_per_s;
      e["layout"] = p.plan.Describe();
    } else {
      e["why_not"] = p.why_not;
    }
    out["plans"].push_back(e);
  }
  if (best != nullptr) {
    json ids = json::array(), layers = json::array();
    for (int r = 0; r < best->ranks(); ++r) ids.push_back(members[r]["id"]);
    for (int st = 0; st < best->pp; ++st) {
      const model::ShardSpec& sh = best->plan.rank(st * best->group()).shard;
      layers.push_back(sh.layer_end - sh.layer_begin);
    }
    out["pick"] = {{"tp", best->tp},
                   {"ep", best->ep},
                   {"pp", best->pp},
                   {"members", ids},
                   {"stage_layers", layers},
                   {"decode_tokens_per_s", best->decode_tokens_per_s},
                   {"prompt_tokens_per_s", best->prompt_tokens_per_s}};
  }
  return out;
}

StatusOr<json> WaitForView(const std::string& path, int wait_members, double wait_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  auto v = cluster::QueryDaemon(path, 5);
  // While waiting, a daemon that is still starting (no socket yet) is waited for too.
  while (!v.ok() && wait_members > 0 && v.status().code() == StatusCode::kUnavailable &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    v = cluster::QueryDaemon(path, 5);
  }
  if (!v.ok() || wait_members <= 0) return v;
  while (!((*v)["members"].size() >= static_cast<size_t>(wait_members) && Settled(*v))) {
    if (std::chrono::steady_clock::now() > end) {
      return DeadlineExceededError("waited ", wait_s, " s for ", wait_members,
                                   " members with measured links; have ", (*v)["members"].size(),
                                   " members, ", (*v)["fastest"].size(), " links");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    v = cluster::QueryDaemon(path, 5);
    if (!v.ok()) return v;
  }
  return v;
}

StatusOr<json> WaitForSettledView(const std::string& path, double wait_s) {
  LOOM_ASSIGN_OR_RETURN(json view, WaitForView(path, 1, wait_s));
  if (Settled(view)) return view;
  std::fprintf(stderr, "loom cluster: waiting for the links to be measured...\n");
  return WaitForView(path, static_cast<int>(view["members"].size()), wait_s);
}

std::string PodChoice::Describe() const {
  return StrCat(ep > 1 ? "ep " : "tp ", tp * ep, " x pp ", pp);
}

std::vector<std::string> PodChoice::SplitArgs() const {
  std::vector<std::string> args = {ep > 1 ? "--ep" : "--tp", std::to_string(tp * ep), "--pp",
                                   std::to_string(pp)};
  if (pp > 1 && !stage_layers.empty()) args.insert(args.end(), {"--stage-layers", stage_layers});
  return args;
}

StatusOr<PodChoice> ChoosePod(const std::string& model, const json& view, int tp, int ep, int pp,
                              const PlanSpeeds& speeds) {
  PodChoice c;
  if (ep > 0) tp = 1;  // an expert-parallel group instead of a tensor-parallel one
  c.tp = tp == 0 && pp > 0 ? 1 : tp;
  c.ep = ep > 0 ? ep : 1;
  c.pp = pp == 0 && tp > 0 ? 1 : pp;
  const std::vector<json> order = MembersInRankOrder(view);
  if (c.tp == 0) {
    LOOM_ASSIGN_OR_RETURN(json plan, PlanFor(model, view, speeds, /*quiet=*/false));
    if (!plan.contains("pick")) {
      return ResourceExhaustedError("no plan fits ", model, " on the ", order.size(),
                                    " members up (see `loom cluster status -m`)");
    }
    const json& pick = plan["pick"];
    c.tp = pick["tp"];
    c.ep = pick.value("ep", 1);
    c.pp = pick["pp"];
    c.predicted = pick["decode_tokens_per_s"];
    for (const json& id : pick["members"]) c.members.push_back(id);
    for (const json& n : pick["stage_layers"]) {
      c.stage_layers += (c.stage_layers.empty() ? "" : ",") + std::to_string(n.get<int64_t>());
    }
    c.measured.decode_gbs = plan["rank"]["decode_bytes_per_s"].get<double>() / 1e9;
    c.measured.prompt_gflops = plan["rank"]["prompt_flops"].get<double>() / 1e9;
  } else {
    if (c.ranks() > static_cast<int>(order.size())) {
      return InvalidArgumentError(c.ep > 1 ? "ep " : "tp ", c.tp * c.ep, " x pp ", c.pp,
                                  " needs ", c.ranks(), " members; the cluster has ",
                                  order.size());
    }
    for (int r = 0; r < c.ranks(); ++r) c.members.push_back(order[r]["id"]);
  }
  for (const std::string& id : c.members) {
    for (const json& m : order) {
      if (m["id"] == id) c.names += (c.names.empty() ? "" : ", ") + m["name"].get<std::string>();
    }
  }
  return c;
}

namespace {

void PrintText(const json& v, const json* plan) {
  const json& members = v["members"];
  std::printf("cluster of %zu member%s (this is %s, %s)\n", members.size(),
              members.size() == 1 ? "" : "s", v["name"].get<std::string>().c_str(),
              v["id"].get<std::string>().substr(0, 8).c_str());
  std::printf("  %-8s  %-16s %-15s %13s %5s %-9s %9s\n", "id", "name", "address",
              "lent/all GiB", "cores", "simd", "read GB/s");
  for (const json& m : members) {
    std::string mem = "-", simd = "-", bw = "-", cores = "-";
    if (m.contains("facts")) {
      const json& f = m["facts"];
      mem = Gib(f["memory_offered"]) + "/" + Gib(f["memory_total"]);
      simd = f["simd"];
      char b[32];
      std::snprintf(b, sizeof(b), "%.1f", f["read_gbytes_per_s"].get<double>());
      bw = b;
      cores = std::to_string(f["cores"].get<int>());
    }
    const std::string addr = m["state"] == "self" ? "(this)" : m["address"].get<std::string>();
    std::printf("  %-8s  %-16s %-15s %13s %5s %-9s %9s\n",
                m["id"].get<std::string>().substr(0, 8).c_str(),
                m["name"].get<std::string>().c_str(), addr.c_str(), mem.c_str(), cores.c_str(),
                simd.c_str(), bw.c_str());
  }
  if (!v["links"].empty()) {
    std::printf("links (one-way latency of 64-byte messages, bandwidth of 4 MiB ones):\n");
    for (const json& l : v["links"]) {
      bool fastest = false;
      for (const json& f : v["fastest"]) fastest = fastest || f == l;
      std::printf("  %-12s <-> %-12s %-10s %15s -> %-15s %8.0f us %8.2f GB/s%s\n",
                  l["a_name"].get<std::string>().c_str(), l["b_name"].get<std::string>().c_str(),
                  l["interface"].get<std::string>().c_str(), l["a_host"].get<std::string>().c_str(),
                  l["b_host"].get<std::string>().c_str(), l["latency_us"].get<double>(),
                  l["gbytes_per_s"].get<double>(), fastest ? "  (fastest)" : "");
    }
  }
  if (v["probing"].get<bool>() || v["probes_pending"].get<int64_t>() > 0) {
    std::printf("  (measuring links: %lld pending)\n",
                static_cast<long long>(v["probes_pending"].get<int64_t>()));
  }
  for (const json& d : v["departed"]) {
    std::printf("left: %s (%s) %.1f s ago: %s\n", d["name"].get<std::string>().c_str(),
                d["id"].get<std::string>().substr(0, 8).c_str(), d["left_s_ago"].get<double>(),
                d["why"].get<std::string>().c_str());
  }
  for (const auto& [peer, why] : v["refused_by"].items()) {
    std::printf("refused by %s: %s\n", peer.c_str(), why.get<std::string>().c_str());
  }
  if (plan != nullptr) {
    std::printf("\nplans for %s on %d ranks (%d per host), link %.0f us, %.2f GB/s:\n",
                (*plan)["model"].get<std::string>().c_str(), (*plan)["ranks"].get<int>(),
                (*plan)["ranks_per_host"].get<int>(),
                (*plan)["link"]["latency_us"].get<double>(),
                (*plan)["link"]["gbytes_per_s"].get<double>());
    for (const json& p : (*plan)["plans"]) {
      const std::string name =
          cluster::SplitName(p["tp"].get<int>(), p.value("ep", 1), p["pp"].get<int>());
      const bool pick = plan->contains("pick") && (*plan)["pick"]["tp"] == p["tp"] &&
                        (*plan)["pick"].value("ep", 1) == p.value("ep", 1) &&
                        (*plan)["pick"]["pp"] == p["pp"];
      if (!p["feasible"].get<bool>()) {
        std::printf("  %-9s %10s  %s\n", name.c_str(), "-", p["why_not"].get<std::string>().c_str());
      } else {
        std::printf("  %-9s %7.1f tok/s generation, %7.1f tok/s prompt  %s%s\n", name.c_str(),
                    p["decode_tokens_per_s"].get<double>(), p["prompt_tokens_per_s"].get<double>(),
                    p["layout"].get<std::string>().c_str(), pick ? "   <- pick" : "");
      }
    }
  }
}

int ClusterStatus(const StatusOptions& o) {
  const std::string path = o.control.empty() ? cluster::DefaultControlPath() : o.control;
  auto v = WaitForView(path, o.wait_members, o.wait_s);
  if (!v.ok()) return Fail("cluster status", v.status());
  json plan;
  if (!o.model.empty()) {
    auto p = PlanFor(o.model, *v, o.speeds, o.json);
    if (!p.ok()) return Fail("cluster status", p.status());
    plan = std::move(*p);
    (*v)["plan"] = plan;
  }
  if (o.json) {
    std::printf("%s\n", v->dump().c_str());
  } else {
    PrintText(*v, o.model.empty() ? nullptr : &plan);
  }
  return 0;
}

}  // namespace

void AddClusterCommand(CLI::App& app, Action* action) {
  CLI::App* cluster = app.add_subcommand(
      "cluster", "Pods that form themselves: machines find each other and measure their links");
  cluster->require_subcommand(1);

  auto j = std::make_shared<JoinOptions>();
  CLI::App* join = cluster->add_subcommand(
      "join",
      "Run this machine's cluster daemon: announce it on the local network (UDP multicast), "
      "dial --peer addresses, authenticate members with the shared secret, measure every link");
  join->add_option("--secret", j->secret, "The cluster's shared secret (or $LOOM_CLUSTER_SECRET)");
  join->add_option("--secret-file", j->secret_file, "Read the secret from the file's first line");
  join->add_option("--peer", j->peers,
                   "HOST:PORT of a member to dial (repeatable; for networks without multicast)");
  join->add_option("--bind", j->bind, "Address to listen on")->capture_default_str();
  join->add_option("--port", j->port, "Control port (TCP)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  join->add_flag("--no-multicast", j->no_multicast, "Do not announce or listen by multicast");
  join->add_option("--multicast-group", j->group, "IPv4 multicast group of announcements")
      ->capture_default_str();
  join->add_option("--multicast-port", j->multicast_port, "UDP port of announcements")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  join->add_option("--control", j->control,
                   "Unix socket `loom cluster status` asks (default: $LOOM_CLUSTER_SOCKET, "
                   "$XDG_RUNTIME_DIR/loom-cluster.sock or /tmp/loom-cluster-UID.sock)");
  join->add_option("--member-timeout", j->timeout_s, "Seconds of silence after which a member "
                   "has left")
      ->capture_default_str()
      ->check(CLI::Range(0.2, 600.0));
  join->add_option("--name", j->name, "This member's name in status and logs (default: host name)")
      ->check([](const std::string& v) {
        return v.empty() || v.size() > 64 ? std::string("1 to 64 characters") : std::string();
      });
  join->add_option("--memory", j->memory,
                   "Memory this machine lends the pod, e.g. 48G (default: all that is available)");
  join->add_flag("--no-probe", j->no_probe, "Do not measure links");
  join->add_flag("-q,--quiet", j->quiet, "Log nothing");
  join->callback([j, action] { *action = [j] { return Join(*j); }; });

  auto s = std::make_shared<StatusOptions>();
  CLI::App* status = cluster->add_subcommand(
      "status", "The members, their machines, the measured link matrix, and a model's plan");
  status->add_option("--control", s->control, "The daemon's Unix socket (as for join)");
  status->add_flag("--json", s->json, "Print one JSON object (the daemon's view, version 1)");
  status->add_option("-m,--model", s->model,
                     "Also predict every split of this model over the members (cost model)");
  status->add_option("--decode-gbs", s->speeds.decode_gbs,
                     "With -m: weight GB/s of one rank's decode (default: measured here)");
  status->add_option("--prompt-gflops", s->speeds.prompt_gflops,
                     "With -m: GFLOP/s of one rank's batched products (default: measured here)");
  status->add_option("--wait-members", s->wait_members,
                     "First wait until this many members are up and their links measured")
      ->check(CLI::Range(1, 64));
  status->add_option("--wait", s->wait_s, "Give up waiting after this many seconds")
      ->capture_default_str();
  status->callback([s, action] { *action = [s] { return ClusterStatus(*s); }; });

  AddClusterRunCommand(*cluster, action);
  AddClusterServeCommand(*cluster, action);
}

}  // namespace loom::cli
