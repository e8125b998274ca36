#include "loom/network/node/agent.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "loom/base/clock.h"
#include "loom/net/http_client.h"
#include "loom/net/tls.h"
#include "loom/net/url.h"
#include "loom/net/websocket.h"
#include "loom/network/node/node_facts.h"
#include "loom/network/protocol/frames.h"
#include "loom/network/protocol/identity.h"

namespace loom::network::node {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string DefaultNodeDir() {
  if (const char* d = std::getenv("LOOM_NODE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) return std::string(x) + "/loom/node";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.config/loom/node";
}

StatusOr<Identity> LoadIdentity(const std::string& dir) {
  const std::string file = dir + "/node.json";
  std::ifstream in(file);
  if (!in) {
    return NotFoundError("node: ", file, " is missing: enrol first with `loom node enroll --hub URL "
                         "--token TOKEN` (tokens come from `loom hub token create`)");
  }
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("node_id") || !j["node_id"].is_string() ||
      !j.contains("hub_url") || !j["hub_url"].is_string()) {
    return DataLossError("node: ", file, " is not a node identity (enrol again)");
  }
  Identity id;
  id.hub_url = j["hub_url"].get<std::string>();
  id.node_id = j["node_id"].get<std::string>();
  id.hub_id = j.value("hub_id", "");
  id.key_path = dir + "/node_key.pem";
  return id;
}

Status SaveIdentity(const std::string& dir, const Identity& id) {
  const std::string tmp = dir + "/node.json.tmp";
  std::ofstream out(tmp);
  out << json{{"hub_url", id.hub_url}, {"node_id", id.node_id}, {"hub_id", id.hub_id}}.dump(1)
      << "\n";
  out.close();
  if (!out) return InternalError("node: cannot write ", tmp);
  std::error_code ec;
  fs::rename(tmp, dir + "/node.json", ec);
  if (ec) return InternalError("node: cannot write ", dir, "/node.json: ", ec.message());
  return OkStatus();
}

namespace {

// The hub's WebSocket endpoint for an http(s):// or ws(s):// hub URL.
StatusOr<net::Url> NodeEndpoint(const std::string& hub_url) {
  LOOM_ASSIGN_OR_RETURN(net::Url u, net::ParseUrl(hub_url));
  if (u.scheme == "http") u.scheme = "ws";
  if (u.scheme == "https") u.scheme = "wss";
  u.target = "/v1/node/connect";
  return u;
}

// Token ids from the child's JSON; anything that is not a list of ids gives an empty list (the
// frame then carries no ids rather than the agent throwing on a malformed answer).
std::vector<int32_t> TokenIds(const json& v) {
  std::vector<int32_t> ids;
  if (!v.is_array()) return ids;
  ids.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) return {};
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

struct Attempt {
  std::string id;
  std::string model;
  std::string endpoint;
  json request;
  std::shared_ptr<net::ClientCall> call;
  std::string buffer;       // SSE bytes not yet split into events
  int status = 0;           // the child's HTTP status
  std::string error_body;   // when status != 200
  int64_t index = 0;        // next chunk index
  bool accepted = false;
  std::string finish_reason;
  int64_t completion_tokens = 0;
  int64_t prompt_tokens = 0;
  std::string pending_text;           // parsed from the current read, not yet sent
  std::vector<int32_t> pending_ids;
  std::vector<double> pending_logprobs, pending_best;  // scoring requests: one per pending id
  double last_flush = 0;  // when the last chunk was sent (0: none yet)
  bool waiting_for_load = false;
};

}  // namespace

class Agent::Impl {
 public:
  Impl(boost::asio::io_context& io, AgentOptions o)
      : io_(io), options_(std::move(o)), heartbeat_(io), reconnect_(io), flush_(io),
        random_(std::random_device{}()) {}

