// Node connections: the challenge handshake, the registry of ready nodes (the fleet placement
// reads), heartbeats and their deadlines, enrolment, and the hub's own speed benchmarks.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loom/base/clock.h"
#include "loom/network/hub/hub_impl.h"
#include "loom/network/protocol/identity.h"

namespace loom::network::hub {
namespace {

// The prompt of the hub's benchmark job: plain text every tokenizer handles, long enough that the
// time to its first token measures prefill rather than the round trip.
std::string BenchmarkPrompt() {
  std::string p;
  for (int i = 0; i < 8; ++i) {
    p += "Once upon a time, in a small town by the sea, there lived a curious child. ";
  }
  return p;
}
constexpr int64_t kBenchmarkTokens = 32;

}  // namespace

NodeConn* Hub::Impl::ReadyNode(const std::string& node_id) {
  auto it = ready_.find(node_id);
  if (it == ready_.end()) return nullptr;
  auto c = conns_.find(it->second);
  return c == conns_.end() ? nullptr : c->second.get();
}

void Hub::Impl::OnNodeSocket(std::shared_ptr<net::WebSocket> ws) {
  auto c = std::make_unique<NodeConn>();
  c->conn_id = next_conn_++;
  c->ws = ws;
  c->remote = ws->remote();
  c->connected_at = base::NowSeconds();
  c->phase_deadline = c->connected_at + 10;
  const uint64_t id = c->conn_id;
  conns_[id] = std::move(c);
  std::weak_ptr<int> life = life_;
  ws->OnMessage([this, life, id](std::string_view text) {
    if (life.lock()) OnNodeMessage(id, text);
  });
  ws->OnClose([this, life, id](std::string_view reason) {
    if (life.lock()) OnNodeClosed(id, reason);
  });
  ws->Start();
}

void Hub::Impl::RejectNode(NodeConn& c, std::string code, std::string message, int status) {
  std::fprintf(stderr, "hub: node connection %s%s%s refused: %s\n", c.remote.c_str(),
               c.node_id.empty() ? "" : " claiming ", c.node_id.c_str(), message.c_str());
  protocol::Error e;
  e.code = std::move(code);
  e.message = message.substr(0, protocol::kMaxMessageBytes);
  e.status = status;
  SendFrame(c, e);
  c.ws->Close("policy: " + message.substr(0, 100));
}

void Hub::Impl::OnNodeMessage(uint64_t conn_id, std::string_view text) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end()) return;
  NodeConn& c = *it->second;
  StatusOr<protocol::Frame> frame = protocol::ParseFrame(text);
  if (!frame.ok()) {
    // A frame that fails validation ends this connection only.
    return RejectNode(c, "bad_frame", frame.status().message(), 400);
  }
  if (c.phase == NodeConn::Phase::kHello) {
    if (auto* hello = std::get_if<protocol::Hello>(&*frame)) return HandleHello(c, *hello);
    return RejectNode(c, "unexpected_frame", "the first frame must be 'hello'", 400);
  }
  if (c.phase == NodeConn::Phase::kRegister) {
    if (auto* reg = std::get_if<protocol::Register>(&*frame)) return HandleRegister(c, *reg);
    return RejectNode(c, "unexpected_frame", "expected 'register' answering the challenge", 400);
  }
  std::visit(
      [&](const auto& f) {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, protocol::Heartbeat>) {
          const std::vector<std::string> before = std::move(c.last.loaded);
          c.last = f;
          c.last_heartbeat = base::NowSeconds();
          NoteLoaded(c, before, c.last_heartbeat);
          UpdateLoad(c);
          StartBenchmarks(c);  // a model that finished loading gets measured
        } else if constexpr (std::is_same_v<F, protocol::Capacity>) {
          c.models = f.models;
          c.max_concurrency = f.max_concurrency;
          c.last.mem_free_bytes = f.mem_free_bytes;
          UpdateFleet(c);
          StartBenchmarks(c);
        } else if constexpr (std::is_same_v<F, protocol::Accepted>) {
          OnAccepted(c, f);
        } else if constexpr (std::is_same_v<F, protocol::Chunk>) {
          OnChunk(c, f);
        } else if constexpr (std::is_same_v<F, protocol::Complete>) {
          OnComplete(c, f);
        } else if constexpr (std::is_same_v<F, protocol::Error>) {
          OnNodeError(c, f);
        } else {
          RejectNode(c, "unexpected_frame",
                     "a node may not send '" + std::string(protocol::FrameTypeName(*frame)) + "'",
                     400);
        }
      },
      *frame);
  DrainQueues();
}

