// The public world page: GET /world (the page), /world/<asset> (its script, style and land
// outlines, all embedded in the binary), /world.json (a snapshot) and /world/events (server-sent
// events: the snapshot unless ?after= names the current one, then the rows that changed and the
// totals, at most once a second).  Public:
// no API key, and nothing on it names a node's id, key, enrolled name, address or account
// (world.h).  The snapshot is rebuilt at most once a second and only when asked for or watched.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "loom/base/clock.h"
#include "loom/network/hub/hub_impl.h"
#include "loom/network/hub/world_assets.h"

namespace loom::network::hub {
namespace {

constexpr double kRebuildS = 1.0;         // the snapshot is at most this old
constexpr double kHistoryS = 60;          // the store's history is re-read this often...
constexpr double kHistoryDirtyS = 5;      // ...or this often while nodes come and go
constexpr double kExtendSessionsS = 60;   // open node sessions are moved forward this often
constexpr double kPingS = 15;             // an idle event stream gets a comment this often
constexpr int64_t kMaxClientQueue = int64_t{64} << 20;  // a client this far behind is dropped
constexpr size_t kMaxClients = 1000;

const serve::WebAsset* FindAsset(std::string_view name) {
  for (const serve::WebAsset& a : WorldAssets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// CPU time of this thread (the hub's loop): what a rebuild costs, however loaded the machine.
double ThreadCpuMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

int StateOrder(world::State s) {
  switch (s) {
    case world::State::kServing: return 0;
    case world::State::kOnline: return 1;
    case world::State::kSuspect: return 2;
    case world::State::kOffline: return 3;
  }
  return 3;
}

}  // namespace

net::Headers WebPageHeaders() {
  return {{"Cache-Control", "no-cache"},
          {"X-Content-Type-Options", "nosniff"},
          {"Content-Security-Policy",
           "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; "
           "img-src 'self' data:; frame-ancestors 'none'"}};
}

const std::string& Hub::Impl::WorldName(const std::string& node_id) {
  auto it = world_.names.find(node_id);
  if (it != world_.names.end()) return it->second;
  // Two ids with one pseudonym (rare: ~25 bits): the later seen gets a suffix.
  std::string name = world::Pseudonym(node_id);
  for (int n = 2; world_.taken.count(name); ++n) {
    name = world::Pseudonym(node_id) + "-" + std::to_string(n);
  }
  world_.taken[name] = node_id;
  return world_.names[node_id] = std::move(name);
}

void Hub::Impl::NoteNodeUp(const NodeConn& c) {
  WorldCache::Seen& s = world_.seen[c.node_id];
  s.chip = c.facts.chip;
  s.memory_gb = world::MemoryTierGb(c.facts.mem_total_bytes);
  s.location.reset();
  if (c.location) s.location = world::RoundLocation(*c.location);
  s.pod = c.pod;
  world_.history_dirty = true;
  LogError(store_->OpenNodeSession(c.node_id, base::UnixMillis()));
}

void Hub::Impl::NoteNodeDown(const NodeConn& c) {
  world_.history_dirty = true;
  LogError(store_->CloseNodeSession(c.node_id, base::UnixMillis()));
}

void Hub::Impl::RefreshWorldHistory() {
  const int64_t now_ms = base::UnixMillis();
  auto nodes = store_->ListNodes();
  auto activity = store_->NodeActivitySince(now_ms - world::kReliabilityWindowMs, now_ms);
  auto tokens = store_->TokensSince(now_ms - int64_t{86400} * 1000);
  auto requests = store_->RequestsSince(now_ms - int64_t{3600} * 1000);
  if (!nodes.ok() || !activity.ok() || !tokens.ok() || !requests.ok()) {
    for (const Status& s : {nodes.status(), activity.status(), tokens.status(), requests.status()}) {
      LogError(s);
    }
    return;  // (the old history stays; tried again at the next interval)
  }
  world_.enrolled.clear();
  world_.enrolled_ms.clear();
  world_.enrolled_ms.reserve(nodes->size());
  for (const store::NodeRecord& n : *nodes) {
    world_.enrolled.emplace_back(n.node_id, n.enrolled_ms);
    world_.enrolled_ms.emplace(n.node_id, n.enrolled_ms);
  }
  world_.activity.clear();
  for (store::Store::NodeActivity& a : *activity) {
    std::string id = a.node_id;
    world_.activity.emplace(std::move(id), std::move(a));
  }
  world_.tokens_per_day = *tokens;
  world_.requests_last_hour.clear();
  for (const store::Store::ModelCount& m : *requests) world_.requests_last_hour[m.model] = m.count;
}

void Hub::Impl::BuildWorld(double now) {
  if (now - world_.history_at >= (world_.history_dirty ? kHistoryDirtyS : kHistoryS)) {
    const base::Stopwatch history_watch;
    world_.history_at = now;
    world_.history_dirty = false;
    RefreshWorldHistory();
    world_.history_ms = history_watch.Seconds() * 1000;
  }
  const base::Stopwatch watch;
  const double cpu0 = ThreadCpuMs();
  const int64_t now_ms = base::UnixMillis();
  const auto& enrolled_ms = world_.enrolled_ms;

  auto history = [&](const std::string& id, world::Machine& m) {
    auto a = world_.activity.find(id);
    const int64_t connected = a == world_.activity.end() ? 0 : a->second.connected_ms;
    m.tokens_served = a == world_.activity.end() ? 0 : a->second.tokens;
    auto e = enrolled_ms.find(id);
    if (e != enrolled_ms.end()) m.reliability = world::Reliability(connected, e->second, now_ms);
  };
  auto seen = [&](const std::string& id, world::Machine& m) {
    auto s = world_.seen.find(id);
    if (s == world_.seen.end()) return;
    m.chip = s->second.chip;
    m.memory_gb = s->second.memory_gb;
    m.location = s->second.location;
    m.pod = s->second.pod;
  };

  // First the order (state, then name) and the totals; then each row is written in that order
  // from one reused Machine, so that a snapshot of 10,000 rows allocates little.
  struct Entry {
    world::State state;
    const std::string* name;
    const std::string* node_id;
    const NodeConn* conn;             // null: offline
    const placement::Target* target;  // null: offline
  };
  std::vector<Entry> entries;
  entries.reserve(std::max(fleet_.size(), world_.enrolled.size()));
  world::Totals totals;
  struct Capacity {
    int64_t holders = 0, loaded = 0;
    double tps = 0;
  };
  std::unordered_map<std::string, Capacity> capacity;  // (sorted by name below)
  capacity.reserve(256);
  for (size_t i = 0; i < fleet_.size(); ++i) {
    const placement::Target& t = fleet_[i];
    const world::State state = t.state == placement::TargetState::kSuspect ? world::State::kSuspect
                               : t.running > 0 ? world::State::kServing
                                               : world::State::kOnline;
    const NodeConn* c = conns_.at(fleet_conn_[i]).get();
    entries.push_back({state, &WorldName(t.id), &t.id, c, &t});
    for (const placement::ModelOffer& o : t.models) {
      Capacity& cap = capacity[o.name];
      cap.holders += 1;
      cap.loaded += o.loaded;
      if (o.loaded) cap.tps += o.decode_tps;
    }
    totals.machines_online += 1;
    totals.machines_serving += state == world::State::kServing;
    totals.memory_bytes += c->facts.mem_total_bytes;
  }
  for (const auto& [id, ms] : world_.enrolled) {
    if (ready_.count(id)) continue;
    entries.push_back({world::State::kOffline, &WorldName(id), &id, nullptr, nullptr});
    totals.machines_offline += 1;
  }
  totals.tokens_per_day = world_.tokens_per_day;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const int sa = StateOrder(a.state), sb = StateOrder(b.state);
    return sa != sb ? sa < sb : *a.name < *b.name;
  });
  world::Machine m;
  auto fill = [&](const Entry& e) {
    const std::string& id = *e.node_id;
    m.name = *e.name;
    m.state = e.state;
    m.chip.clear();
    m.memory_gb = -1;
    m.location.reset();
    m.pod.reset();
    m.reliability.reset();
    m.tokens_per_s = 0;
    m.models.clear();
    auto slot = slots_.find(id);
    m.slot = slot != slots_.end() && slot->second.record.state == store::SlotState::kActive
                 ? "reserved"
                 : "spare";
    m.verification_pass_rate.reset();
    auto rep = reputations_.find(id);
    if (rep != reputations_.end() && rep->second.checks_passed + rep->second.checks_failed > 0) {
      m.verification_pass_rate =
          static_cast<double>(rep->second.checks_passed) /
          static_cast<double>(rep->second.checks_passed + rep->second.checks_failed);
    }
    seen(id, m);
    history(id, m);
    if (e.conn == nullptr) return;
    m.models.assign(e.conn->last.loaded.begin(), e.conn->last.loaded.end());
    // (the hub's own measurements, which UpdateFleet copies into the target's offers)
    for (const placement::ModelOffer& o : e.target->models) {
      m.tokens_per_s = std::max(m.tokens_per_s, o.decode_tps);
    }
  };
  std::vector<std::pair<std::string, Capacity>> by_name(capacity.begin(), capacity.end());
  std::sort(by_name.begin(), by_name.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<world::ModelLine> models;
  for (const auto& [name, c] : by_name) {
    world::ModelLine l;
    l.name = name;
    l.holders = c.holders;
    l.loaded = c.loaded;
    l.tokens_per_s = c.tps;
    auto r = world_.requests_last_hour.find(name);
    l.requests_last_hour = r == world_.requests_last_hour.end() ? 0 : r->second;
    auto q = queues_.find(name);
    l.queued = q == queues_.end() ? 0 : static_cast<int64_t>(q->second.size());
    models.push_back(std::move(l));
  }
  for (const auto& [name, count] : world_.requests_last_hour) {  // asked for, held by no one
    if (capacity.count(name)) continue;
    world::ModelLine l;
    l.name = name;
    l.requests_last_hour = count;
    auto q = queues_.find(name);
    l.queued = q == queues_.end() ? 0 : static_cast<int64_t>(q->second.size());
    models.push_back(std::move(l));
  }

  // Rows as text, and the events for what changed since the last snapshot.
  std::string events;
  const bool watched = !world_.clients.empty();
  // Each row is remembered by a 64-bit hash of its text and the build that last wrote it: a
  // changed hash is a `machine` event, a row no build wrote this time is `gone`.
  const uint64_t generation = ++world_.generation;
  std::string list = "[";
  list.reserve(entries.size() * 320);
  std::string row;
  for (const Entry& e : entries) {
    fill(e);
    row.clear();
    world::AppendMachineJson(m, &row);
    if (list.size() > 1) list += ',';
    list += row;
    const size_t hash = std::hash<std::string_view>{}(row);
    auto [it, added] = world_.rows.try_emplace(m.name, WorldCache::Row{hash, generation});
    if (watched && (added || it->second.hash != hash)) {
      events.append("event: machine\ndata: ").append(row).append("\n\n");
    }
    it->second = {hash, generation};
  }
  list += ']';
  for (auto it = world_.rows.begin(); it != world_.rows.end();) {
    if (it->second.generation == generation) {
      ++it;
      continue;
    }
    if (watched) events += "event: gone\ndata: " + json{{"name", it->first}}.dump() + "\n\n";
    it = world_.rows.erase(it);
  }
  std::string totals_text =
      world::TotalsJson(totals, models).dump(-1, ' ', false, json::error_handler_t::replace);
  if (watched && (totals_text != world_.totals || !events.empty())) {
    events += "event: totals\ndata: " + totals_text + "\n\n";
  }
  world_.totals = std::move(totals_text);
  world_.json = StrCat("{\"version\":", world::kJsonVersion, ",\"generated_ms\":", now_ms,
                       ",\"location_step_degrees\":", json(world::kLocationStepDegrees).dump(),
                       ",\"totals\":", world_.totals, ",\"machines\":");
  world_.json.append(list).push_back('}');
  world_.generated_ms = now_ms;
  world_.built_at = now;
  world_.build_ms = watch.Seconds() * 1000;
  world_.build_cpu_ms = ThreadCpuMs() - cpu0;
  if (!events.empty()) {
    for (const auto& client : world_.clients) {
      if (!client->closed()) client->Send(events);
    }
  }
}

void Hub::Impl::WorldTick(double now) {
  // Open sessions are moved forward so that a hub that dies leaves them ending near its death.
  if (now - world_.last_extend >= kExtendSessionsS) {
    world_.last_extend = now;
    LogError(store_->ExtendNodeSessions(base::UnixMillis()));
  }
  auto& clients = world_.clients;
  clients.erase(std::remove_if(clients.begin(), clients.end(),
                               [](const std::shared_ptr<net::Responder>& c) {
                                 if (c->closed()) return true;
                                 if (c->queued_bytes() <= kMaxClientQueue) return false;
                                 c->End();  // too far behind: it may reconnect and start over
                                 return true;
                               }),
                clients.end());
  if (clients.empty()) return;
  if (now - world_.built_at >= kRebuildS) BuildWorld(now);
  if (now - world_.last_ping >= kPingS) {
    world_.last_ping = now;
    for (const auto& c : clients) c->Send(": ping\n\n");
  }
}

void Hub::Impl::OnWorld(const net::Request& request,
                        const std::shared_ptr<net::Responder>& responder) {
  const std::string& path = request.path;
  if (request.method != "GET") {
    return responder->Respond(405, "application/json",
                              ErrorBody("use GET", "invalid_request_error", ""));
  }
  const double now = base::NowSeconds();
  if (path == "/world.json") {
    if (now - world_.built_at >= kRebuildS) BuildWorld(now);
    net::Headers h = {{"Cache-Control", "no-cache"}, {"X-Content-Type-Options", "nosniff"}};
    return responder->Respond(200, "application/json", world_.json, h);
  }
  if (path == "/world/events") {
    if (world_.clients.size() >= kMaxClients) {
      return responder->Respond(503, "application/json",
                                ErrorBody("too many watchers of the world page", "server_error",
                                          "too_many_watchers"));
    }
    if (now - world_.built_at >= kRebuildS) BuildWorld(now);
    responder->BeginStream(200, "text/event-stream",
                           {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    // ?after=GENERATED_MS: the client holds that snapshot (from /world.json); while it is still
    // the current one, only what changes after it is sent.
    if (request.query == "after=" + std::to_string(world_.generated_ms)) {
      responder->Send("retry: 2000\nevent: current\ndata: {}\n\n");
    } else {
      responder->Send("retry: 2000\nevent: snapshot\ndata: " + world_.json + "\n\n");
    }
    world_.clients.push_back(responder);
    return;
  }
  const std::string_view name =
      path == "/world" || path == "/world/" ? std::string_view("world.html")
                                            : std::string_view(path).substr(sizeof("/world/") - 1);
  const serve::WebAsset* asset = path.rfind("/world/", 0) == 0 || path == "/world"
                                     ? FindAsset(name)
                                     : nullptr;
  if (asset == nullptr) {
    return responder->Respond(404, "application/json",
                              ErrorBody("no route for GET " + path, "invalid_request_error",
                                        "unknown_url"));
  }
  responder->Respond(200, asset->content_type, std::string(asset->data), WebPageHeaders());
}

}  // namespace loom::network::hub