  Status Init();
  void Connect();
  void OnMessage(std::string_view text);
  void OnClosed(std::string_view reason);
  void Send(const protocol::Frame& f) {
    if (ws_ && ws_->open()) ws_->Send(protocol::SerializeFrame(f));
  }
  void SendError(const std::string& attempt, std::string code, std::string message, int status);
  void OnAssign(const protocol::Assign& a);
  void StartCall(Attempt& a);
  void OnData(const std::string& id, std::string_view data);
  void OnEvent(Attempt& a, std::string_view data);
  void FlushChunk(Attempt& a);
  // FlushChunk now if the attempt's last chunk is chunk_interval_s old, else when it will be.
  void MaybeFlush(Attempt& a);
  void OnFlushTimer();
  void OnDone(const std::string& id, const Status& s);
  void Finish(const std::string& id);
  void Load(const std::string& name);
  // The hub's load_model / unload_model.  An unload waits for the model's running attempts.
  void OnLoadModel(const std::string& name);
  void OnUnloadModel(const std::string& name);
  void Unload(const std::string& name);
  int64_t Footprint(const LocalModel& m) const {
    return protocol::LoadedFootprint(m.info, options_.serve.parallel);
  }
  void Heartbeat();
  std::vector<protocol::ModelInfo> ModelInfos() const;
  int64_t MemFree() const;
  bool Paused();
  void WriteStatus();
  void MaybeDrained();