void Hub::Impl::HandleHello(NodeConn& c, const protocol::Hello& f) {
  c.node_id = f.node_id;
  StatusOr<std::optional<store::NodeRecord>> record = store_->FindNode(f.node_id);
  if (!record.ok()) return RejectNode(c, "hub_error", record.status().message(), 500);
  if (!record->has_value()) {
    return RejectNode(c, "unenrolled",
                      "node '" + f.node_id + "' is not enrolled here (run `loom node enroll`)",
                      401);
  }
  c.public_key = (*record)->public_key;
  c.name = (*record)->name;
  c.nonce = protocol::RandomBase64(protocol::kNonceBytes);
  c.phase = NodeConn::Phase::kRegister;
  protocol::Challenge ch;
  ch.nonce = c.nonce;
  ch.hub_id = options_.hub_id;
  SendFrame(c, ch);
}

void Hub::Impl::HandleRegister(NodeConn& c, const protocol::Register& f) {
  if (f.node_id != c.node_id) {
    return RejectNode(c, "bad_identity", "register names another node than hello", 401);
  }
  // The signature covers this connection's fresh nonce: an answer recorded on another connection
  // (or for another hub) does not verify.
  Status verified = protocol::VerifySignature(
      c.public_key, protocol::ChallengeMessage(c.nonce, c.node_id, options_.hub_id), f.signature);
  if (!verified.ok()) {
    return RejectNode(c, "bad_signature",
                      "the challenge signature does not verify with the enrolled key", 401);
  }
  // One live connection per node: a new one replaces the old (the node reconnected).
  if (NodeConn* old = ReadyNode(f.node_id); old != nullptr && old != &c) {
    const uint64_t old_id = old->conn_id;
    old->ws->Close("replaced by a new connection of the same node");
    OnNodeClosed(old_id, "replaced by a new connection");
  }
  c.facts = f.facts;
  // Self-reported numbers are clamped, never trusted beyond what the machine could hold.
  c.facts.mem_free_bytes = std::min(c.facts.mem_free_bytes, c.facts.mem_total_bytes);
  c.models = f.models;
  c.pod = f.pod;
  c.slot = f.slot;
  c.location = f.location;
  c.max_concurrency = f.max_concurrency;
  c.last = protocol::Heartbeat{};
  c.last.mem_free_bytes = c.facts.mem_free_bytes;
  for (const auto& m : c.models) {
    if (m.loaded) c.last.loaded.push_back(m.name);
  }
  c.last_heartbeat = base::NowSeconds();
  c.phase = NodeConn::Phase::kReady;
  ready_[c.node_id] = c.conn_id;
  OfferSlot(c);
  UpdateFleet(c);
  LogError(store_->TouchNode(c.node_id, base::UnixMillis()));
  NoteNodeUp(c);
  protocol::Welcome w;
  w.node_id = c.node_id;
  w.heartbeat_ms = static_cast<int32_t>(options_.heartbeat_s * 1000);
  SendFrame(c, w);
  std::fprintf(stderr, "hub: node %s (%s) ready from %s: %zu model(s), %.1f GB free\n",
               c.node_id.c_str(), c.name.c_str(), c.remote.c_str(), c.models.size(),
               static_cast<double>(c.facts.mem_free_bytes) / 1e9);
  StartBenchmarks(c);
}

