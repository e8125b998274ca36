// The hub's front: listening, routing, authentication, the admin and model listings, timers.
#include "loom/network/hub/hub.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include <boost/asio/io_context.hpp>

#include "loom/base/clock.h"
#include "loom/network/hub/hub_impl.h"
#include "loom/network/protocol/identity.h"
#include "loom/serve/auth.h"

namespace loom::network::hub {

void LogError(const Status& s) {
  if (!s.ok()) std::fprintf(stderr, "hub: %s\n", s.ToString().c_str());
}

std::string ErrorBody(const std::string& message, const std::string& type,
                      const std::string& code, const std::string& param) {
  json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

void RespondJson(net::Responder& r, int status, const json& j) {
  r.Respond(status, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace));
}

void RespondError(net::Responder& r, int status, const std::string& message,
                  const std::string& type, const std::string& code) {
  r.Respond(status, "application/json", ErrorBody(message, type, code));
}

const char* kTargetStateNames[] = {"online", "suspect", "offline"};

}  // namespace

Hub::Impl::Impl(boost::asio::io_context& io, HubOptions options,
                std::unique_ptr<store::Store> store)
    : io_(io),
      options_(std::move(options)),
      store_(std::move(store)),
      tick_(io),
      started_at_(base::NowSeconds()),
      random_(std::random_device{}()) {}

Hub::Impl::~Impl() {
  life_.reset();
  Stop();
}

Status Hub::Impl::Listen() {
  StatusOr<int64_t> ended = store_->FailUnfinishedJobs(
      "the hub restarted while this job ran; it was not completed", base::UnixMillis());
  if (!ended.ok()) return ended.status();
  if (*ended > 0) {
    std::fprintf(stderr, "hub: %lld job(s) interrupted by the last stop are marked failed\n",
                 static_cast<long long>(*ended));
  }
  // Node sessions an earlier run left open end where it last extended them (hub_world.cc).
  StatusOr<int64_t> stale = store_->CloseStaleNodeSessions();
  if (!stale.ok()) return stale.status();
  LOOM_RETURN_IF_ERROR(LoadVerification().WithContext("hub: verification"));
  LoadSlots();
  net::ServerOptions so;
  so.host = options_.host;
  so.port = options_.port;
  so.tls = options_.tls;
  so.max_body_bytes = options_.max_body_bytes;
  so.read_timeout_s = options_.read_timeout_s;
  so.max_ws_message_bytes = protocol::kMaxFrameBytes;
  // Heartbeats keep node sockets busy; pings only for a peer silent well past them.
  so.ws_ping_interval_s = std::max(5.0, 3 * options_.heartbeat_s);
  so.max_connections = options_.max_connections;
  // Every node holds a connection: take the file descriptors the system allows.
  struct rlimit files {};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  std::weak_ptr<int> life = life_;
  auto server = net::HttpServer::Start(
      io_, so,
      [this, life](net::Request req, std::shared_ptr<net::Responder> res) {
        if (life.lock()) OnHttp(std::move(req), std::move(res));
      },
      [this, life](const net::Request& req, std::shared_ptr<net::Responder> refuse,
                   std::function<void(std::shared_ptr<net::WebSocket>)>* accept) {
        if (!life.lock()) return;
        if (req.path != "/v1/node/connect") {
          RespondError(*refuse, 404, "no WebSocket endpoint at " + req.path,
                       "invalid_request_error", "unknown_url");
          return;
        }
        *accept = [this, life](std::shared_ptr<net::WebSocket> ws) {
          if (life.lock()) OnNodeSocket(std::move(ws));
        };
      });
  if (!server.ok()) return server.status().WithContext("hub: listen");
  server_ = std::move(*server);
  Tick();
  return OkStatus();
}

void Hub::Impl::Stop() {
  tick_.cancel();
  for (auto& [id, job] : jobs_) {
    if (job->consumer && !job->consumer->closed()) {
      if (job->head_sent) {
        job->consumer->Send("data: " + ErrorBody("the hub is stopping", "server_error",
                                                 "hub_stopping") + "\n\n");
        job->consumer->End();
      } else {
        RespondError(*job->consumer, 503, "the hub is stopping", "server_error", "hub_stopping");
      }
    }
  }
  for (const auto& [node_id, conn] : ready_) {
    LogError(store_->CloseNodeSession(node_id, base::UnixMillis()));
  }
  for (const auto& client : world_.clients) {
    if (!client->closed()) client->End();
  }
  world_.clients.clear();
  if (server_) server_->Stop();
}