  boost::asio::io_context& io_;
  AgentOptions options_;
  Identity identity_;
  std::unique_ptr<protocol::NodeKey> key_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  net::Url endpoint_;
  protocol::NodeFacts facts_;
  int64_t max_memory_ = 0;
  std::vector<LocalModel> models_;
  std::map<std::string, std::unique_ptr<ModelServer>> servers_;
  std::set<std::string> unload_pending_;  // the hub asked; unloaded when its attempts end
  std::shared_ptr<net::WebSocket> ws_;
  bool welcomed_ = false;
  int64_t heartbeat_ms_ = 5000;  // as the hub's welcome says
  double backoff_s_ = 0.5;
  boost::asio::steady_timer heartbeat_, reconnect_;
  boost::asio::steady_timer flush_;  // the next paced chunk of any attempt (MaybeFlush)
  double flush_at_ = 0;              // when flush_ fires; 0: not armed
  std::map<std::string, Attempt> attempts_;
  bool draining_ = false;
  bool paused_ = false;
  std::function<void()> drained_;
  Schedule schedule_;
  std::optional<protocol::SlotOffer> slot_;  // --reserve
  std::optional<protocol::Standing> standing_;  // the hub's latest report to this operator
  Status ParseSlot();
  BusyMeter busy_;
  std::mt19937_64 random_;
  std::shared_ptr<int> life_ = std::make_shared<int>(0);
};

Status Agent::Impl::Init() {
  LOOM_ASSIGN_OR_RETURN(identity_, LoadIdentity(options_.dir));
  if (!options_.hub_url.empty()) identity_.hub_url = options_.hub_url;
  StatusOr<protocol::NodeKey> key = protocol::NodeKey::LoadPrivatePem(identity_.key_path);
  if (!key.ok()) return key.status();
  key_ = std::make_unique<protocol::NodeKey>(std::move(*key));
  LOOM_ASSIGN_OR_RETURN(endpoint_, NodeEndpoint(identity_.hub_url));
  if (endpoint_.scheme == "wss") {
    LOOM_ASSIGN_OR_RETURN(tls_, net::MakeClientTls(options_.ca_file));
  }
  StatusOr<Schedule> schedule = ParseSchedule(options_.schedule);
  if (!schedule.ok()) return schedule.status().WithContext("node: --schedule");
  schedule_ = std::move(schedule).value();
  facts_ = MeasureFacts(options_.max_memory_bytes, std::max(1, options_.serve.threads));
  max_memory_ = options_.max_memory_bytes > 0
                    ? std::min(options_.max_memory_bytes, facts_.mem_free_bytes)
                    : facts_.mem_free_bytes * 9 / 10;
  facts_.mem_total_bytes = std::max(facts_.mem_total_bytes, max_memory_);
  for (const std::string& spec : options_.models) {
    StatusOr<LocalModel> m = DescribeModel(spec, options_.serve.ctx, options_.dir + "/hashes.json");
    if (!m.ok()) return m.status();
    m->tp = options_.serve.tp;
    m->pp = options_.serve.pp;
    if (options_.ranks > 1) {
      LOOM_ASSIGN_OR_RETURN(PodSplit split,
                            PlanPodSplit(options_.serve.loom_binary, m->path, options_.ranks));
      m->tp = split.tp;
      m->pp = split.pp;
      std::fprintf(stderr, "node: %s on %d ranks: tp=%d pp=%d (cost model: %.1f tokens/s)\n",
                   m->name.c_str(), options_.ranks, m->tp, m->pp, split.decode_tokens_per_s);
    }
    models_.push_back(std::move(*m));
  }
  if (models_.empty()) {
    return InvalidArgumentError("node: no models to lend: give --models PATH_OR_NAME[,...]");
  }
  LOOM_RETURN_IF_ERROR(ParseSlot());
  // Load what fits now; the rest stays on disk and loads when the hub assigns it.
  for (const LocalModel& m : models_) {
    if (Footprint(m) <= MemFree()) Load(m.name);
  }
  return OkStatus();
}

Status Agent::Impl::ParseSlot() {
  if (options_.reserve.empty()) {
    if (!options_.reserve_hours.empty()) {
      return InvalidArgumentError("node: --reserve-hours needs --reserve MODEL");
    }
    return OkStatus();
  }
  std::string names;
  bool found = false;
  for (const LocalModel& m : models_) {
    found = found || m.name == options_.reserve;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  if (!found) {
    return InvalidArgumentError("node: --reserve ", options_.reserve,
                                ": not one of the models this node lends (", names, ")");
  }
  protocol::SlotOffer slot{.model = options_.reserve};
  if (!options_.reserve_hours.empty()) {
    StatusOr<Schedule> hours = ParseSchedule(options_.reserve_hours);
    if (!hours.ok()) return hours.status().WithContext("node: --reserve-hours");
    if (hours->ranges.size() != 1) {
      return InvalidArgumentError("node: --reserve-hours takes one range HH:MM-HH:MM (UTC), got ",
                                  hours->ranges.size());
    }
    slot.begin_minute = hours->ranges[0].first % 1440;  // 24:00 is midnight
    slot.end_minute = hours->ranges[0].second == 0 ? 1440 : hours->ranges[0].second;
    if (slot.begin_minute == slot.end_minute) {
      return InvalidArgumentError("node: --reserve-hours: an empty range (use no flag for all day)");
    }
  }
  slot_ = slot;
  return OkStatus();
}

int64_t Agent::Impl::MemFree() const {
  int64_t used = 0;
  for (const LocalModel& m : models_) {
    if (servers_.count(m.name)) used += Footprint(m);
  }
  return std::max<int64_t>(0, max_memory_ - used);
}

void Agent::Impl::Load(const std::string& name) {
  auto m = std::find_if(models_.begin(), models_.end(), [&](auto& x) { return x.name == name; });
  if (m == models_.end() || servers_.count(name)) return;
  ServeConfig cfg = options_.serve;
  cfg.ctx = m->info.context;
  cfg.tp = m->tp;
  cfg.pp = m->pp;
  std::weak_ptr<int> life = life_;
  std::fprintf(stderr, "node: loading %s (%s)\n", name.c_str(), m->path.c_str());
  StatusOr<std::unique_ptr<ModelServer>> s =
      ModelServer::Start(io_, name, m->path, cfg, [this, life, name](Status st) {
        if (!life.lock()) return;
        if (!st.ok()) {
          std::fprintf(stderr, "node: %s\n", st.ToString().c_str());
          servers_.erase(name);
        } else {
          std::fprintf(stderr, "node: %s loaded\n", name.c_str());
        }
        for (auto& [id, a] : attempts_) {
          if (a.model != name || !a.waiting_for_load) continue;
          a.waiting_for_load = false;
          if (st.ok()) {
            StartCall(a);
          } else {
            SendError(id, "load_failed", st.message(), 503);
          }
        }
        for (auto it = attempts_.begin(); it != attempts_.end();) {
          it = it->second.call || it->second.waiting_for_load ? std::next(it) : attempts_.erase(it);
        }
        Heartbeat();
      });
  if (!s.ok()) {
    std::fprintf(stderr, "node: %s\n", s.status().ToString().c_str());
    return;
  }
  servers_[name] = std::move(*s);
}

void Agent::Impl::OnLoadModel(const std::string& name) {
  auto m = std::find_if(models_.begin(), models_.end(), [&](auto& x) { return x.name == name; });
  if (m == models_.end()) {
    std::fprintf(stderr, "node: the hub asked to load '%s', which this node does not hold\n",
                 name.c_str());
    return;
  }
  unload_pending_.erase(name);
  if (servers_.count(name)) return;  // loaded or loading
  if (Footprint(*m) > MemFree()) {
    std::fprintf(stderr, "node: not loading %s for the hub: it needs %.2f GB, %.2f GB lendable\n",
                 name.c_str(), Footprint(*m) / 1e9, MemFree() / 1e9);
    return;
  }
  Load(name);
}

void Agent::Impl::OnUnloadModel(const std::string& name) {
  if (!servers_.count(name)) return;
  if (std::any_of(attempts_.begin(), attempts_.end(),
                  [&](const auto& a) { return a.second.model == name; })) {
    unload_pending_.insert(name);  // after its running requests
    return;
  }
  Unload(name);
}

void Agent::Impl::Unload(const std::string& name) {
  unload_pending_.erase(name);
  if (servers_.erase(name) == 0) return;
  std::fprintf(stderr, "node: unloaded %s (the hub asked)\n", name.c_str());
  Heartbeat();
}

void Agent::Impl::Connect() {
  std::weak_ptr<int> life = life_;
  net::DialWebSocket(
      io_, endpoint_, tls_, {}, 10, protocol::kMaxFrameBytes,
      [this, life](StatusOr<std::shared_ptr<net::WebSocket>> ws) {
        if (!life.lock()) return;
        if (!ws.ok()) {
          std::fprintf(stderr, "node: cannot reach the hub: %s\n", ws.status().ToString().c_str());
          return OnClosed("dial failed");
        }
        ws_ = std::move(*ws);
        ws_->OnMessage([this, life](std::string_view text) {
          if (life.lock()) OnMessage(text);
        });
        ws_->OnClose([this, life](std::string_view reason) {
          if (life.lock()) OnClosed(reason);
        });
        ws_->Start();
        protocol::Hello hello;
        hello.node_id = identity_.node_id;
        Send(hello);
      },
      /*ping_interval_s=*/5);
}

void Agent::Impl::OnClosed(std::string_view reason) {
  if (welcomed_) {
    std::fprintf(stderr, "node: connection to the hub closed (%.*s)\n",
                 static_cast<int>(reason.size()), reason.data());
  }
  welcomed_ = false;
  ws_.reset();
  heartbeat_.cancel();
  // The hub fails over whatever ran on this connection: stop it here.
  for (auto& [id, a] : attempts_) {
    if (a.call) a.call->Cancel();
  }
  attempts_.clear();
  if (draining_) return MaybeDrained();
  // Exponential backoff with jitter, 0.5 s to 10 s.
  const double wait = backoff_s_ * std::uniform_real_distribution<double>(0.8, 1.2)(random_);
  backoff_s_ = std::min(10.0, backoff_s_ * 2);
  reconnect_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(wait * 1000)));
  std::weak_ptr<int> life = life_;
  reconnect_.async_wait([this, life](const boost::system::error_code& ec) {
    if (!ec && life.lock()) Connect();
  });
}

std::vector<protocol::ModelInfo> Agent::Impl::ModelInfos() const {
  std::vector<protocol::ModelInfo> out;
  for (const LocalModel& m : models_) {
    protocol::ModelInfo i = m.info;
    auto s = servers_.find(m.name);
    i.loaded = s != servers_.end() && s->second->ready();
    out.push_back(i);
  }
  return out;
}

void Agent::Impl::OnMessage(std::string_view text) {
  StatusOr<protocol::Frame> frame = protocol::ParseFrame(text);
  if (!frame.ok()) {
    std::fprintf(stderr, "node: bad frame from the hub: %s\n", frame.status().ToString().c_str());
    if (ws_) ws_->Close("policy: bad frame");
    return;
  }
  if (auto* ch = std::get_if<protocol::Challenge>(&*frame)) {
    StatusOr<std::string> sig =
        key_->SignBase64(protocol::ChallengeMessage(ch->nonce, identity_.node_id, ch->hub_id));
    if (!sig.ok()) {
      std::fprintf(stderr, "node: %s\n", sig.status().ToString().c_str());
      return;
    }
    protocol::Register r;
    r.node_id = identity_.node_id;
    r.signature = *sig;
    r.facts = facts_;
    r.facts.mem_total_bytes = max_memory_;
    r.facts.mem_free_bytes = MemFree();
    r.models = ModelInfos();
    // A pod is one target of tp x pp ranks; with --ranks each model has its own split of the
    // same ranks, and the largest model's is reported.
    const LocalModel* largest = &models_.front();
    for (const LocalModel& m : models_) {
      if (m.info.weight_bytes > largest->info.weight_bytes) largest = &m;
    }
    if (largest->tp > 1 || largest->pp > 1) r.pod = protocol::PodInfo{largest->tp, largest->pp};
    r.max_concurrency = options_.serve.parallel;
    r.slot = slot_;
    r.location = options_.location;
    Send(r);
  } else if (auto* w = std::get_if<protocol::Welcome>(&*frame)) {
    welcomed_ = true;
    heartbeat_ms_ = w->heartbeat_ms;
    backoff_s_ = 0.5;
    std::fprintf(stderr, "node: connected to %s as %s\n", identity_.hub_url.c_str(),
                 identity_.node_id.c_str());
    Heartbeat();
  } else if (auto* a = std::get_if<protocol::Assign>(&*frame)) {
    OnAssign(*a);
  } else if (auto* c = std::get_if<protocol::Cancel>(&*frame)) {
    Finish(c->attempt_id);
  } else if (std::get_if<protocol::Drain>(&*frame)) {
    draining_ = true;
    Heartbeat();
  } else if (auto* l = std::get_if<protocol::LoadModel>(&*frame)) {
    OnLoadModel(l->model);
  } else if (auto* u = std::get_if<protocol::UnloadModel>(&*frame)) {
    OnUnloadModel(u->model);
  } else if (auto* st = std::get_if<protocol::Standing>(&*frame)) {
    standing_ = std::move(*st);
    WriteStatus();
  } else if (auto* e = std::get_if<protocol::Error>(&*frame)) {
    std::fprintf(stderr, "node: the hub says %s: %s\n", e->code.c_str(), e->message.c_str());
  }
}

void Agent::Impl::SendError(const std::string& attempt, std::string code, std::string message,
                            int status) {
  // The code is passed on from the child's answer: keep it a valid frame id whatever it was.
  std::string safe;
  for (char ch : code) {
    if (safe.size() < 64 && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
                             ch == '-' || ch == '.')) {
      safe.push_back(ch);
    }
  }
  protocol::Error e;
  e.attempt_id = attempt;
  e.code = safe.empty() ? "generation_failed" : safe;
  e.message = message.substr(0, protocol::kMaxMessageBytes);
  e.status = status >= 100 && status <= 599 ? status : 502;
  Send(e);
}

