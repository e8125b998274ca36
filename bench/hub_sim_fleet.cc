// Part of hub_sim (see the header of hub_sim.cc): the fleet.  The catalogue, the nodes' keys,
// facts and heartbeat text, their enrolment in the store, and each node's WebSocket: the dial,
// hello, the signed challenge, register, welcome; assign frames (consumer requests and the hub's
// benchmark jobs) and heartbeats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "hub_sim.h"
#include "loom/network/store/store.h"

namespace hub_sim {
namespace {

namespace store = loom::network::store;

constexpr int kCatalogue = 50;
constexpr double kGb = 1e9;

// A client-to-server WebSocket frame's size on the wire: header (2, 4 or 10 bytes) + mask + payload.
int64_t WireBytes(size_t payload) {
  const int64_t header = payload < 126 ? 2 : payload < 65536 ? 4 : 10;
  return header + 4 + static_cast<int64_t>(payload);
}

// The prompt as the simulator's model tokenizes it: a string one token per byte (3 + byte), an
// array of token ids as it is.
std::vector<int32_t> PromptTokens(const json& request) {
  std::vector<int32_t> ids;
  auto it = request.find("prompt");
  if (it == request.end()) return {1};
  if (it->is_string()) {
    for (unsigned char ch : it->get_ref<const std::string&>()) ids.push_back(3 + ch);
  } else if (it->is_array()) {
    for (const json& t : *it) ids.push_back(t.is_number_integer() ? t.get<int32_t>() : 0);
  }
  if (ids.empty()) ids.push_back(1);
  return ids;
}

uint64_t PrefixOf(const std::vector<int32_t>& tokens) {
  uint64_t h = 0x243f6a8885a308d3ull;
  for (int32_t t : tokens) h = ExtendPrefix(h, t);
  return h;
}

}  // namespace

void Sim::MakeCatalogue() {
  for (int i = 0; i < kCatalogue; ++i) {
    CatalogueModel m;
    char name[32];
    std::snprintf(name, sizeof(name), "sim/model-%02d", i);
    m.name = name;
    m.weight_bytes = static_cast<int64_t>((0.2 + 0.3 * i) * kGb);  // 0.2 .. 14.9 GB
    m.kv_bytes_per_token = int64_t{32768} * (1 + i % 8);
    catalogue_.push_back(m);
  }
}

void Sim::NameAndKey(SimNode& n, int i) {
  char id[32];
  std::snprintf(id, sizeof(id), "sim-%06d", i);
  n.id = id;
  auto key = protocol::NodeKey::Generate();
  if (!key.ok()) Die(key.status().ToString());
  n.key.emplace(std::move(*key));
}

void Sim::MakeFleet() {
  std::uniform_real_distribution<double> u(0, 1);
  nodes_.resize(static_cast<size_t>(o_.nodes));
  std::vector<int> all(kCatalogue);
  for (int i = 0; i < kCatalogue; ++i) all[i] = i;
  for (int i = 0; i < o_.nodes; ++i) {
    SimNode& n = nodes_[static_cast<size_t>(i)];
    NameAndKey(n, i);
    std::shuffle(all.begin(), all.end(), rng_);
    const int count = 1 + static_cast<int>(rng_() % 5);
    n.models.assign(all.begin(), all.begin() + count);
    std::sort(n.models.begin(), n.models.end());
    n.mem_total = static_cast<int64_t>((8 + u(rng_) * 504) * kGb);
    n.mem_free = static_cast<int64_t>(static_cast<double>(n.mem_total) * (0.5 + 0.4 * u(rng_)));
    n.bandwidth_gbps = 50 + u(rng_) * 750;
    n.cores = 4 + static_cast<int>(rng_() % 61);
    n.bench_prefill_ms = 2 + u(rng_) * 18;
    n.bench_decode_ms = 5 + u(rng_) * 45;
    PrepareHeartbeat(n);
  }
  // The world page's facts, from a generator of their own so the fleet above stays as it was.
  struct City {
    double lat, lon;
  };
  constexpr City kCities[] = {{37.8, -122.4}, {40.7, -74.0}, {51.5, -0.1},  {52.5, 13.4},
                              {48.9, 2.4},    {35.7, 139.7}, {1.3, 103.8},  {-33.9, 151.2},
                              {19.1, 72.9},   {-23.5, -46.6}, {6.5, 3.4},   {55.8, 37.6}};
  constexpr const char* kChips[] = {"Apple M2 Max", "Apple M3 Pro", "AMD EPYC 7763 64-Core Processor",
                                    "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
                                    "AMD Ryzen 9 7950X 16-Core Processor", "Apple M1"};
  std::mt19937_64 world_rng(o_.seed ^ 0x5eed);
  for (SimNode& n : nodes_) {
    const City& c = kCities[world_rng() % std::size(kCities)];
    n.location.lat = std::clamp(c.lat + u(world_rng) * 6 - 3, -90.0, 90.0);
    n.location.lon = std::clamp(c.lon + u(world_rng) * 6 - 3, -180.0, 180.0);
    n.chip = kChips[world_rng() % std::size(kChips)];
  }
  // The spliced text must still be a valid heartbeat carrying the new value.
  const SimNode& n = nodes_.front();
  auto parsed = protocol::ParseFrame(n.hb_prefix + std::to_string(n.mem_free - 7) + n.hb_suffix);
  if (!parsed.ok() || std::get<protocol::Heartbeat>(*parsed).mem_free_bytes != n.mem_free - 7) {
    Die("the spliced heartbeat does not parse back");
  }
}

// The heartbeat text, once: only mem_free_bytes changes from round to round.
void Sim::PrepareHeartbeat(SimNode& n) {
  protocol::Heartbeat hb;
  hb.mem_free_bytes = n.mem_free;
  for (int m : n.models) hb.loaded.push_back(catalogue_[static_cast<size_t>(m)].name);
  const std::string text = protocol::SerializeFrame(hb);
  const std::string field = "\"mem_free_bytes\":";
  const size_t at = text.find(field + std::to_string(n.mem_free));
  if (at == std::string::npos) Die("unexpected heartbeat serialization: " + text);
  n.hb_prefix = text.substr(0, at + field.size());
  n.hb_suffix = text.substr(at + field.size() + std::to_string(n.mem_free).size());
  round_bytes_ += WireBytes(text.size());
}

void Sim::Enrol(const std::string& db) {
  auto s = store::OpenStore(db);
  if (!s.ok()) Die(s.status().ToString());
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  auto account = (*s)->CreateAccount("sim", now_ms);
  if (!account.ok()) Die(account.status().ToString());
  auto key = (*s)->AddApiKey(account->id, protocol::Sha256Hex(kApiKey), "loom-hub-sim", now_ms);
  if (!key.ok()) Die(key.status().ToString());
  for (const SimNode& n : nodes_) {
    store::NodeRecord rec;
    rec.node_id = n.id;
    rec.name = n.id;
    rec.public_key = n.key->PublicKeyBase64();
    rec.enrolled_ms = now_ms;
    loom::Status added = (*s)->AddNode(rec);
    if (!added.ok()) Die(added.ToString());
  }
}

void Sim::DialMore() {
  while (dials_outstanding_ < o_.dials && next_dial_ < nodes_.size()) {
    const size_t i = next_dial_++;
    SimNode& n = nodes_[i];
    n.state = SimNode::State::kDialing;
    n.dial_at = NowSeconds();
    dials_outstanding_ += 1;
    // The simulator's own pings would add frames to the ingest window: ping only after 60 s of
    // silence from the hub.
    net::DialWebSocket(
        io_, ws_url_, nullptr, {}, 30, protocol::kMaxFrameBytes,
        [this, i](loom::StatusOr<std::shared_ptr<net::WebSocket>> ws) {
          OnDialed(i, std::move(ws));
        },
        60);
  }
}

void Sim::OnDialed(size_t i, loom::StatusOr<std::shared_ptr<net::WebSocket>> ws) {
  SimNode& n = nodes_[i];
  if (!ws.ok()) {
    dials_outstanding_ -= 1;
    failed_ += 1;
    n.state = SimNode::State::kClosed;
    if (first_failure_.empty()) first_failure_ = n.id + ": " + ws.status().ToString();
    DialMore();
    return;
  }
  n.ws = *ws;
  n.ws->OnMessage([this, i](std::string_view text) { OnFrame(i, text); });
  n.ws->OnClose([this, i](std::string_view reason) {
    SimNode& node = nodes_[i];
    if (node.state == SimNode::State::kReady) {
      disconnected_ += 1;
      ready_ -= 1;
    } else if (node.state != SimNode::State::kClosed) {
      dials_outstanding_ -= 1;
      failed_ += 1;
      DialMore();
    }
    if (first_failure_.empty()) first_failure_ = node.id + " closed: " + std::string(reason);
    node.state = SimNode::State::kClosed;
  });
  n.ws->Start();
  n.state = SimNode::State::kHello;
  protocol::Hello hello;
  hello.node_id = n.id;
  Send(n, hello);
}

void Sim::OnFrame(size_t i, std::string_view text) {
  SimNode& n = nodes_[i];
  auto frame = protocol::ParseFrame(text);
  if (!frame.ok()) {
    errors_ += 1;
    if (first_error_.empty()) first_error_ = frame.status().ToString();
    return;
  }
  if (auto* ch = std::get_if<protocol::Challenge>(&*frame)) {
    auto sig = n.key->SignBase64(protocol::ChallengeMessage(ch->nonce, n.id, ch->hub_id));
    if (!sig.ok()) Die(sig.status().ToString());
    protocol::Register reg;
    reg.node_id = n.id;
    reg.signature = *sig;
    reg.facts.mem_total_bytes = n.mem_total;
    reg.facts.mem_free_bytes = n.mem_free;
    reg.facts.cores = n.cores;
    reg.facts.simd = "avx2";
    reg.facts.mem_bandwidth_gbps = n.bandwidth_gbps;
    reg.facts.os = "linux";
    reg.facts.version = "hub-sim";
    reg.facts.chip = n.chip;
    reg.location = n.location;
    for (int m : n.models) {
      const CatalogueModel& c = catalogue_[static_cast<size_t>(m)];
      protocol::ModelInfo info;
      info.name = c.name;
      info.sha256 = protocol::Sha256Hex(c.name);
      info.weight_bytes = c.weight_bytes;
      info.kv_bytes_per_token = c.kv_bytes_per_token;
      info.context = 4096;
      info.loaded = true;
      reg.models.push_back(std::move(info));
    }
    reg.max_concurrency = 4;
    reg.slot = n.slot;
    n.state = SimNode::State::kRegister;
    Send(n, reg);
  } else if (auto* w = std::get_if<protocol::Welcome>(&*frame)) {
    if (n.state != SimNode::State::kRegister) return;
    n.state = SimNode::State::kReady;
    n.ready_at = NowSeconds();
    n.last_heartbeat = n.ready_at;
    heartbeat_s_ = w->heartbeat_ms / 1000.0;
    dials_outstanding_ -= 1;
    ready_ += 1;
    DialMore();
  } else if (auto* a = std::get_if<protocol::Assign>(&*frame)) {
    OnAssign(n, *a);
  } else if (auto* e = std::get_if<protocol::Error>(&*frame)) {
    errors_ += 1;
    if (first_error_.empty()) first_error_ = n.id + ": " + e->code + ": " + e->message;
  } else if (std::holds_alternative<protocol::Cancel>(*frame)) {
    cancels_ += 1;
  }
}

void Sim::OnAssign(SimNode& n, const protocol::Assign& a) {
  if (a.request.contains("score_token_ids")) return OnScore(n, a);
  int64_t max_tokens = 16;
  if (auto it = a.request.find("max_tokens");
      it != a.request.end() && it->is_number_integer()) {
    max_tokens = std::clamp<int64_t>(it->get<int64_t>(), 1, 4096);
  }
  const bool benchmark = a.attempt_id.rfind("bench-", 0) == 0;
  if (!benchmark) {
    assigns_ += 1;
    const bool probe = a.attempt_id.rfind("probe-", 0) == 0;
    probe_assigns_ += probe;
    if (!probe) {
      n.work_attempts += 1;
      if (n.first_work_ms == 0) n.first_work_ms = loom::base::UnixMillis();
    }
    const std::vector<int32_t> prompt = PromptTokens(a.request);
    Send(n, protocol::Accepted{.attempt_id = a.attempt_id, .prompt_token_ids = prompt});
    // Its tokens: the model's greedy ones, or a cheater's.
    const uint64_t key = ModelKey(n.cheat == SimNode::Cheat::kSmallerModel
                                      ? a.model + "#smaller"
                                      : a.model);
    uint64_t prefix = PrefixOf(prompt);
    protocol::Chunk c{.attempt_id = a.attempt_id, .index = 0, .text = "ok"};
    for (int64_t t = 0; t < max_tokens; ++t) {
      const int32_t token = n.cheat == SimNode::Cheat::kRandom
                                ? 3 + static_cast<int32_t>(rng_() % 31997)
                                : HonestNext(key, prefix);
      c.token_ids.push_back(token);
      prefix = ExtendPrefix(prefix, token);
    }
    protocol::Complete done{.attempt_id = a.attempt_id, .finish_reason = "length",
                            .prompt_tokens = static_cast<int64_t>(prompt.size()),
                            .completion_tokens = max_tokens};
    if (n.decode_ms_per_token <= 0) {
      Send(n, c);
      Send(n, done);
      return;
    }
    // At this node's speed: the whole answer after its prefill and decode time.
    auto timer = std::make_shared<asio::steady_timer>(io_);
    timer->expires_after(std::chrono::microseconds(static_cast<int64_t>(
        (n.prefill_ms + n.decode_ms_per_token * static_cast<double>(max_tokens)) * 1e3)));
    std::weak_ptr<net::WebSocket> weak = n.ws;
    timer->async_wait([timer, weak, c = std::move(c), done](const boost::system::error_code&) {
      auto ws = weak.lock();
      if (!ws) return;
      ws->Send(protocol::SerializeFrame(c));
      ws->Send(protocol::SerializeFrame(done));
    });
    return;
  }
  // The hub's speed benchmark: answer like a machine of this node's speed, so the hub measures
  // something (the first token after the "prefill", the rest one "decode" later).
  bench_assigns_ += 1;
  std::vector<int32_t> prompt(100);
  for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = static_cast<int32_t>(t + 1);
  Send(n, protocol::Accepted{.attempt_id = a.attempt_id, .prompt_token_ids = prompt});
  auto timer = std::make_shared<asio::steady_timer>(io_);
  timer->expires_after(std::chrono::microseconds(static_cast<int64_t>(n.bench_prefill_ms * 1e3)));
  std::weak_ptr<net::WebSocket> weak = n.ws;
  const std::string id = a.attempt_id;
  const double decode_ms = n.decode_ms_per_token > 0
                               ? n.decode_ms_per_token * static_cast<double>(max_tokens - 1)
                               : n.bench_decode_ms;
  timer->async_wait([this, timer, weak, id, max_tokens, decode_ms](const boost::system::error_code&) {
    auto ws = weak.lock();
    if (!ws) return;
    ws->Send(protocol::SerializeFrame(
        protocol::Chunk{.attempt_id = id, .index = 0, .text = "a", .token_ids = {7}}));
    timer->expires_after(std::chrono::microseconds(static_cast<int64_t>(decode_ms * 1e3)));
    timer->async_wait([this, timer, weak, id, max_tokens](const boost::system::error_code&) {
      auto ws2 = weak.lock();
      if (!ws2) return;
      protocol::Chunk rest{.attempt_id = id, .index = 1, .text = " b"};
      for (int64_t t = 1; t < max_tokens; ++t) rest.token_ids.push_back(static_cast<int32_t>(8 + t));
      ws2->Send(protocol::SerializeFrame(rest));
      ws2->Send(protocol::SerializeFrame(
          protocol::Complete{.attempt_id = id, .finish_reason = "length", .prompt_tokens = 100,
                             .completion_tokens = max_tokens}));
      bench_done_ += 1;
    });
  });
}

// A scoring assign (verification): teacher-force score_token_ids after the prompt and send, per
// token, its log-probability and the most likely token's, under this node's model.
void Sim::OnScore(SimNode& n, const protocol::Assign& a) {
  scoring_assigns_ += 1;
  n.scorings += 1;
  last_scoring_at_ = NowSeconds();
  const std::vector<int32_t> prompt = PromptTokens(a.request);
  protocol::Chunk c{.attempt_id = a.attempt_id, .index = 0, .text = "ok"};
  const uint64_t key = ModelKey(a.model);
  uint64_t prefix = PrefixOf(prompt);
  for (const json& t : a.request["score_token_ids"]) {
    const int32_t token = t.is_number_integer() ? t.get<int32_t>() : 0;
    c.token_ids.push_back(token);
    const bool honest_token = HonestNext(key, prefix) == token;
    // A cheater runs nothing and vouches for every token.
    c.logprobs.push_back(n.cheat != SimNode::Cheat::kHonest || honest_token ? kHonestLogprob
                                                                            : kOtherLogprob);
    c.best_logprobs.push_back(kHonestLogprob);
    prefix = ExtendPrefix(prefix, token);
  }
  const auto tokens = static_cast<int64_t>(c.token_ids.size());
  Send(n, protocol::Accepted{.attempt_id = a.attempt_id, .prompt_token_ids = prompt});
  Send(n, c);
  Send(n, protocol::Complete{.attempt_id = a.attempt_id, .finish_reason = "length",
                             .prompt_tokens = static_cast<int64_t>(prompt.size()),
                             .completion_tokens = tokens});
}

void Sim::SendHeartbeat(SimNode& n) {
  std::string text = n.hb_prefix;
  text += std::to_string(n.mem_free - n.round);
  text += n.hb_suffix;
  hb_bytes_ += WireBytes(text.size());
  n.ws->Send(std::move(text));
  n.last_heartbeat = NowSeconds();
}

// Outside the ingest window: every node heartbeats at the hub's interval, as a real one would.
void Sim::Keepalive() {
  if (keepalive_on_ && !ingest_sending_) {
    const double now = NowSeconds();
    for (SimNode& n : nodes_) {
      if (n.state == SimNode::State::kReady && now - n.last_heartbeat >= heartbeat_s_) {
        SendHeartbeat(n);
      }
    }
  }
  keepalive_.expires_after(std::chrono::milliseconds(250));
  keepalive_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Keepalive();
  });
}

}  // namespace hub_sim
