// `loom hub`: the network's coordinator (network/hub), and its administration: accounts, API
// keys and enrolment tokens straight on its store, status over its admin API.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>

#include "loom/base/clock.h"
#include "loom/cli/commands.h"
#include "loom/cluster/launch_plan.h"
#include "loom/net/http_client.h"
#include "loom/net/tls.h"
#include "loom/net/url.h"
#include "loom/network/hub/hub.h"
#include "loom/network/protocol/identity.h"
#include "loom/network/store/store.h"

namespace loom::cli {
namespace {

using json = nlohmann::json;
namespace hub = network::hub;

int Fail(const Status& s) {
  std::fprintf(stderr, "loom hub: %s\n", s.ToString().c_str());
  return 1;
}

struct HubFlags {
  std::string listen = "127.0.0.1:8443";
  std::string db = "loom-hub.db";
  std::string tls_cert, tls_key;
  std::string admin_key;
  bool insecure = false;
  std::vector<std::string> prices;
  double operator_share = 0.9;
  hub::HubOptions options;
};

bool IsLoopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int RunHub(HubFlags f) {
  const size_t colon = f.listen.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "loom hub: --listen wants HOST:PORT (got '%s')\n", f.listen.c_str());
    return 2;
  }
  f.options.host = f.listen.substr(0, colon);
  if (f.options.host.size() > 2 && f.options.host.front() == '[') {
    f.options.host = f.options.host.substr(1, f.options.host.size() - 2);
  }
  f.options.port = std::atoi(f.listen.c_str() + colon + 1);
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    std::fprintf(stderr, "loom hub: --tls-cert and --tls-key go together\n");
    return 2;
  }
  if (f.tls_cert.empty() && !IsLoopback(f.options.host) && !f.insecure) {
    std::fprintf(stderr,
                 "loom hub: refusing to listen on %s without TLS: nodes and consumers would send "
                 "keys in the clear. Give --tls-cert FILE --tls-key FILE (or --insecure on a "
                 "network you trust)\n",
                 f.options.host.c_str());
    return 2;
  }
  if (!f.tls_cert.empty()) {
    auto tls = net::MakeServerTls(f.tls_cert, f.tls_key);
    if (!tls.ok()) return Fail(tls.status());
    f.options.tls = *tls;
  }
  f.options.admin_key = f.admin_key;
  for (const std::string& p : f.prices) {
    Status added = network::ledger::AddPriceFlag(p, &f.options.pricing);
    if (!added.ok()) {
      std::fprintf(stderr, "loom hub: %s\n", added.message().c_str());
      return 2;
    }
  }
  f.options.pricing.operator_share_bp = static_cast<int32_t>(f.operator_share * 10000 + 0.5);
  auto store = network::store::OpenStore(f.db);
  if (!store.ok()) return Fail(store.status());
  std::signal(SIGPIPE, SIG_IGN);
  boost::asio::io_context io;
  auto h = hub::Hub::Start(io, f.options, std::move(*store));
  if (!h.ok()) return Fail(h.status());
  const char* scheme = f.options.tls ? "https" : "http";
  std::printf("loom hub listening on %s://%s:%d/ (store %s)\n", scheme, f.options.host.c_str(),
              (*h)->port(), f.db.c_str());
  std::fflush(stdout);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) {
    std::fprintf(stderr, "loom hub: stopping\n");
    (*h)->Stop();
    io.stop();
  });
  io.run();
  return 0;
}

StatusOr<std::unique_ptr<network::store::Store>> Open(const std::string& db) {
  return network::store::OpenStore(db);
}

void AddDbFlag(CLI::App* c, std::string* db) {
  c->add_option("--db", *db, "the hub's store: a SQLite file or postgresql://...")
      ->capture_default_str();
}

}  // namespace