void Agent::Impl::OnAssign(const protocol::Assign& assign) {
  if (attempts_.count(assign.attempt_id)) return;  // idempotent on attempt_id
  if (draining_ || Paused()) {
    return SendError(assign.attempt_id, "node_unavailable",
                     draining_ ? "this node is draining" : "this node is paused by its owner", 503);
  }
  auto m = std::find_if(models_.begin(), models_.end(),
                        [&](const LocalModel& x) { return x.name == assign.model; });
  if (m == models_.end()) {
    return SendError(assign.attempt_id, "model_not_found",
                     "this node does not hold '" + assign.model + "'", 503);
  }
  Attempt a;
  a.id = assign.attempt_id;
  a.model = assign.model;
  a.endpoint = assign.endpoint;
  a.request = assign.request;
  a.request["model"] = assign.model;
  a.request["stream"] = true;
  a.request["return_token_ids"] = true;
  auto [it, inserted] = attempts_.emplace(a.id, std::move(a));
  unload_pending_.erase(assign.model);  // wanted again
  auto s = servers_.find(assign.model);
  if (s == servers_.end()) {
    if (Footprint(*m) > MemFree()) {
      attempts_.erase(it);
      return SendError(assign.attempt_id, "no_memory",
                       "not enough lendable memory to load '" + assign.model + "'", 503);
    }
    it->second.waiting_for_load = true;
    Load(assign.model);
    return;
  }
  if (!s->second->ready()) {
    it->second.waiting_for_load = true;
    return;
  }
  StartCall(it->second);
}

