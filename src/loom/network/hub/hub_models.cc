// Residency: which models stay loaded where.  A node loads a model when the hub assigns it one it
// holds on disk (a cold start, priced by placement); beyond that the hub sends
//   unload_model  for a model idle on a node for unload_idle_s, unless it is the network's last
//                 loaded copy (the lender gets its memory back, consumers keep a warm copy);
//   load_model    for one more copy when the loaded copies' nodes are warm_at busy, on the holder
//                 with the free memory and the best measured speed, before requests must wait;
//   unload_model  for the least recently used idle models of one holder when a request finds no
//                 node only because idle models fill the memory of the nodes that hold its model;
//   load_model    for a reserved slot's model not loaded in its window (hub_slots.cc), which is
//                 never unloaded for being idle or to make room there.
// A node unloads after the model's running requests end, and loads only what fits its limit.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "loom/base/clock.h"
#include "loom/network/hub/hub_impl.h"

namespace loom::network::hub {
namespace {

constexpr double kLoadWaitS = 300;   // a load_model not seen done by then may be sent again
constexpr double kUnloadWaitS = 30;  // ...an unload_model
constexpr size_t kMaxModelActions = 256;

const protocol::ModelInfo* HeldModel(const NodeConn& c, const std::string& model) {
  for (const protocol::ModelInfo& m : c.models) {
    if (m.name == model) return &m;
  }
  return nullptr;
}

bool IsLoaded(const NodeConn& c, const std::string& model) {
  return std::find(c.last.loaded.begin(), c.last.loaded.end(), model) != c.last.loaded.end();
}

template <typename Map>
void EraseOlder(Map& m, double cutoff) {
  for (auto it = m.begin(); it != m.end();) it = it->second < cutoff ? m.erase(it) : std::next(it);
}

}  // namespace

void Hub::Impl::SendResidency(NodeConn& c, const std::string& model, bool load, double now,
                              const std::string& why) {
  if (load) {
    SendFrame(c, protocol::LoadModel{.model = model});
    c.load_sent[model] = now;
  } else {
    SendFrame(c, protocol::UnloadModel{.model = model});
    c.unload_sent[model] = now;
  }
  const char* action = load ? "load_model" : "unload_model";
  std::fprintf(stderr, "hub: %s %s on %s: %s\n", action, model.c_str(), c.node_id.c_str(),
               why.c_str());
  model_actions_.push_back(json{{"at_unix_ms", base::UnixMillis()},
                                {"node_id", c.node_id},
                                {"action", action},
                                {"model", model},
                                {"reason", why}});
  if (model_actions_.size() > kMaxModelActions) model_actions_.pop_front();
}

void Hub::Impl::NoteLoaded(NodeConn& c, const std::vector<std::string>& before, double now) {
  for (const std::string& m : c.last.loaded) {
    if (std::find(before.begin(), before.end(), m) != before.end()) continue;
    c.model_used[m] = now;  // idle time counts from the load
    c.load_sent.erase(m);
  }
  for (const std::string& m : before) {
    if (IsLoaded(c, m)) continue;
    c.unload_sent.erase(m);
    c.model_used.erase(m);
  }
}

void Hub::Impl::ManageModels(double now) {
  // Per model, over the nodes that can take work now: loaded copies, their nodes' slots and
  // running requests, and whether a load_model is in flight.
  struct Use {
    int64_t copies = 0, slots = 0, running = 0;
    bool loading = false;
  };
  std::map<std::string, Use> use;
  std::vector<NodeConn*> usable;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    NodeConn& c = *conns_.at(fleet_conn_[i]);
    // Demand is the consumers' requests the hub placed here: not its own benchmarks and probes
    // (nor the node's count, which lags a heartbeat behind and includes those).
    std::map<std::string, int64_t> consumer;
    for (const std::string& a : c.attempts) {
      Job* j = JobOfAttempt(a);
      if (!j || !j->recorded()) continue;
      c.model_used[j->model] = now;
      consumer[j->model] += 1;
    }
    EraseOlder(c.load_sent, now - kLoadWaitS);
    EraseOlder(c.unload_sent, now - kUnloadWaitS);
    const placement::Target& t = fleet_[i];
    if (t.state != placement::TargetState::kOnline || t.draining || t.paused) continue;
    usable.push_back(&c);
    for (const std::string& m : c.last.loaded) {
      Use& u = use[m];
      u.copies += c.unload_sent.count(m) ? 0 : 1;
      u.slots += t.max_concurrency;
      u.running += consumer[m];
    }
    for (const auto& [m, at] : c.load_sent) use[m].loading = true;
  }

  const int64_t now_ms = base::UnixMillis();
  for (NodeConn* c : usable) {
    if (!c->slot || IsLoaded(*c, c->slot->model) || c->load_sent.count(c->slot->model) ||
        !SlotReserves(c->node_id, c->slot->model, now_ms)) {
      continue;
    }
    SendResidency(*c, c->slot->model, true, now, "a reserved slot keeps it loaded");
  }

