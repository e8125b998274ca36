// `loom node`: lend this machine to a hub (network/node), enrol it, drain it, show its status.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/net/http_client.h"
#include "loom/net/tls.h"
#include "loom/net/url.h"
#include "loom/network/ledger/credits.h"
#include "loom/network/node/agent.h"
#include "loom/network/node/node_facts.h"
#include "loom/network/protocol/identity.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;
namespace node = network::node;
using json = nlohmann::json;

int Fail(const Status& s) {
  std::fprintf(stderr, "loom node: %s\n", s.ToString().c_str());
  return 1;
}

struct NodeFlags {
  std::string dir = node::DefaultNodeDir();
  std::string hub;
  std::string ca_file;
  std::string models;
  std::string max_memory;
  std::string schedule;
  std::string reserve, reserve_hours;
  std::string location;
  double busy = 0;
  int ranks = 0;
  double chunk_ms = 10;
  node::ServeConfig serve;
};

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

int RunNode(const NodeFlags& f) {
  node::AgentOptions o;
  o.dir = f.dir;
  o.hub_url = f.hub;
  o.ca_file = f.ca_file;
  o.models = SplitCommas(f.models);
  o.schedule = f.schedule;
  o.reserve = f.reserve;
  o.reserve_hours = f.reserve_hours;
  if (!f.location.empty()) {
    auto location = node::ParseLocation(f.location);
    if (!location.ok()) return Fail(location.status());
    o.location = *location;
  }
  o.busy_threshold = f.busy;
  o.serve = f.serve;
  o.ranks = f.ranks;
  o.chunk_interval_s = f.chunk_ms / 1000;
  if (!f.max_memory.empty()) {
    auto bytes = node::ParseBytes(f.max_memory);
    if (!bytes.ok()) return Fail(bytes.status().WithContext("--max-memory"));
    o.max_memory_bytes = *bytes;
  }
  std::error_code ec;
  o.serve.loom_binary = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Fail(InternalError("cannot find this loom binary: ", ec.message()));
  std::signal(SIGPIPE, SIG_IGN);
  boost::asio::io_context io;
  auto agent = node::Agent::Create(io, o);
  if (!agent.ok()) return Fail(agent.status());
  {
    std::ofstream pid(f.dir + "/node.pid");
    pid << ::getpid() << "\n";
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGINT) {
          std::fprintf(stderr, "loom node: interrupted\n");
          io.stop();
          return;
        }
        std::fprintf(stderr, "loom node: draining (finishing what runs, taking nothing new)\n");
        (*agent)->Drain([&] {
          std::fprintf(stderr, "loom node: drained\n");
          io.stop();
        });
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);
  (*agent)->Start();
  std::printf("loom node: lending %s to the hub\n", f.models.c_str());
  std::fflush(stdout);
  io.run();
  agent->reset();
  fs::remove(f.dir + "/node.pid", ec);
  return 0;
}

// The hub's latest report to this operator (protocol::Standing), as the agent wrote it.
void PrintStanding(const json& status) {
  if (!status.contains("standing")) {
    std::printf("  earnings: no report from the hub yet\n");
    return;
  }
  const json& s = status["standing"];
  std::printf("  earned: %s credits pending (verifiable), %s available\n",
              network::ledger::FormatCredits(s.value("pending_micro", int64_t{0})).c_str(),
              network::ledger::FormatCredits(s.value("available_micro", int64_t{0})).c_str());
  if (!s.value("slot", "").empty()) std::printf("  reserved slot: %s\n", s.value("slot", "").c_str());
  for (const auto& e : s["recent"]) {
    const std::time_t t = static_cast<std::time_t>(e.value("at_ms", int64_t{0}) / 1000);
    std::tm utc{};
    gmtime_r(&t, &utc);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &utc);
    const bool slot = e.value("kind", "") == "slot";
    std::printf("    %s UTC  +%s  %-6s %s  %s, %lld %s\n", when,
                network::ledger::FormatCredits(e.value("micro", int64_t{0})).c_str(),
                slot ? "slot" : "tokens", e.value("ref", "").c_str(), e.value("model", "").c_str(),
                static_cast<long long>(e.value("tokens", int64_t{0})),
                slot ? "probes answered" : "tokens");
  }
  const json& idle = s["idle_reasons"];
  if (!idle.empty()) std::printf("  no work since the hub's last report:\n");
  for (const auto& r : idle) std::printf("    - %s\n", r.get<std::string>().c_str());
}

}  // namespace

