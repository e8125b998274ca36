// The operator account page: GET /v1/account (JSON, for the account's own API key) and GET
// /account (the page and its script and style, embedded in the binary; it asks for the key and
// sends it in the Authorization header).  An account sees its consumer balance and, for each node
// it owns (enrolled with `loom hub token create --account`, or given to it by `loom hub node
// assign`), what the node's operator hears in its standing frames (ViewOf, hub_standing.cc) and
// what it earned, read from the ledger so that it outlives the hub's memory and restarts.
#include <algorithm>
#include <charconv>
#include <cstdio>

#include "loom/base/clock.h"
#include "loom/network/hub/account_assets.h"
#include "loom/network/hub/hub_impl.h"

namespace loom::network::hub {
namespace {

constexpr int64_t kDefaultEarnings = 100;  // per node, newest first
constexpr int64_t kMaxEarnings = 1000;

const serve::WebAsset* FindAccountAsset(std::string_view name) {
  for (const serve::WebAsset& a : AccountAssets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// `earnings=N` in the query (1..kMaxEarnings), else the default; nullopt when malformed.
std::optional<int64_t> EarningsLimit(std::string_view query) {
  int64_t limit = kDefaultEarnings;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    constexpr std::string_view kKey = "earnings=";
    if (!part.starts_with(kKey)) continue;
    const std::string_view value = part.substr(kKey.size());
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), limit);
    if (ec != std::errc() || end != value.data() + value.size() || limit < 1 ||
        limit > kMaxEarnings) {
      return std::nullopt;
    }
  }
  return limit;
}

json Credits(int64_t micro) { return ledger::FormatCredits(micro); }

// A slot grant's ref is "slot:<slot id>:<period>" and its memo, written by PaySlotPeriod
// (hub_slots.cc), ends "(<model>): <answered>/<probes> probes answered".
json SlotEarning(const store::Store::NodeEarning& e) {
  long long slot_id = 0, period = 0, answered = -1, probes = -1;
  std::sscanf(e.ref.c_str(), "slot:%lld:%lld", &slot_id, &period);
  std::string model;
  const size_t open = e.memo.find(" (");
  const size_t close = e.memo.rfind("): ");
  if (open != std::string::npos && close != std::string::npos && close > open) {
    model = e.memo.substr(open + 2, close - open - 2);
    std::sscanf(e.memo.c_str() + close + 3, "%lld/%lld", &answered, &probes);
  }
  return json{{"kind", "slot"},
              {"at_ms", e.at_ms},
              {"slot_id", slot_id},
              {"period", period},
              {"model", model},
              {"probes_answered", answered >= 0 ? json(answered) : json(nullptr)},
              {"probes", probes >= 0 ? json(probes) : json(nullptr)},
              {"credits_micro", e.amount},
              {"credits", Credits(e.amount)}};
}

json EarningJson(const store::Store::NodeEarning& e) {
  if (e.kind == "settle") {
    return json{{"kind", "tokens"},          {"at_ms", e.at_ms},
                {"job_id", e.ref},           {"attempt_id", e.attempt_id},
                {"model", e.model},          {"tokens", e.tokens},
                {"credits_micro", e.amount}, {"credits", Credits(e.amount)}};
  }
  if (e.kind == "grant" && e.ref.starts_with("slot:")) return SlotEarning(e);
  // A failed check's void, an untrusted node's forfeit (or a grant of another kind): what it
  // took or gave, and the hub's words for why.
  return json{{"kind", e.kind},
              {"at_ms", e.at_ms},
              {"ref", e.ref},
              {"attempt_id", e.attempt_id},
              {"memo", e.memo},
              {"credits_micro", e.amount},
              {"credits", Credits(e.amount)}};
}

}  // namespace