void Hub::Impl::Tick() {
  const double now = base::NowSeconds();
  // Heartbeat deadlines are seconds long: scanning every connection once a second is enough.
  if (now - last_node_check_ >= 1.0) {
    CheckNodes(now);
    ManageSlots(now);
    ManageModels(now);
    SendStandings(now);
    last_node_check_ = now;
  }
  // Operators' credits settled longer ago than the verification window become available.
  if (now - last_release_ >= 10) {
    last_release_ = now;
    const int64_t now_ms = base::UnixMillis();
    auto released = store_->ReleasePending(
        now_ms - static_cast<int64_t>(options_.verify_window_s * 1000), now_ms, released_through_,
        1000);
    if (released.ok()) {
      released_through_ = released->through_tx;
    } else {
      LogError(released.status());
    }
  }
  CheckJobs(now);
  CheckVerification(now);
  DrainQueues();
  WorldTick(now);
  tick_.expires_after(std::chrono::milliseconds(100));
  std::weak_ptr<int> life = life_;
  tick_.async_wait([this, life](const boost::system::error_code& ec) {
    if (!ec && life.lock()) Tick();
  });
}

std::optional<int64_t> Hub::Impl::Authenticate(const net::Request& request) {
  const std::string_view key = serve::BearerToken(request.Header("authorization"));
  if (key.empty() || key.size() > 256) return {};
  const std::string hash = protocol::Sha256Hex(key);
  const double now = base::NowSeconds();
  // Revocations (by `loom hub key revoke` on the store) take effect within the cache's 10 s.
  auto it = key_cache_.find(hash);
  if (it != key_cache_.end() && now - it->second.second < 10) return it->second.first;
  StatusOr<std::optional<int64_t>> account = store_->AccountForKey(hash);
  if (!account.ok()) {
    LogError(account.status());
    return {};
  }
  if (key_cache_.size() > 100000) key_cache_.clear();
  key_cache_[hash] = {*account, now};
  return *account;
}

bool Hub::Impl::IsAdmin(const net::Request& request) const {
  if (options_.admin_key.empty()) return false;
  return serve::BearerMatches(request.Header("authorization"), options_.admin_key);
}

void Hub::Impl::OnHttp(net::Request request, std::shared_ptr<net::Responder> responder) {
  const std::string& path = request.path;
  const bool post = request.method == "POST";
  const bool get = request.method == "GET";
  if (path == "/health") {
    if (!get) return RespondError(*responder, 405, "use GET", "invalid_request_error", "");
    int64_t online = 0;
    for (const auto& t : fleet_) online += t.state == placement::TargetState::kOnline;
    return RespondJson(*responder, 200,
                       json{{"status", "ok"}, {"nodes_online", online},
                            {"nodes_connected", static_cast<int64_t>(fleet_.size())},
                            {"jobs_running", static_cast<int64_t>(jobs_.size())}});
  }
  if (path == "/v1/nodes/enroll") {
    if (!post) return RespondError(*responder, 405, "use POST", "invalid_request_error", "");
    return Enroll(request, responder);
  }
  if (path.rfind("/v1/admin/", 0) == 0) {
    if (!IsAdmin(request)) {
      return RespondError(*responder, 401, "the admin API needs the hub's --admin-key",
                          "authentication_error", "invalid_admin_key");
    }
    if (path == "/v1/admin/status" && get) return RespondJson(*responder, 200, StatusJson());
    if (path == "/v1/admin/decisions" && get) {
      json list = json::array();
      for (const json& d : decisions_) list.push_back(d);
      return RespondJson(*responder, 200, json{{"decisions", list}});
    }
    return RespondError(*responder, 404, "unknown admin route " + path, "invalid_request_error",
                        "unknown_url");
  }
  if (path == "/v1/account" || path == "/account" || path.starts_with("/account/")) {
    return OnAccount(request, responder);  // the page is public, its JSON needs a key
  }
  if (path == "/world" || path == "/world.json" || path.rfind("/world/", 0) == 0) {
    return OnWorld(request, responder);  // public: no key (hub_world.cc)
  }
  const bool chat = path == "/v1/chat/completions";
  if (chat || path == "/v1/completions" || path == "/v1/models") {
    std::optional<int64_t> account = Authenticate(request);
    if (!account) {
      return RespondError(*responder, 401,
                          "Incorrect or missing API key (send Authorization: Bearer KEY; keys "
                          "come from `loom hub key create`)",
                          "authentication_error", "invalid_api_key");
    }
    if (path == "/v1/models") {
      if (!get) return RespondError(*responder, 405, "use GET", "invalid_request_error", "");
      return RespondJson(*responder, 200, ModelsJson());
    }
    if (!post) return RespondError(*responder, 405, "use POST", "invalid_request_error", "");
    return OnCompletion(chat, request, responder, *account);
  }
  RespondError(*responder, 404, "no route for " + request.method + " " + path,
               "invalid_request_error", "unknown_url");
}

