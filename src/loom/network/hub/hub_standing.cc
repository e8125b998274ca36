// What each operator hears from the hub (protocol::Standing, shown by `loom node status`): its
// pending and available credits, its latest earnings (an attempt's share of what it was charged,
// a reserved slot's availability credit), its slot, and, when it got no work since the last
// report, why: paused or draining by its own rules, heartbeats late, no requests for its models,
// or placement choosing other nodes and the reasons it gave (too little memory, full, slower,
// reserved slots first, ...).  Reports go out every standing_s and a second after an earning.
#include <algorithm>
#include <cstdio>
#include <string>

#include "loom/base/clock.h"
#include "loom/network/hub/hub_impl.h"

namespace loom::network::hub {
namespace {

constexpr size_t kMaxPassedOver = 16;

std::string Seconds(double s) { return std::to_string(static_cast<int64_t>(s)) + " s"; }

}  // namespace

void Hub::Impl::NoteDecision(const Job& job, const placement::Decision& d) {
  const double now = base::NowSeconds();
  last_request_at_[job.model] = now;
  if (d.placed) standing_[d.target_id].placed += 1;
  const bool reserved_won = d.detail.find("reserved slot") != std::string::npos;
  for (size_t i = d.placed ? 1 : 0; i < d.candidates.size(); ++i) {
    const placement::Candidate& c = d.candidates[i];
    std::string why;
    if (!c.rejected.empty()) {
      why = c.rejected;
    } else if (reserved_won) {
      why = "went to a reserved slot (reserved slots go first)";
    } else {
      why = "went to a node with a shorter estimated completion (placement's estimate)";
    }
    // Numbers in a rejection (free memory, running counts) vary: keep the first wording of each.
    NodeStanding& s = standing_[c.target_id];
    const std::string key = "model '" + job.model + "': " + why;
    auto it = s.passed_over.find(key);
    if (it != s.passed_over.end()) {
      it->second += 1;
    } else if (s.passed_over.size() < kMaxPassedOver) {
      s.passed_over[key] = 1;
    }
  }
}

void Hub::Impl::NoteSettlement(const Job& job, const store::LedgerTx& settle) {
  for (const store::LedgerLine& line : settle.lines) {
    if (line.attempt_id.empty() || !line.book.starts_with("pending:")) continue;
    int64_t tokens = 0;
    for (const ledger::Work& w : job.work) {
      if (w.attempt_id == line.attempt_id) tokens = w.tokens;
    }
    NoteEarning(line.book.substr(8), protocol::Earning{.kind = "tokens",
                                                       .ref = line.attempt_id,
                                                       .model = job.model,
                                                       .tokens = tokens,
                                                       .micro = line.amount,
                                                       .at_ms = settle.at_ms});
  }
}

void Hub::Impl::NoteEarning(const std::string& node_id, protocol::Earning e) {
  NodeStanding& s = standing_[node_id];
  s.recent.push_front(std::move(e));
  while (static_cast<int64_t>(s.recent.size()) > protocol::kMaxEarnings) s.recent.pop_back();
  s.due = std::min(s.due, base::NowSeconds() + 1);
}

OperatorView Hub::Impl::ViewOf(const std::string& node_id, const NodeConn* c, double now) {
  OperatorView out;
  auto pending = store_->Balance(ledger::PendingBook(node_id));
  auto available = store_->Balance(ledger::AvailableBook(node_id));
  LogError(pending.status());
  LogError(available.status());
  out.pending_micro = pending.ok() ? std::max<int64_t>(0, *pending) : 0;
  out.available_micro = available.ok() ? std::max<int64_t>(0, *available) : 0;
  auto slot = slots_.find(node_id);
  if (slot != slots_.end()) {
    OperatorView::Slot& v = out.slot.emplace();
    const store::SlotRecord& r = slot->second.record;
    v.slot_id = r.id;
    v.model = r.model;
    v.state = std::string(store::SlotStateName(r.state));
    v.begin_minute = r.begin_minute;
    v.end_minute = r.end_minute;
    v.availability = slot->second.Availability(base::UnixMillis() / kDayMs, &v.probes);
    v.lost_reason = r.lost_reason;
  }
  auto add = [&](std::string reason) {
    if (static_cast<int64_t>(out.idle_reasons.size()) < protocol::kMaxReasons) {
      if (static_cast<int64_t>(reason.size()) > protocol::kMaxMessageBytes) {
        reason.resize(static_cast<size_t>(protocol::kMaxMessageBytes));
      }
      out.idle_reasons.push_back(std::move(reason));
    }
  };
  if (c == nullptr) {
    add("not connected to the hub: it gets no work until its agent connects");
    return out;
  }
  auto standing = standing_.find(node_id);
  if (standing != standing_.end() && standing->second.placed > 0) return out;  // it got work
  if (c->last.draining) add("draining: it takes no new work");
  if (c->last.paused) {
    add("paused by its own rules (outside its --schedule, or its machine busy beyond "
        "--pause-when-busy)");
  }
  if (now - c->last_heartbeat > options_.suspect_s) add("its heartbeats are late: no new work");
  if (standing != standing_.end()) {
    for (const auto& [why, count] : standing->second.passed_over) {
      add(why + " (" + std::to_string(count) + (count == 1 ? " request)" : " requests)"));
    }
  }
  for (const protocol::ModelInfo& m : c->models) {
    auto at = last_request_at_.find(m.name);
    const double since = at == last_request_at_.end() ? now - started_at_ : now - at->second;
    if (since >= options_.standing_s) {
      add("no requests for model '" + m.name + "' in the last " + Seconds(since));
    }
  }
  return out;
}

protocol::Standing Hub::Impl::StandingOf(NodeConn& c, NodeStanding& s, double now) {
  OperatorView view = ViewOf(c.node_id, &c, now);
  protocol::Standing out;
  out.pending_micro = view.pending_micro;
  out.available_micro = view.available_micro;
  out.recent.assign(s.recent.begin(), s.recent.end());
  out.idle_reasons = std::move(view.idle_reasons);
  if (view.slot) {
    const OperatorView::Slot& v = *view.slot;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s for %s: availability %.1f%% over %lld probes (30 days)",
                  v.state.c_str(), v.model.c_str(), 100 * v.availability,
                  static_cast<long long>(v.probes));
    out.slot = buf;
    if (!v.lost_reason.empty()) out.slot += "; lost: " + v.lost_reason;
  }
  return out;
}

void Hub::Impl::SendStandings(double now) {
  for (const auto& [node_id, conn_id] : ready_) {
    NodeConn& c = *conns_.at(conn_id);
    NodeStanding& s = standing_[node_id];
    if (s.due == 0) s.due = now + std::min(1.0, options_.standing_s);  // soon after it registers
    if (now < s.due) continue;
    SendFrame(c, StandingOf(c, s, now));
    s.passed_over.clear();
    s.placed = 0;
    s.due = now + options_.standing_s;
  }
}

}  // namespace loom::network::hub