json Hub::Impl::AccountJson(const store::Account& account, int64_t earnings_limit, double now) {
  auto consumer = store_->Balance(ledger::ConsumerBook(account.id));
  auto held = store_->Balance(ledger::HeldBook(account.id));
  LogError(consumer.status());
  LogError(held.status());
  const int64_t consumer_micro = consumer.ok() ? *consumer : 0;
  const int64_t held_micro = held.ok() ? *held : 0;
  auto owned = store_->NodesOfAccount(account.id);
  LogError(owned.status());
  json nodes = json::array();
  int64_t pending_total = 0, available_total = 0;
  for (const store::NodeRecord& n : owned.ok() ? *owned : std::vector<store::NodeRecord>{}) {
    const NodeConn* c = ReadyNode(n.node_id);
    OperatorView view = ViewOf(n.node_id, c, now);
    pending_total += view.pending_micro;
    available_total += view.available_micro;
    std::string state = "offline";
    json models = json::array();
    int64_t running = 0;
    if (c != nullptr) {
      running = static_cast<int64_t>(c->attempts.size());
      state = now - c->last_heartbeat > options_.suspect_s ? "suspect"
              : running > 0                                 ? "serving"
                                                            : "online";
      for (const protocol::ModelInfo& m : c->models) {
        const bool loaded = std::find(c->last.loaded.begin(), c->last.loaded.end(), m.name) !=
                                c->last.loaded.end() ||
                            m.loaded;
        models.push_back(json{{"name", m.name}, {"loaded", loaded}});
      }
    }
    json slot = nullptr;
    if (view.slot) {
      const OperatorView::Slot& s = *view.slot;
      slot = json{{"slot_id", s.slot_id},
                  {"model", s.model},
                  {"state", s.state},
                  {"begin_minute", s.begin_minute},
                  {"end_minute", s.end_minute},
                  {"availability_30d", s.availability},
                  {"probes_30d", s.probes},
                  {"lost_reason", s.lost_reason}};
    }
    json earnings = json::array();
    int64_t listed = 0;
    bool complete = false;
    auto history = store_->NodeEarnings(n.node_id, earnings_limit);
    LogError(history.status());
    if (history.ok()) {
      for (const store::Store::NodeEarning& e : *history) {
        earnings.push_back(EarningJson(e));
        listed += e.amount;
      }
      complete = static_cast<int64_t>(history->size()) < earnings_limit;
    }
    nodes.push_back(json{{"node_id", n.node_id},
                         {"name", n.name},
                         {"enrolled_ms", n.enrolled_ms},
                         {"last_seen_ms", n.last_seen_ms},
                         {"connected", c != nullptr},
                         {"state", state},
                         {"running", running},
                         {"models", models},
                         {"untrusted", Untrusted(n.node_id)},
                         {"pending_micro", view.pending_micro},
                         {"available_micro", view.available_micro},
                         {"pending", Credits(view.pending_micro)},
                         {"available", Credits(view.available_micro)},
                         {"slot", slot},
                         {"idle_reasons", view.idle_reasons},
                         {"earnings", earnings},
                         {"earnings_listed_micro", listed},
                         {"earnings_complete", complete}});
  }
  return json{{"version", 1},
              {"generated_ms", base::UnixMillis()},
              {"account", json{{"id", account.id}, {"name", account.name}}},
              {"consumer", json{{"available_micro", consumer_micro},
                                {"held_micro", held_micro},
                                {"available", Credits(consumer_micro)},
                                {"held", Credits(held_micro)}}},
              {"operator", json{{"nodes", static_cast<int64_t>(nodes.size())},
                                {"pending_micro", pending_total},
                                {"available_micro", available_total},
                                {"pending", Credits(pending_total)},
                                {"available", Credits(available_total)}}},
              {"nodes", nodes}};
}

void Hub::Impl::OnAccount(const net::Request& request,
                          const std::shared_ptr<net::Responder>& responder) {
  const std::string& path = request.path;
  auto fail = [&](int status, const std::string& message, const std::string& type,
                  const std::string& code) {
    responder->Respond(status, "application/json", ErrorBody(message, type, code),
                       {{"Cache-Control", "no-store"}});
  };
  if (request.method != "GET") return fail(405, "use GET", "invalid_request_error", "");
  if (path == "/v1/account") {
    std::optional<int64_t> account_id = Authenticate(request);
    if (!account_id) {
      return fail(401,
                  "Incorrect or missing API key (send Authorization: Bearer KEY with a key of "
                  "the account, from `loom hub key create`)",
                  "authentication_error", "invalid_api_key");
    }
    const std::optional<int64_t> limit = EarningsLimit(request.query);
    if (!limit) {
      return fail(400, "earnings must be an integer in 1.." + std::to_string(kMaxEarnings),
                  "invalid_request_error", "bad_earnings");
    }
    auto account = store_->FindAccountById(*account_id);
    if (!account.ok()) {
      LogError(account.status());
      return fail(500, "the hub could not read the account", "server_error", "hub_error");
    }
    const json body = AccountJson(*account, *limit, base::NowSeconds());
    return responder->Respond(200, "application/json",
                              body.dump(-1, ' ', false, json::error_handler_t::replace),
                              {{"Cache-Control", "no-store"}, {"X-Content-Type-Options", "nosniff"}});
  }
  const serve::WebAsset* asset = nullptr;
  if (path == "/account" || path == "/account/") {
    asset = FindAccountAsset("account.html");
  } else if (path.starts_with("/account/")) {
    asset = FindAccountAsset(std::string_view(path).substr(sizeof("/account/") - 1));
  }
  if (asset == nullptr) {
    return fail(404, "no route for GET " + path, "invalid_request_error", "unknown_url");
  }
  responder->Respond(200, asset->content_type, std::string(asset->data), WebPageHeaders());
}

}  // namespace loom::network::hub