  if (options_.unload_idle_s > 0) {
    for (NodeConn* c : usable) {
      for (const std::string& m : c->last.loaded) {
        if (c->unload_sent.count(m) || SlotReserves(c->node_id, m, now_ms)) continue;
        auto used = c->model_used.try_emplace(m, now).first;
        const double idle = now - used->second;
        Use& u = use[m];
        if (idle < options_.unload_idle_s || u.copies < 2) continue;
        u.copies -= 1;
        SendResidency(*c, m, false, now,
                      "idle for " + std::to_string(static_cast<int64_t>(idle)) +
                          " s; loaded copies elsewhere: " + std::to_string(u.copies));
      }
    }
  }

  if (options_.warm_at > 0) {
    for (const auto& [m, u] : use) {
      if (u.copies == 0 || u.loading || u.running < options_.warm_at * u.slots) continue;
      NodeConn* best = nullptr;
      double best_speed = -1;
      for (NodeConn* c : usable) {
        const protocol::ModelInfo* info = HeldModel(*c, m);
        const placement::Target& t = fleet_[static_cast<size_t>(c->fleet_index)];
        if (!info || IsLoaded(*c, m) || t.running >= t.max_concurrency ||
            protocol::LoadedFootprint(*info, t.max_concurrency) > t.mem_free_bytes) {
          continue;
        }
        // The hub's own measurement of this model there, else the node's memory bandwidth.
        double speed = c->facts.mem_bandwidth_gbps;
        auto node = measured_.find(c->node_id);
        if (node != measured_.end()) {
          auto s = node->second.find(m);
          if (s != node->second.end() && s->second.decode_tps > 0)
            speed = 1e6 + s->second.decode_tps;
        }
        if (speed > best_speed) best = c, best_speed = speed;
      }
      if (!best) continue;
      SendResidency(*best, m, true, now,
                    "loaded copies: " + std::to_string(u.copies) + ", busy slots " +
                        std::to_string(u.running) + "/" + std::to_string(u.slots));
    }
  }
}

bool Hub::Impl::MakeRoom(const Job& job, int64_t positions, double now) {
  const std::string& model = job.model;
  struct Plan {
    NodeConn* node = nullptr;
    int64_t evict_bytes = 0;
    std::vector<std::string> evict;
  };
  Plan best;
  const double reserve = std::clamp(tuning_.memory_reserve_fraction, 0.0, 0.9);
  IndexModels();
  auto holders = holders_.find(model);
  if (holders == holders_.end()) return false;
  for (const int32_t index : holders->second) {
    const size_t i = static_cast<size_t>(index);
    NodeConn& c = *conns_.at(fleet_conn_[i]);
    const placement::Target& t = fleet_[i];
    const protocol::ModelInfo* info = HeldModel(c, model);
    if (!info || info->context < positions || t.state != placement::TargetState::kOnline ||
        t.draining || t.paused || t.running >= t.max_concurrency ||
        std::find(job.excluded.begin(), job.excluded.end(), c.node_id) != job.excluded.end()) {
      continue;
    }
    if (IsLoaded(c, model) || c.load_sent.count(model)) return true;  // a copy is on its way
    // Room already being made here: wait for the node's heartbeat.
    if (!c.unload_sent.empty()) return true;
    const int64_t need = static_cast<int64_t>(
        static_cast<double>(protocol::LoadedFootprint(*info, t.max_concurrency)) / (1 - reserve));
    // Idle models (running nothing here), least recently used first.
    std::set<std::string> running;
    for (const std::string& a : c.attempts) {
      if (const Job* j = JobOfAttempt(a)) running.insert(j->model);
    }
    std::vector<std::pair<double, const protocol::ModelInfo*>> idle;
    for (const std::string& m : c.last.loaded) {
      const protocol::ModelInfo* x = HeldModel(c, m);
      auto used = c.model_used.find(m);
      const double at = used == c.model_used.end() ? 0 : used->second;
      if (x && m != model && !running.count(m) && !SlotReserves(c.node_id, m, base::UnixMillis())) {
        idle.push_back({at, x});
      }
    }
    std::sort(idle.begin(), idle.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    Plan p;
    p.node = &c;
    int64_t free = t.mem_free_bytes;
    for (const auto& [at, x] : idle) {
      if (free >= need) break;
      const int64_t bytes = protocol::LoadedFootprint(*x, t.max_concurrency);
      free += bytes;
      p.evict_bytes += bytes;
      p.evict.push_back(x->name);
    }
    if (free < need || p.evict.empty()) continue;
    if (!best.node || p.evict_bytes < best.evict_bytes) best = std::move(p);
  }
  if (!best.node) return false;
  for (const std::string& m : best.evict) {
    SendResidency(*best.node, m, false, now, "idle, making room for a request for " + model);
  }
  return true;
}

}  // namespace loom::network::hub