void Agent::Impl::StartCall(Attempt& a) {
  const ModelServer& server = *servers_.at(a.model);
  net::ClientRequest req;
  req.method = "POST";
  req.url.scheme = "http";
  req.url.host = "127.0.0.1";
  req.url.port = server.port();
  req.url.target = a.endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions";
  req.headers = {{"Content-Type", "application/json"},
                 {"Authorization", "Bearer " + server.api_key()}};
  req.body = a.request.dump(-1, ' ', false, json::error_handler_t::replace);
  req.timeout_s = 600;
  std::weak_ptr<int> life = life_;
  const std::string id = a.id;
  a.call = net::StartRequest(
      io_, std::move(req), nullptr,
      [this, life, id](int status, const std::vector<std::pair<std::string, std::string>>&) {
        if (!life.lock()) return;
        auto it = attempts_.find(id);
        if (it != attempts_.end()) it->second.status = status;
      },
      [this, life, id](std::string_view data) {
        if (life.lock()) OnData(id, data);
      },
      [this, life, id](Status s) {
        if (life.lock()) OnDone(id, s);
      });
  Heartbeat();
}

void Agent::Impl::OnData(const std::string& id, std::string_view data) {
  auto it = attempts_.find(id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (a.status != 200) {
    if (a.error_body.size() < 65536) a.error_body.append(data);
    return;
  }
  a.buffer.append(data);
  size_t end;
  while ((end = a.buffer.find("\n\n")) != std::string::npos) {
    std::string event = a.buffer.substr(0, end);
    a.buffer.erase(0, end + 2);
    if (event.rfind("data: ", 0) == 0) OnEvent(a, std::string_view(event).substr(6));
    if (attempts_.find(id) == attempts_.end()) return;  // finished inside
  }
  MaybeFlush(a);
}

void Agent::Impl::OnEvent(Attempt& a, std::string_view data) {
  if (data == "[DONE]") {
    FlushChunk(a);
    protocol::Complete c;
    c.attempt_id = a.id;
    c.finish_reason = a.finish_reason == "length" ? "length" : "stop";
    c.prompt_tokens = a.prompt_tokens;
    c.completion_tokens = a.completion_tokens;
    Send(c);
    return Finish(a.id);
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  if (j.contains("error")) {
    FlushChunk(a);
    const json& e = j["error"];
    std::string code = "generation_failed", message = "generation failed";
    if (e.is_object() && e.contains("code") && e["code"].is_string()) code = e["code"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) message = e["message"];
    SendError(a.id, code, message, 500);
    return Finish(a.id);
  }
  if (j.contains("prompt_token_ids") && !a.accepted) {
    protocol::Accepted acc;
    acc.attempt_id = a.id;
    acc.prompt_token_ids = TokenIds(j["prompt_token_ids"]);
    a.prompt_tokens = static_cast<int64_t>(acc.prompt_token_ids.size());
    a.accepted = true;
    Send(acc);
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
  const json& choice = j["choices"][0];
  if (!choice.is_object()) return;
  std::string text;
  if (choice.contains("delta") && choice["delta"].is_object() && choice["delta"].contains("content") &&
      choice["delta"]["content"].is_string()) {
    text = choice["delta"]["content"].get<std::string>();
  } else if (choice.contains("text") && choice["text"].is_string()) {
    text = choice["text"].get<std::string>();
  }
  std::vector<int32_t> ids;
  if (choice.contains("token_ids")) ids = TokenIds(choice["token_ids"]);
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    a.finish_reason = choice["finish_reason"].get<std::string>();
  }
  // A scoring request's log-probabilities (completions' shape: token_logprobs, and top_logprobs
  // maps whose largest value is the most likely token's), one per token id or none at all.
  const json* lp =
      choice.contains("logprobs") && choice["logprobs"].is_object() ? &choice["logprobs"] : nullptr;
  if (lp != nullptr && !ids.empty() && lp->contains("token_logprobs") &&
      (*lp)["token_logprobs"].is_array() && (*lp)["token_logprobs"].size() == ids.size()) {
    const json& values = (*lp)["token_logprobs"];
    const json* tops = lp->contains("top_logprobs") && (*lp)["top_logprobs"].is_array() &&
                               (*lp)["top_logprobs"].size() == ids.size()
                           ? &(*lp)["top_logprobs"]
                           : nullptr;
    // A value JSON cannot carry (-inf reads null) is the least possible.
    auto clamp = [](const json& v) {
      const double d = v.is_number() ? v.get<double>() : protocol::kMinLogprob;
      return std::clamp(d, protocol::kMinLogprob, protocol::kMaxLogprob);
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      const double own = clamp(values[i]);
      double best = own;
      if (tops != nullptr && (*tops)[i].is_object()) {
        for (const auto& [piece, v] : (*tops)[i].items()) best = std::max(best, clamp(v));
      }
      a.pending_logprobs.push_back(own);
      a.pending_best.push_back(best);
    }
  }
  // Pieces go up together, paced by MaybeFlush after the read.
  a.pending_text += text;
  a.pending_ids.insert(a.pending_ids.end(), ids.begin(), ids.end());
}

void Agent::Impl::FlushChunk(Attempt& a) {
  if (a.pending_text.empty() && a.pending_ids.empty()) return;
  protocol::Chunk c;
  c.attempt_id = a.id;
  c.index = a.index++;
  c.text = std::move(a.pending_text);
  c.token_ids = std::move(a.pending_ids);
  if (a.pending_logprobs.size() == c.token_ids.size()) {
    c.logprobs = std::move(a.pending_logprobs);
    c.best_logprobs = std::move(a.pending_best);
  }
  a.pending_text.clear();
  a.pending_ids.clear();
  a.pending_logprobs.clear();
  a.pending_best.clear();
  a.completion_tokens += static_cast<int64_t>(c.token_ids.size());
  a.last_flush = base::NowSeconds();
  Send(c);
}

void Agent::Impl::MaybeFlush(Attempt& a) {
  if (a.pending_text.empty() && a.pending_ids.empty()) return;
  const double now = base::NowSeconds();
  const double due = a.last_flush + options_.chunk_interval_s;
  if (a.last_flush == 0 || due <= now) return FlushChunk(a);
  if (flush_at_ != 0 && flush_at_ <= due) return;  // armed early enough
  flush_at_ = due;
  flush_.expires_after(std::chrono::microseconds(static_cast<int64_t>((due - now) * 1e6) + 1));
  std::weak_ptr<int> life = life_;
  flush_.async_wait([this, life](const boost::system::error_code& ec) {
    if (!ec && life.lock()) OnFlushTimer();
  });
}

void Agent::Impl::OnFlushTimer() {
  flush_at_ = 0;
  for (auto& [id, a] : attempts_) MaybeFlush(a);
}

void Agent::Impl::OnDone(const std::string& id, const Status& s) {
  auto it = attempts_.find(id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (a.status != 200 && a.status != 0) {
    // The child refused the request: pass its OpenAI error on with its status.
    json j = json::parse(a.error_body, nullptr, false);
    std::string message = "loom serve answered " + std::to_string(a.status);
    std::string code = "request_refused";
    if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object()) {
      if (j["error"].contains("message") && j["error"]["message"].is_string()) {
        message = j["error"]["message"].get<std::string>();
      }
      if (j["error"].contains("code") && j["error"]["code"].is_string()) {
        code = j["error"]["code"].get<std::string>();
      }
    }
    SendError(id, code, message, a.status);
  } else if (!s.ok() && s.code() != StatusCode::kCancelled) {
    SendError(id, "generation_failed", s.ToString(), 502);
  } else if (s.ok()) {
    SendError(id, "generation_failed", "the stream ended without [DONE]", 502);
  }
  Finish(id);
}

void Agent::Impl::Finish(const std::string& id) {
  auto it = attempts_.find(id);
  if (it == attempts_.end()) return;
  std::shared_ptr<net::ClientCall> call = std::move(it->second.call);
  const std::string model = it->second.model;
  attempts_.erase(it);
  if (call) call->Cancel();  // no-op when it already ended
  if (unload_pending_.count(model) &&
      std::none_of(attempts_.begin(), attempts_.end(),
                   [&](const auto& a) { return a.second.model == model; })) {
    Unload(model);
  }
  MaybeDrained();
}

bool Agent::Impl::Paused() {
  return paused_ || !schedule_.Allows(LocalMinuteOfDay());
}

void Agent::Impl::Heartbeat() {
  if (options_.busy_threshold > 0) {
    std::vector<int> pids;
    for (const auto& [n, s] : servers_) pids.push_back(s->pid());
    paused_ = busy_.Sample(pids) > options_.busy_threshold;
  }
  // A child that died takes its model out of memory.
  for (auto it = servers_.begin(); it != servers_.end();) {
    it = it->second->exited() ? servers_.erase(it) : std::next(it);
  }
  WriteStatus();
  if (!welcomed_) return;
  protocol::Heartbeat h;
  int32_t running = 0, waiting = 0;
  for (const auto& [id, a] : attempts_) (a.waiting_for_load ? waiting : running) += 1;
  h.running = running;
  h.waiting = waiting;
  h.mem_free_bytes = MemFree();
  h.draining = draining_;
  h.paused = Paused();
  for (const auto& [name, s] : servers_) {
    if (s->ready()) h.loaded.push_back(name);
  }
  Send(h);
  heartbeat_.expires_after(std::chrono::milliseconds(heartbeat_ms_));
  std::weak_ptr<int> life = life_;
  heartbeat_.async_wait([this, life](const boost::system::error_code& ec) {
    if (!ec && life.lock()) Heartbeat();
  });
}

void Agent::Impl::WriteStatus() {
  json models = json::array();
  for (const protocol::ModelInfo& m : ModelInfos()) {
    models.push_back(json{{"name", m.name}, {"loaded", m.loaded}, {"weight_bytes", m.weight_bytes},
                          {"sha256", m.sha256}});
  }
  json attempts = json::array();
  for (const auto& [id, a] : attempts_) {
    attempts.push_back(json{{"attempt_id", id}, {"model", a.model}, {"tokens", a.completion_tokens},
                            {"loading", a.waiting_for_load}});
  }
  json s{{"node_id", identity_.node_id}, {"hub_url", identity_.hub_url},
         {"connected", welcomed_}, {"draining", draining_}, {"paused", Paused()},
         {"pid", static_cast<int64_t>(::getpid())}, {"mem_lendable_bytes", max_memory_},
         {"mem_free_bytes", MemFree()}, {"mem_bandwidth_gbps", facts_.mem_bandwidth_gbps},
         {"models", models}, {"attempts", attempts}};
  if (slot_) s["reserve"] = slot_->model;
  if (standing_) {
    json recent = json::array();
    for (const protocol::Earning& e : standing_->recent) {
      recent.push_back(json{{"kind", e.kind}, {"ref", e.ref}, {"model", e.model},
                            {"tokens", e.tokens}, {"micro", e.micro}, {"at_ms", e.at_ms}});
    }
    s["standing"] = json{{"pending_micro", standing_->pending_micro},
                         {"available_micro", standing_->available_micro},
                         {"recent", recent},
                         {"idle_reasons", standing_->idle_reasons},
                         {"slot", standing_->slot}};
  }
  const std::string tmp = options_.dir + "/status.json.tmp";
  std::ofstream out(tmp);
  out << s.dump(1) << "\n";
  out.close();
  std::error_code ec;
  if (out) fs::rename(tmp, options_.dir + "/status.json", ec);
}

void Agent::Impl::MaybeDrained() {
  if (!draining_ || !drained_ || !attempts_.empty()) return;
  auto done = std::move(drained_);
  drained_ = nullptr;
  heartbeat_.cancel();
  reconnect_.cancel();
  if (ws_) ws_->Close("draining: done");
  servers_.clear();
  done();
}

StatusOr<std::unique_ptr<Agent>> Agent::Create(boost::asio::io_context& io, AgentOptions options) {
  auto impl = std::make_unique<Impl>(io, std::move(options));
  LOOM_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;
void Agent::Start() { impl_->Connect(); }
void Agent::Drain(std::function<void()> done) {
  impl_->draining_ = true;
  impl_->drained_ = std::move(done);
  impl_->Heartbeat();
  impl_->MaybeDrained();
}

}  // namespace loom::network::node