json Hub::Impl::ModelsJson() const {
  struct Capacity {
    int64_t targets = 0, loaded = 0, free_slots = 0, context = 0;
  };
  std::map<std::string, Capacity> models;
  for (const placement::Target& t : fleet_) {
    if (t.state != placement::TargetState::kOnline || t.draining || t.paused) continue;
    for (const placement::ModelOffer& m : t.models) {
      Capacity& c = models[m.name];
      c.targets += 1;
      c.loaded += m.loaded;
      c.free_slots += std::max(0, t.max_concurrency - t.running);
      c.context = std::max(c.context, m.context);
    }
  }
  json data = json::array();
  for (const auto& [name, c] : models) {
    data.push_back(json{{"id", name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "loom-network"},
                        {"context_length", c.context},
                        {"capacity", json{{"targets", c.targets},
                                          {"loaded", c.loaded},
                                          {"free_slots", c.free_slots}}}});
  }
  return json{{"object", "list"}, {"data", data}};
}

json Hub::Impl::StatusJson() const {
  const double now = base::NowSeconds();
  json nodes = json::array();
  for (size_t i = 0; i < fleet_.size(); ++i) {
    const placement::Target& t = fleet_[i];
    const NodeConn& c = *conns_.at(fleet_conn_[i]);
    json models = json::array();
    for (const placement::ModelOffer& m : t.models) {
      models.push_back(json{{"name", m.name}, {"loaded", m.loaded},
                            {"weight_bytes", m.weight_bytes}, {"context", m.context},
                            {"prefill_tps", m.prefill_tps}, {"decode_tps", m.decode_tps}});
    }
    json running = json::array();
    for (const std::string& a : c.attempts) running.push_back(a);
    nodes.push_back(json{
        {"node_id", t.id}, {"name", c.name}, {"remote", c.remote},
        {"state", kTargetStateNames[static_cast<int>(t.state)]},
        {"draining", t.draining}, {"paused", t.paused}, {"ranks", t.ranks},
        {"untrusted", Untrusted(t.id)},
        {"mem_total_bytes", c.facts.mem_total_bytes}, {"mem_free_bytes", t.mem_free_bytes},
        {"mem_bandwidth_gbps", c.facts.mem_bandwidth_gbps}, {"cores", c.facts.cores},
        {"simd", c.facts.simd}, {"version", c.facts.version},
        {"running", t.running}, {"waiting", t.waiting}, {"max_concurrency", t.max_concurrency},
        {"heartbeat_age_s", now - c.last_heartbeat}, {"connected_s", now - c.connected_at},
        {"models", models}, {"attempts", running}});
  }
  json jobs = json::array();
  for (const auto& [id, j] : jobs_) {
    if (!j->recorded()) continue;
    jobs.push_back(json{{"job_id", id}, {"model", j->model}, {"node_id", j->node_id},
                        {"attempt", j->attempts}, {"queued", j->queued},
                        {"tokens", static_cast<int64_t>(j->generated.size())},
                        {"age_s", now - j->created_at}});
  }
  json queues = json::object();
  for (const auto& [model, q] : queues_) {
    if (!q.empty()) queues[model] = static_cast<int64_t>(q.size());
  }
  return json{{"hub_id", options_.hub_id},
              {"store", std::string(store_->Kind())},
              {"uptime_s", now - started_at_},
              {"in_grace", now - started_at_ < options_.grace_s},
              {"nodes", nodes},
              {"jobs", jobs},
              {"queues", queues},
              {"jobs_completed", jobs_completed_},
              {"jobs_failed", jobs_failed_},
              {"failovers", failovers_},
              {"verification", VerificationJson()},
              {"model_actions", json(model_actions_)},
              {"slots", SlotsJson()},
              {"world", json{{"build_ms", world_.build_ms},
                             {"build_cpu_ms", world_.build_cpu_ms},
                             {"history_ms", world_.history_ms},
                             {"machines", static_cast<int64_t>(world_.rows.size())},
                             {"watchers", static_cast<int64_t>(world_.clients.size())}}}};
}

void Hub::Impl::SendFrame(NodeConn& c, const protocol::Frame& f) {
  if (c.ws) c.ws->Send(protocol::SerializeFrame(f));
}

StatusOr<std::unique_ptr<Hub>> Hub::Start(boost::asio::io_context& io, HubOptions options,
                                          std::unique_ptr<store::Store> store) {
  auto impl = std::make_unique<Impl>(io, std::move(options), std::move(store));
  LOOM_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<Hub>(new Hub(std::move(impl)));
}

Hub::Hub(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Hub::~Hub() = default;
int Hub::port() const { return impl_->port(); }
void Hub::Stop() { impl_->Stop(); }

}  // namespace loom::network::hub