void AddNodeCommand(CLI::App& app, Action* action) {
  auto f = std::make_shared<NodeFlags>();
  CLI::App* n = app.add_subcommand(
      "node", "Lend this machine's spare time to a hub (or enrol, drain, show status)");
  n->add_option("--dir", f->dir, "the node's identity, key and status")->capture_default_str();
  n->add_option("--hub", f->hub, "the hub's URL (default: the one enrolled with)");
  n->add_option("--ca-file", f->ca_file, "CA certificate(s) for a hub with a private CA");
  n->add_option("--models", f->models, "models to lend: paths or pulled ORG/NAME, comma-separated");
  n->add_option("--max-memory", f->max_memory,
                "memory to lend, e.g. 8G (default: 90% of what is available now)");
  n->add_option("--schedule", f->schedule,
                "lending hours, local time, e.g. 22:00-07:30,12:00-13:00 (default: always)");
  n->add_option("--reserve", f->reserve,
                "offer a reserved slot for this model (one of --models, by name): the node keeps "
                "it loaded, gets its requests first and earns an hourly availability credit "
                "while it answers the hub's probes (under 98% over 30 days it is lost)");
  n->add_option("--reserve-hours", f->reserve_hours,
                "the reserved slot's daily window, UTC, e.g. 08:00-20:00 (default: all day)");
  n->add_option("--location", f->location,
                "where this machine is, LAT,LON in degrees (e.g. 52.5,13.4); the hub rounds it to "
                "1 degree and shows it on its public world page (default: not shown)");
  n->add_option("--pause-when-busy", f->busy,
                "take no new work while other programs use more than this fraction of the CPU "
                "(0 = never)")
      ->capture_default_str();
  n->add_option("--parallel", f->serve.parallel, "requests at once per model")->capture_default_str();
  n->add_option("--ctx", f->serve.ctx, "context positions per request")->capture_default_str();
  n->add_option("--threads", f->serve.threads, "threads per model (0: loom serve's default)");
  n->add_option("--tp", f->serve.tp, "lend a pod: tensor-parallel local ranks")->capture_default_str();
  n->add_option("--pp", f->serve.pp, "lend a pod: pipeline stages")->capture_default_str();
  n->add_option("--chunk-ms", f->chunk_ms,
                "send a stream's tokens to the hub at most this often (the first at once; 0: "
                "every read)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  n->add_option("--ranks", f->ranks,
                "lend a pod of this many local ranks, each model split (tp x pp) as the cost "
                "model (`loom plan`) predicts fastest")
      ->excludes("--tp", "--pp");
  n->callback([n, f, action] {
    if (!n->get_subcommands().empty()) return;
    *action = [f] { return RunNode(*f); };
  });

  auto token = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  CLI::App* enroll = n->add_subcommand("enroll", "Make this node's key pair and enrol it with a hub");
  enroll->add_option("--hub", f->hub, "the hub's URL")->required();
  enroll->add_option("--token", *token, "a token from `loom hub token create`")->required();
  enroll->add_option("--name", *name, "a name for people (default: the host name)");
  enroll->add_option("--dir", f->dir, "where the identity is written")->capture_default_str();
  enroll->add_option("--ca-file", f->ca_file, "CA certificate(s) for a hub with a private CA");
  enroll->callback([f, token, name, action] {
    *action = [f, token, name] {
      std::error_code ec;
      fs::create_directories(f->dir, ec);
      fs::permissions(f->dir, fs::perms::owner_all, ec);
      auto key = network::protocol::NodeKey::Generate();
      if (!key.ok()) return Fail(key.status());
      std::string host_name = *name;
      if (host_name.empty()) {
        char buf[256] = {};
        ::gethostname(buf, sizeof(buf) - 1);
        host_name = buf;
      }
      net::ClientRequest req;
      req.method = "POST";
      std::string hub_url = f->hub;
      while (!hub_url.empty() && hub_url.back() == '/') hub_url.pop_back();
      auto u = net::ParseUrl(hub_url + "/v1/nodes/enroll");
      if (!u.ok()) return Fail(u.status());
      req.url = *u;
      req.headers = {{"Content-Type", "application/json"}};
      req.body = json{{"token", *token}, {"public_key", key->PublicKeyBase64()},
                      {"name", host_name}}.dump();
      std::shared_ptr<boost::asio::ssl::context> tls;
      if (u->tls()) {
        auto t = net::MakeClientTls(f->ca_file);
        if (!t.ok()) return Fail(t.status());
        tls = *t;
      }
      auto res = net::Fetch(req, tls);
      if (!res.ok()) return Fail(res.status());
      json j = json::parse(res->body, nullptr, false);
      if (res->status != 200 || j.is_discarded() || !j.contains("node_id")) {
        std::fprintf(stderr, "loom node enroll: the hub refused (HTTP %d): %s\n", res->status,
                     res->body.c_str());
        return 1;
      }
      Status saved = key->SavePrivatePem(f->dir + "/node_key.pem");
      if (!saved.ok()) return Fail(saved);
      node::Identity id;
      id.hub_url = hub_url;
      id.node_id = j["node_id"].get<std::string>();
      id.hub_id = j.value("hub_id", "");
      saved = node::SaveIdentity(f->dir, id);
      if (!saved.ok()) return Fail(saved);
      std::printf("enrolled as %s (identity in %s)\n", id.node_id.c_str(), f->dir.c_str());
      return 0;
    };
  });

  CLI::App* drain = n->add_subcommand(
      "drain", "Tell the running node to finish what it runs, take nothing new, and exit");
  drain->add_option("--dir", f->dir, "the node's directory")->capture_default_str();
  drain->callback([f, action] {
    *action = [f] {
      std::ifstream in(f->dir + "/node.pid");
      long pid = 0;
      if (!(in >> pid) || pid <= 0) {
        std::fprintf(stderr, "loom node drain: no node runs from %s (no node.pid)\n", f->dir.c_str());
        return 1;
      }
      if (::kill(static_cast<pid_t>(pid), SIGTERM) != 0) {
        std::fprintf(stderr, "loom node drain: node %ld is not running\n", pid);
        return 1;
      }
      std::printf("draining node (pid %ld)\n", pid);
      return 0;
    };
  });

  auto as_json = std::make_shared<bool>(false);
  CLI::App* status = n->add_subcommand("status", "What this node lends, runs and why");
  status->add_option("--dir", f->dir, "the node's directory")->capture_default_str();
  status->add_flag("--json", *as_json, "the status file as it is");
  status->callback([f, as_json, action] {
    *action = [f, as_json] {
      std::ifstream in(f->dir + "/status.json");
      std::stringstream text;
      text << in.rdbuf();
      json j = json::parse(text.str(), nullptr, false);
      if (!in || j.is_discarded()) {
        std::fprintf(stderr, "loom node status: no status in %s (is `loom node` running?)\n",
                     f->dir.c_str());
        return 1;
      }
      if (*as_json) {
        std::printf("%s", text.str().c_str());
        return 0;
      }
      std::printf("node %s -> %s: %s%s%s\n", j.value("node_id", "").c_str(),
                  j.value("hub_url", "").c_str(), j.value("connected", false) ? "connected" : "not connected",
                  j.value("draining", false) ? ", draining" : "",
                  j.value("paused", false) ? ", paused" : "");
      std::printf("  lends %.2f GB (%.2f GB free), %.1f GB/s measured\n",
                  static_cast<double>(j.value("mem_lendable_bytes", int64_t{0})) / 1e9,
                  static_cast<double>(j.value("mem_free_bytes", int64_t{0})) / 1e9,
                  j.value("mem_bandwidth_gbps", 0.0));
      for (const auto& m : j["models"]) {
        std::printf("  model %s %s\n", m.value("name", "").c_str(),
                    m.value("loaded", false) ? "loaded" : "on disk");
      }
      for (const auto& a : j["attempts"]) {
        std::printf("  running %s (%s, %lld tokens)\n", a.value("attempt_id", "").c_str(),
                    a.value("model", "").c_str(), static_cast<long long>(a.value("tokens", int64_t{0})));
      }
      PrintStanding(j);
      return 0;
    };
  });
}

}  // namespace loom::cli