void Hub::Impl::UpdateFleet(NodeConn& c) {
  if (c.phase != NodeConn::Phase::kReady) return;
  if (c.fleet_index < 0) {
    c.fleet_index = static_cast<int64_t>(fleet_.size());
    fleet_.emplace_back();
    fleet_conn_.push_back(c.conn_id);
  }
  placement::Target& t = fleet_[static_cast<size_t>(c.fleet_index)];
  models_dirty_ = true;
  t.id = c.node_id;
  t.ranks = c.pod ? c.pod->tp * c.pod->pp : 1;
  t.max_concurrency = c.max_concurrency;
  t.mem_bandwidth_gbps = c.facts.mem_bandwidth_gbps;
  t.models.resize(c.models.size());
  const auto& speeds = measured_[c.node_id];
  for (size_t i = 0; i < c.models.size(); ++i) {
    const protocol::ModelInfo& m = c.models[i];
    placement::ModelOffer& o = t.models[i];
    o.name = m.name;
    o.weight_bytes = m.weight_bytes;
    o.kv_bytes_per_token = m.kv_bytes_per_token;
    o.context = m.context;
    auto s = speeds.find(m.name);
    o.prefill_tps = s == speeds.end() ? 0 : s->second.prefill_tps;
    o.decode_tps = s == speeds.end() ? 0 : s->second.decode_tps;
  }
  UpdateLoad(c);
}

void Hub::Impl::UpdateLoad(NodeConn& c) {
  if (c.fleet_index < 0) return;
  placement::Target& t = fleet_[static_cast<size_t>(c.fleet_index)];
  t.draining = c.last.draining;
  t.paused = c.last.paused;
  t.mem_free_bytes = std::min(c.last.mem_free_bytes, c.facts.mem_total_bytes);
  // The hub's own count of what it sent there, or the node's if larger (its owner's requests).
  t.running = std::max<int32_t>(static_cast<int32_t>(c.attempts.size()), c.last.running);
  t.waiting = c.last.waiting;
  const int64_t now_ms = base::UnixMillis();
  for (placement::ModelOffer& o : t.models) {
    o.loaded = std::find(c.last.loaded.begin(), c.last.loaded.end(), o.name) != c.last.loaded.end();
    o.reserved = SlotReserves(c.node_id, o.name, now_ms);
  }
}

void Hub::Impl::RemoveFromFleet(NodeConn& c) {
  if (c.fleet_index < 0) return;
  models_dirty_ = true;
  const size_t i = static_cast<size_t>(c.fleet_index);
  const size_t last = fleet_.size() - 1;
  if (i != last) {
    fleet_[i] = std::move(fleet_[last]);
    fleet_conn_[i] = fleet_conn_[last];
    conns_.at(fleet_conn_[i])->fleet_index = static_cast<int64_t>(i);
  }
  fleet_.pop_back();
  fleet_conn_.pop_back();
  c.fleet_index = -1;
}

void Hub::Impl::OnNodeClosed(uint64_t conn_id, std::string_view reason) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end()) return;
  RemoveFromFleet(*it->second);
  std::unique_ptr<NodeConn> c = std::move(it->second);
  conns_.erase(it);
  if (c->phase == NodeConn::Phase::kReady) {
    std::fprintf(stderr, "hub: node %s disconnected (%.*s)\n", c->node_id.c_str(),
                 static_cast<int>(reason.size()), reason.data());
    auto r = ready_.find(c->node_id);
    if (r != ready_.end() && r->second == conn_id) {
      ready_.erase(r);
      NoteNodeDown(*c);  // (a connection replaced by a newer one: the new session closed it)
    }
    const std::string why = "node " + c->node_id + " disconnected (" + std::string(reason) + ")";
    for (const std::string& attempt : std::set<std::string>(c->attempts)) {
      if (Job* job = JobOfAttempt(attempt)) FailAttempt(*job, why);
    }
  }
  DrainQueues();
}

void Hub::Impl::CheckNodes(double now) {
  std::vector<uint64_t> drop;
  for (auto& [id, c] : conns_) {
    if (c->phase != NodeConn::Phase::kReady) {
      if (now > c->phase_deadline) drop.push_back(id);
      continue;
    }
    const double age = now - c->last_heartbeat;
    placement::Target& t = fleet_[static_cast<size_t>(c->fleet_index)];
    if (age > options_.offline_s) {
      drop.push_back(id);
    } else {
      t.state = age > options_.suspect_s ? placement::TargetState::kSuspect
                                         : placement::TargetState::kOnline;
    }
  }
  for (uint64_t id : drop) {
    NodeConn& c = *conns_.at(id);
    const bool ready = c.phase == NodeConn::Phase::kReady;
    c.ws->Close(ready ? "offline: no heartbeat" : "policy: no handshake in time");
    OnNodeClosed(id, ready ? "no heartbeat" : "no handshake in time");
  }
}