void AddHubCommand(CLI::App& app, Action* action) {
  auto flags = std::make_shared<HubFlags>();
  CLI::App* h = app.add_subcommand(
      "hub", "Run the network's coordinator (placement of requests on nodes and pods behind one "
             "OpenAI API), or administer it");
  h->add_option("--listen", flags->listen, "HOST:PORT to serve consumers and nodes on")
      ->capture_default_str();
  AddDbFlag(h, &flags->db);
  h->add_option("--tls-cert", flags->tls_cert, "PEM certificate chain (TLS on every listener)");
  h->add_option("--tls-key", flags->tls_key, "PEM private key of --tls-cert");
  h->add_option("--admin-key", flags->admin_key, "key for /v1/admin/* (status, decisions)");
  h->add_flag("--insecure", flags->insecure, "allow a non-loopback --listen without TLS");
  h->add_option("--hub-id", flags->options.hub_id, "name signed into node challenges")
      ->capture_default_str();
  h->add_option("--heartbeat-s", flags->options.heartbeat_s, "node heartbeat interval")
      ->capture_default_str();
  h->add_option("--suspect-s", flags->options.suspect_s, "no heartbeat this long: no new work")
      ->capture_default_str();
  h->add_option("--offline-s", flags->options.offline_s, "no heartbeat this long: failed over")
      ->capture_default_str();
  h->add_option("--grace-s", flags->options.grace_s,
                "after start, requests wait this long for nodes to reconnect")
      ->capture_default_str();
  h->add_option("--first-token-s", flags->options.first_token_s,
                "an attempt with no first token within this is retried elsewhere")
      ->capture_default_str();
  h->add_option("--queue-wait-s", flags->options.queue_wait_s,
                "a request with no free node waits this long, then 503")
      ->capture_default_str();
  h->add_option("--unload-idle-s", flags->options.unload_idle_s,
                "unload a model idle this long on a node, but the network's last loaded copy "
                "(0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  h->add_option("--warm-at", flags->options.warm_at,
                "load one more copy of a model when its loaded copies are this busy, running / "
                "slots (0: never)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  h->add_option("--price", flags->prices,
                "MODEL=PRICE or MODEL=PROMPT:COMPLETION, credits per million tokens (MODEL * "
                "for every other model); repeatable.  Unpriced models are free")
      ->take_all();
  h->add_option("--operator-share", flags->operator_share,
                "fraction of each charge credited to the node that did the work")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  h->add_option("--verify-window-s", flags->options.verify_window_s,
                "seconds an operator's credit stays pending (verifiable) before it is available")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  h->add_option("--probe-interval-s", flags->options.probe_interval_s,
                "reserved slots: seconds between the hub's availability probes of each slot")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  h->add_option("--slot-period-s", flags->options.slot_period_s,
                "reserved slots: the availability credit is paid per period of this length")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  h->add_option("--slot-share", flags->options.slot_share,
                "reserved slots: the availability credit per period, as a fraction of what the "
                "slot would earn serving its model all period at its measured speed")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  h->add_option("--reserved-multiplier", flags->options.reserved_multiplier,
                "reserved slots: their tokens earn this times the operator share (at most the "
                "whole charge)")
      ->check(CLI::Range(1.0, 10.0))
      ->capture_default_str();
  h->add_option("--min-availability", flags->options.min_availability,
                "reserved slots: a slot answering fewer of its probes over 30 days loses its "
                "reservation")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  h->add_option("--min-probes", flags->options.min_probes,
                "reserved slots: probes in 30 days before --min-availability applies")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  h->add_option("--standing-s", flags->options.standing_s,
                "each node hears this often what its operator earned and why it got no work")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  h->add_option("--verify-rate", flags->options.verify_rate,
                "chance that a new node's attempt is re-executed on another node (0: no checks); "
                "it falls with each check passed to --verify-floor and starts over on a failure")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  h->add_option("--verify-floor", flags->options.verify_floor,
                "the lowest chance of a check, for a node that passed many in a row")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  h->add_option("--canary-interval-s", flags->options.canary_interval_s,
                "seconds between canaries (a prompt with a known greedy output to a random node; "
                "0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  h->add_option("--check-wait-s", flags->options.check_wait_s,
                "seconds a check waits for a verifier and its answer before the next verifier")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  h->add_option("--max-body", flags->options.max_body_bytes, "request body limit (413 beyond)")
      ->capture_default_str();
  h->add_option("--read-timeout", flags->options.read_timeout_s, "seconds a request may take to "
                "arrive (408 beyond)")
      ->capture_default_str();
  h->add_option("--max-connections", flags->options.max_connections,
                "consumer and node connections at once")
      ->capture_default_str();
  h->callback([h, flags, action] {
    if (!h->get_subcommands().empty()) return;
    *action = [flags] { return RunHub(*flags); };
  });

  // Accounts and keys, on the store directly (works while the hub runs: SQLite in WAL mode takes
  // one writer at a time, PostgreSQL any).
  auto db = std::make_shared<std::string>("loom-hub.db");
  auto name = std::make_shared<std::string>();
  CLI::App* account = h->add_subcommand("account", "Consumer accounts")->require_subcommand(1);
  CLI::App* account_create = account->add_subcommand("create", "Create an account");
  account_create->add_option("name", *name, "account name")->required();
  AddDbFlag(account_create, db.get());
  account_create->callback([db, name, action] {
    *action = [db, name] {
      auto s = Open(*db);
      if (!s.ok()) return Fail(s.status());
      auto a = (*s)->CreateAccount(*name, base::UnixMillis());
      if (!a.ok()) return Fail(a.status());
      std::printf("account %s created (id %lld)\n", a->name.c_str(), static_cast<long long>(a->id));
      return 0;
    };
  });

  AddHubLedgerCommands(*h, *account, action);
  AddHubNodeCommands(*h, action);

  CLI::App* key = h->add_subcommand("key", "API keys of accounts")->require_subcommand(1);
  CLI::App* key_create = key->add_subcommand("create", "Create an API key (printed once)");
  key_create->add_option("--account", *name, "the account it bills")->required();
  AddDbFlag(key_create, db.get());
  key_create->callback([db, name, action] {
    *action = [db, name] {
      auto s = Open(*db);
      if (!s.ok()) return Fail(s.status());
      auto a = (*s)->FindAccount(*name);
      if (!a.ok()) return Fail(a.status());
      auto random = cluster::RandomHex(20);
      if (!random.ok()) return Fail(random.status());
      const std::string secret = "loom-" + *random;
      const std::string prefix = secret.substr(0, 13);
      auto k = (*s)->AddApiKey(a->id, network::protocol::Sha256Hex(secret), prefix, base::UnixMillis());
      if (!k.ok()) return Fail(k.status());
      std::printf("%s\n", secret.c_str());
      std::fprintf(stderr, "API key %s... for account %s (shown once; only its hash is kept)\n",
                   prefix.c_str(), a->name.c_str());
      return 0;
    };
  });
  auto prefix = std::make_shared<std::string>();
  CLI::App* key_revoke = key->add_subcommand("revoke", "Revoke an API key by its prefix");
  key_revoke->add_option("prefix", *prefix, "the key's first 13 characters")->required();
  AddDbFlag(key_revoke, db.get());
  key_revoke->callback([db, prefix, action] {
    *action = [db, prefix] {
      auto s = Open(*db);
      if (!s.ok()) return Fail(s.status());
      Status r = (*s)->RevokeApiKey(*prefix);
      if (!r.ok()) return Fail(r);
      std::printf("revoked %s\n", prefix->c_str());
      return 0;
    };
  });

  auto ttl = std::make_shared<double>(24);
  auto owner = std::make_shared<std::string>();
  CLI::App* token = h->add_subcommand("token", "Enrolment tokens for nodes")->require_subcommand(1);
  CLI::App* token_create = token->add_subcommand("create", "A single-use enrolment token");
  token_create->add_option("--ttl-hours", *ttl, "hours it stays valid")->capture_default_str();
  token_create->add_option("--account", *owner,
                           "the operator account that owns the node it enrols (its earnings "
                           "and standing on the hub's /account page); none: an unowned node");
  AddDbFlag(token_create, db.get());
  token_create->callback([db, ttl, owner, action] {
    *action = [db, ttl, owner] {
      auto s = Open(*db);
      if (!s.ok()) return Fail(s.status());
      int64_t account_id = 0;
      if (!owner->empty()) {
        auto a = (*s)->FindAccount(*owner);
        if (!a.ok()) return Fail(a.status());
        account_id = a->id;
      }
      auto random = cluster::RandomHex(16);
      if (!random.ok()) return Fail(random.status());
      const std::string t = "enroll-" + *random;
      Status r = (*s)->AddEnrollToken(network::protocol::Sha256Hex(t),
                                      base::UnixMillis() + static_cast<int64_t>(*ttl * 3.6e6),
                                      base::UnixMillis(), account_id);
      if (!r.ok()) return Fail(r);
      std::printf("%s\n", t.c_str());
      return 0;
    };
  });

  auto limit = std::make_shared<int64_t>(50);
  auto as_json = std::make_shared<bool>(false);
  CLI::App* jobs = h->add_subcommand("jobs", "Recent jobs and their attempts, from the store");
  AddDbFlag(jobs, db.get());
  jobs->add_option("--limit", *limit, "how many")->capture_default_str();
  jobs->add_flag("--json", *as_json, "one JSON object");
  jobs->callback([db, limit, as_json, action] {
    *action = [db, limit, as_json] {
      auto s = Open(*db);
      if (!s.ok()) return Fail(s.status());
      auto list = (*s)->ListJobs(*limit, std::nullopt);
      if (!list.ok()) return Fail(list.status());
      json out = json::array();
      for (const auto& j : *list) {
        json attempts = json::array();
        auto at = (*s)->AttemptsOf(j.job_id);
        if (at.ok()) {
          for (const auto& a : *at) {
            attempts.push_back(json{{"attempt_id", a.attempt_id}, {"node_id", a.node_id},
                                    {"state", std::string(network::store::AttemptStateName(a.state))},
                                    {"tokens", a.tokens}, {"error", a.error}});
          }
        }
        out.push_back(json{{"job_id", j.job_id}, {"model", j.model},
                           {"state", std::string(network::store::JobStateName(j.state))},
                           {"prompt_tokens", j.prompt_tokens},
                           {"completion_tokens", j.completion_tokens},
                           {"finish_reason", j.finish_reason}, {"error", j.error},
                           {"attempts", attempts}});
      }
      if (*as_json) {
        std::printf("%s\n", json{{"jobs", out}}.dump(1).c_str());
      } else {
        for (const auto& j : out) {
          std::printf("%-34s %-20s %-9s %4lld tokens  %s\n", j["job_id"].get<std::string>().c_str(),
                      j["model"].get<std::string>().c_str(), j["state"].get<std::string>().c_str(),
                      static_cast<long long>(j["completion_tokens"].get<int64_t>()),
                      j["error"].get<std::string>().c_str());
        }
      }
      return 0;
    };
  });

  auto url = std::make_shared<std::string>("http://127.0.0.1:8443");
  auto admin = std::make_shared<std::string>();
  auto ca = std::make_shared<std::string>();
  CLI::App* status = h->add_subcommand("status", "What is connected, what runs where and why");
  status->add_option("--hub", *url, "the hub's URL")->capture_default_str();
  status->add_option("--admin-key", *admin, "the hub's --admin-key")->required();
  status->add_option("--ca-file", *ca, "CA certificate(s) for an https hub with a private CA");
  status->add_flag("--json", *as_json, "the admin API's JSON as it is");
  status->callback([url, admin, ca, as_json, action] {
    *action = [url, admin, ca, as_json] {
      net::ClientRequest req;
      std::string hub_url = *url;
      while (!hub_url.empty() && hub_url.back() == '/') hub_url.pop_back();
      auto u = net::ParseUrl(hub_url + "/v1/admin/status");
      if (!u.ok()) return Fail(u.status());
      req.url = *u;
      req.headers = {{"Authorization", "Bearer " + *admin}};
      req.timeout_s = 10;
      std::shared_ptr<boost::asio::ssl::context> tls;
      if (u->tls()) {
        auto t = net::MakeClientTls(*ca);
        if (!t.ok()) return Fail(t.status());
        tls = *t;
      }
      auto res = net::Fetch(req, tls);
      if (!res.ok()) return Fail(res.status());
      if (res->status != 200) {
        std::fprintf(stderr, "loom hub status: HTTP %d: %s\n", res->status, res->body.c_str());
        return 1;
      }
      json j = json::parse(res->body, nullptr, false);
      if (*as_json || j.is_discarded()) {
        std::printf("%s\n", res->body.c_str());
        return 0;
      }
      std::printf("hub %s, store %s, up %.0f s%s; %lld completed, %lld failed, %lld failovers\n",
                  j.value("hub_id", "").c_str(), j.value("store", "").c_str(),
                  j.value("uptime_s", 0.0), j.value("in_grace", false) ? " (grace window)" : "",
                  static_cast<long long>(j.value("jobs_completed", 0)),
                  static_cast<long long>(j.value("jobs_failed", 0)),
                  static_cast<long long>(j.value("failovers", 0)));
      for (const auto& n : j["nodes"]) {
        std::string models;
        for (const auto& m : n["models"]) {
          models += (models.empty() ? "" : ", ") + m["name"].get<std::string>() +
                    (m["loaded"].get<bool>() ? "" : " (on disk)");
          if (m["decode_tps"].get<double>() > 0) {
            char buf[64];
            std::snprintf(buf, sizeof(buf), " %.0f tok/s", m["decode_tps"].get<double>());
            models += buf;
          }
        }
        std::printf("  %-22s %-8s ranks %lld  %5.1f GB free  %lld/%lld running  %s\n",
                    n["node_id"].get<std::string>().c_str(), n["state"].get<std::string>().c_str(),
                    static_cast<long long>(n["ranks"].get<int64_t>()),
                    static_cast<double>(n["mem_free_bytes"].get<int64_t>()) / 1e9,
                    static_cast<long long>(n["running"].get<int64_t>()),
                    static_cast<long long>(n["max_concurrency"].get<int64_t>()), models.c_str());
      }
      if (j.contains("verification") && j["verification"].is_object()) {
        const json& v = j["verification"];
        std::printf(
            "  verification: %lld passed, %lld failed, %lld dropped, %lld running; "
            "%lld check tokens of %lld (%.2f%% of the network's compute)\n",
            static_cast<long long>(v.value("checks_passed", 0)),
            static_cast<long long>(v.value("checks_failed", 0)),
            static_cast<long long>(v.value("checks_dropped", 0)),
            static_cast<long long>(v.value("checks_running", 0)),
            static_cast<long long>(v.value("check_tokens", 0)),
            static_cast<long long>(v.value("check_tokens", 0) + v.value("served_tokens", 0)),
            100 * v.value("share", 0.0));
        for (const auto& n : v.value("nodes", json::array())) {
          std::printf("    %-22s %s checks %lld passed / %lld failed, rate %.3f%s\n",
                      n.value("node_id", "").c_str(),
                      n.value("untrusted", false) ? "UNTRUSTED" : "trusted  ",
                      static_cast<long long>(n.value("checks_passed", 0)),
                      static_cast<long long>(n.value("checks_failed", 0)), n.value("rate", 0.0),
                      n.value("last_result", "").empty()
                          ? ""
                          : (", last " + n.value("last_result", "")).c_str());
        }
      }
      for (const auto& job : j["jobs"]) {
        std::printf("  job %s on %s (attempt %lld, %lld tokens)\n",
                    job["job_id"].get<std::string>().c_str(),
                    job["node_id"].get<std::string>().c_str(),
                    static_cast<long long>(job["attempt"].get<int64_t>()),
                    static_cast<long long>(job["tokens"].get<int64_t>()));
      }
      const json& slots = j.contains("slots") ? j["slots"] : json::array();
      for (const auto& s : slots) {
        std::printf("  slot %lld: %s on %s, %s%s, availability %.1f%% over %lld probes (30 d), "
                    "paid %s credits%s%s\n",
                    static_cast<long long>(s.value("slot_id", int64_t{0})),
                    s.value("model", "").c_str(), s.value("node_id", "").c_str(),
                    s.value("state", "").c_str(),
                    s.value("in_window", false) ? ", in its window" : ", outside its window",
                    100 * s.value("availability_30d", 0.0),
                    static_cast<long long>(s.value("probes_30d", int64_t{0})),
                    network::ledger::FormatCredits(s.value("credited_micro", int64_t{0})).c_str(),
                    s.value("lost_reason", "").empty() ? "" : ": ",
                    s.value("lost_reason", "").c_str());
      }
      // The latest residency actions (load_model / unload_model) and why.
      const json& actions = j.contains("model_actions") ? j["model_actions"] : json::array();
      for (size_t i = actions.size() > 5 ? actions.size() - 5 : 0; i < actions.size(); ++i) {
        const json& a = actions[i];
        std::printf("  %s %s on %s: %s\n", a.value("action", "").c_str(),
                    a.value("model", "").c_str(), a.value("node_id", "").c_str(),
                    a.value("reason", "").c_str());
      }
      return 0;
    };
  });
}

}  // namespace loom::cli
