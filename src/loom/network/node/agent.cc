#include "loom/network/node/agent.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "loom/network/node/agent_impl.h"

namespace loom::network::node {

namespace fs = std::filesystem;

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

}  // namespace

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