void Hub::Impl::StartBenchmarks(NodeConn& c) {
  if (c.phase != NodeConn::Phase::kReady || c.last.draining || c.last.paused) return;
  const auto& speeds = measured_[c.node_id];
  for (const protocol::ModelInfo& m : c.models) {
    const bool loaded =
        std::find(c.last.loaded.begin(), c.last.loaded.end(), m.name) != c.last.loaded.end();
    if (!loaded || speeds.count(m.name) || c.benchmarking.count(m.name)) continue;
    auto retry = bench_retry_at_.find(c.node_id + " " + m.name);
    if (retry != bench_retry_at_.end() && base::NowSeconds() < retry->second) continue;
    auto job = std::make_unique<Job>();
    job->id = "bench-" + std::to_string(next_id_++);
    job->model = m.name;
    job->benchmark = true;
    job->created_at = base::NowSeconds();
    job->request = json{{"model", m.name}, {"prompt", BenchmarkPrompt()},
                        {"max_tokens", kBenchmarkTokens}, {"temperature", 0},
                        {"ignore_eos", true}};
    job->max_tokens = kBenchmarkTokens;
    job->prompt_estimate = 128;
    c.benchmarking.insert(m.name);
    placement::Decision d;
    d.placed = true;
    d.target_id = c.node_id;
    Job& ref = *job;
    jobs_[job->id] = std::move(job);
    StartAttempt(ref, c, d);
  }
}

void Hub::Impl::Enroll(const net::Request& request,
                       const std::shared_ptr<net::Responder>& responder) {
  auto bad = [&](int status, const std::string& message, const std::string& code) {
    responder->Respond(status, "application/json",
                       ErrorBody(message, status == 401 ? "authentication_error"
                                                        : "invalid_request_error",
                                 code));
  };
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return bad(400, "the body must be a JSON object", "");
  for (const char* field : {"token", "public_key", "name"}) {
    if (!body.contains(field) || !body[field].is_string() || body[field].get_ref<const std::string&>().empty() ||
        body[field].get_ref<const std::string&>().size() > 256) {
      return bad(400, std::string("field '") + field + "' must be a non-empty string", "");
    }
  }
  const std::string& key = body["public_key"].get_ref<const std::string&>();
  StatusOr<std::string> raw = protocol::Base64Decode(key);
  if (!raw.ok() || raw->size() != 32) {
    return bad(400, "public_key must be the base64 of a 32-byte Ed25519 key", "bad_public_key");
  }
  std::string name = body["name"].get<std::string>();
  for (char& ch : name) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  const std::string node_id = "node-" + protocol::Sha256Hex(*raw).substr(0, 16);
  const std::string token_hash = protocol::Sha256Hex(body["token"].get_ref<const std::string&>());
  StatusOr<bool> used = store_->UseEnrollToken(token_hash, node_id, base::UnixMillis());
  if (!used.ok()) return bad(500, used.status().message(), "hub_error");
  if (!*used) {
    return bad(401, "the enrolment token is unknown, used or expired (make one with `loom hub "
                    "token create`)", "invalid_token");
  }
  // The operator account the token was made for (`token create --account`) owns the node.
  StatusOr<int64_t> owner = store_->EnrollTokenAccount(token_hash);
  if (!owner.ok()) return bad(500, owner.status().message(), "hub_error");
  store::NodeRecord node;
  node.account_id = *owner;
  node.node_id = node_id;
  node.name = name;
  node.public_key = key;
  node.enrolled_ms = base::UnixMillis();
  Status added = store_->AddNode(node);
  if (!added.ok()) {
    return bad(added.code() == StatusCode::kFailedPrecondition ? 409 : 500, added.message(),
               "node_exists");
  }
  std::fprintf(stderr, "hub: enrolled node %s (%s)%s\n", node_id.c_str(), name.c_str(),
               node.account_id != 0
                   ? (" for account " + std::to_string(node.account_id)).c_str()
                   : "");
  responder->Respond(200, "application/json",
                     json{{"node_id", node_id}, {"hub_id", options_.hub_id}}.dump());
}

}  // namespace loom::network::hub
