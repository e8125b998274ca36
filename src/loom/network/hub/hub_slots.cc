// Reserved slots: a node's commitment to keep one model loaded and answering through a daily UTC
// window (protocol::SlotOffer).  The hub
//   - measures availability itself: every probe_interval_s inside the window it sends the slot a
//     one-token request that must stream its token within first_token_s (a slot whose node is not
//     connected fails the probe); each probe is written to the slot's day in the store;
//   - pays, for each period of slot_period_s (an hour) in which it probed, an availability credit
//     of slot_share x what the slot would earn busy for the whole period (its hub-measured single-
//     stream decode speed x the model's completion price x the operator share), times the share
//     of that period's probes it answered; the credit is a "grant" from the network's issued book
//     straight to the operator's available book (the hub verified it itself);
//   - pays the slot's tokens at reserved_multiplier x the operator share (at most all of the
//     charge: the network's fee pays the difference);
//   - sends its requests to reserved slots first (placement), keeps the model loaded (residency);
//   - scores availability over the last 30 UTC days; once min_probes are in and it is under
//     min_availability, the slot is lost for good and the node serves as spare time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "loom/base/clock.h"
#include "loom/network/hub/hub_impl.h"

namespace loom::network::hub {
namespace {

constexpr int64_t kWindowDays = 30;

const char kProbePrompt[] = "Reply with one word: are you there?";

bool InWindow(const store::SlotRecord& s, int64_t unix_ms) {
  const int64_t minute = (unix_ms / 60'000) % 1440;
  if (s.begin_minute < s.end_minute) return minute >= s.begin_minute && minute < s.end_minute;
  return minute >= s.begin_minute || minute < s.end_minute;  // wraps midnight
}

std::string Percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * fraction);
  return buf;
}

}  // namespace

double SlotLive::Availability(int64_t today, int64_t* probes) const {
  int64_t sent = 0, answered = 0;
  for (const auto& [day, d] : days) {
    if (day > today - kWindowDays) sent += d.probes, answered += d.answered;
  }
  if (probes) *probes = sent;
  return sent == 0 ? 1.0 : static_cast<double>(answered) / static_cast<double>(sent);
}

void Hub::Impl::LoadSlots() {
  auto slots = store_->ListSlots();
  if (!slots.ok()) return LogError(slots.status());
  const int64_t today = base::UnixMillis() / kDayMs;
  for (store::SlotRecord& s : *slots) {
    if (s.state != store::SlotState::kActive) continue;
    SlotLive& live = slots_[s.node_id];
    auto days = store_->SlotDays(s.id, today - kWindowDays + 1);
    if (days.ok()) {
      for (const store::SlotDay& d : *days) live.days[d.day] = d;
    } else {
      LogError(days.status());
    }
    live.record = std::move(s);
  }
}

void Hub::Impl::OfferSlot(NodeConn& c) {
  if (!c.slot) return;
  store::SlotRecord offer;
  offer.node_id = c.node_id;
  offer.model = c.slot->model;
  offer.begin_minute = c.slot->begin_minute;
  offer.end_minute = c.slot->end_minute;
  offer.created_ms = base::UnixMillis();
  auto stored = store_->OfferSlot(offer);
  if (!stored.ok()) return LogError(stored.status());
  if (stored->state != store::SlotState::kActive) {
    std::fprintf(stderr, "hub: node %s offers a reserved slot for %s, lost on %lld: %s; it serves "
                 "as spare time\n", c.node_id.c_str(), offer.model.c_str(),
                 static_cast<long long>(stored->lost_ms), stored->lost_reason.c_str());
  }
  SlotLive& live = slots_[c.node_id];
  if (live.record.id != stored->id) {
    // A new slot, or the node moved its reservation to another model: start its record afresh.
    live = SlotLive{};
    const int64_t today = offer.created_ms / kDayMs;
    auto days = store_->SlotDays(stored->id, today - kWindowDays + 1);
    if (days.ok()) {
      for (const store::SlotDay& d : *days) live.days[d.day] = d;
    }
  }
  live.record = std::move(stored).value();
}

bool Hub::Impl::SlotReserves(const std::string& node_id, const std::string& model,
                             int64_t unix_ms) const {
  auto it = slots_.find(node_id);
  return it != slots_.end() && !Untrusted(node_id) && it->second.record.model == model &&
         it->second.record.state == store::SlotState::kActive &&
         InWindow(it->second.record, unix_ms);
}

int32_t Hub::Impl::OperatorShareFor(const std::string& node_id, const std::string& model) const {
  const double base = options_.pricing.operator_share_bp;
  if (!SlotReserves(node_id, model, base::UnixMillis())) return static_cast<int32_t>(base);
  return static_cast<int32_t>(std::min(10000.0, std::floor(base * options_.reserved_multiplier)));
}

void Hub::Impl::ManageSlots(double now) {
  const int64_t now_ms = base::UnixMillis();
  const int64_t period =
      static_cast<int64_t>(std::floor(static_cast<double>(now_ms) / 1000 / options_.slot_period_s));
  for (auto& [node_id, live] : slots_) {
    // An untrusted node's slot is neither probed nor paid (it gets no work at all).
    if (live.record.state != store::SlotState::kActive || Untrusted(node_id)) continue;
    if (live.period != period) {
      if (live.period_probes > 0) PaySlotPeriod(live);
      live.period = period;
      live.period_probes = live.period_answered = 0;
    }
    if (live.probing || now < live.next_probe_at || !InWindow(live.record, now_ms)) continue;
    live.next_probe_at = now + options_.probe_interval_s;
    NodeConn* c = ReadyNode(node_id);
    if (c == nullptr) {
      EndProbe(live, false, "not connected");
      continue;
    }
    auto job = std::make_unique<Job>();
    job->id = "probe-" + std::to_string(next_id_++);
    job->model = live.record.model;
    job->probe = true;
    job->created_at = now;
    job->request = json{{"model", job->model}, {"prompt", kProbePrompt}, {"max_tokens", 1},
                        {"temperature", 0}, {"ignore_eos", true}};
    job->max_tokens = 1;
    job->prompt_estimate = 16;
    live.probing = true;
    placement::Decision d;
    d.placed = true;
    d.target_id = node_id;
    Job& ref = *job;
    jobs_[job->id] = std::move(job);
    StartAttempt(ref, *c, d);
  }
}

void Hub::Impl::EndProbe(Job& job, bool answered, const std::string& why) {
  const std::string node_id = job.node_id;
  if (NodeConn* node = ReadyNode(node_id)) {
    node->attempts.erase(job.attempt_id);
    UpdateLoad(*node);
  }
  attempt_job_.erase(job.attempt_id);
  jobs_.erase(job.id);  // `job` is gone from here on
  auto it = slots_.find(node_id);
  if (it != slots_.end()) EndProbe(it->second, answered, why);
}

void Hub::Impl::EndProbe(SlotLive& live, bool answered, const std::string& why) {
  live.probing = false;
  const int64_t now_ms = base::UnixMillis();
  const int64_t today = now_ms / kDayMs;
  store::SlotDay& d = live.days[today];
  d.day = today;
  d.probes += 1;
  d.answered += answered ? 1 : 0;
  live.period_probes += 1;
  live.period_answered += answered ? 1 : 0;
  live.last_probe = answered ? "answered" : "failed: " + why;
  while (!live.days.empty() && live.days.begin()->first <= today - kWindowDays) {
    live.days.erase(live.days.begin());
  }
  LogError(store_->RecordProbe(live.record.id, today, answered));
  int64_t probes = 0;
  const double availability = live.Availability(today, &probes);
  if (probes < options_.min_probes || availability >= options_.min_availability) return;
  const std::string reason = "availability " + Percent(availability) + " over " +
                             std::to_string(probes) + " probes in 30 days, under the " +
                             Percent(options_.min_availability) + " a reserved slot must keep";
  std::fprintf(stderr, "hub: node %s loses its reserved slot for %s: %s\n",
               live.record.node_id.c_str(), live.record.model.c_str(), reason.c_str());
  // The period so far is paid for what it answered; nothing after.
  if (live.period_probes > 0) PaySlotPeriod(live);
  live.period_probes = live.period_answered = 0;
  LogError(store_->LoseSlot(live.record.id, now_ms, reason));
  live.record.state = store::SlotState::kLost;
  live.record.lost_ms = now_ms;
  live.record.lost_reason = reason;
  if (NodeConn* c = ReadyNode(live.record.node_id)) UpdateLoad(*c);
}

int64_t Hub::Impl::SlotPeriodCredit(const SlotLive& live) const {
  auto node = measured_.find(live.record.node_id);
  if (node == measured_.end()) return 0;
  auto m = node->second.find(live.record.model);
  if (m == node->second.end() || m->second.decode_tps <= 0) return 0;
  // micro-credits per million tokens x tokens in the period / 1e6 = micro-credits.
  const double busy = static_cast<double>(options_.pricing.For(live.record.model).completion) *
                      m->second.decode_tps * options_.slot_period_s / 1e6 *
                      options_.pricing.operator_share_bp / 10000.0;
  return static_cast<int64_t>(std::floor(busy * options_.slot_share));
}

void Hub::Impl::PaySlotPeriod(SlotLive& live) {
  const int64_t full = SlotPeriodCredit(live);
  const int64_t credit = full * live.period_answered / live.period_probes;
  live.last_period = json{{"period", live.period},
                          {"probes", live.period_probes},
                          {"answered", live.period_answered},
                          {"credit_micro", credit}};
  if (credit <= 0) return;
  store::LedgerTx tx;
  tx.kind = "grant";
  tx.ref = "slot:" + std::to_string(live.record.id) + ":" + std::to_string(live.period);
  tx.at_ms = base::UnixMillis();
  tx.memo = "availability of reserved slot " + std::to_string(live.record.id) + " (" +
            live.record.model + "): " + std::to_string(live.period_answered) + "/" +
            std::to_string(live.period_probes) + " probes answered";
  tx.lines = {{"issued", -credit, ""}, {ledger::AvailableBook(live.record.node_id), credit, ""}};
  auto posted = store_->Post(tx);
  if (!posted.ok()) return LogError(posted.status());
  live.credited += credit;
  NoteEarning(live.record.node_id, protocol::Earning{.kind = "slot",
                                                     .ref = tx.ref,
                                                     .model = live.record.model,
                                                     .tokens = live.period_answered,
                                                     .micro = credit,
                                                     .at_ms = tx.at_ms});
}

json Hub::Impl::SlotsJson() const {
  const int64_t now_ms = base::UnixMillis();
  const int64_t today = now_ms / kDayMs;
  json out = json::array();
  for (const auto& [node_id, live] : slots_) {
    int64_t probes = 0;
    const double availability = live.Availability(today, &probes);
    const store::SlotRecord& r = live.record;
    out.push_back(json{{"slot_id", r.id},
                       {"node_id", node_id},
                       {"model", r.model},
                       {"begin_minute", r.begin_minute},
                       {"end_minute", r.end_minute},
                       {"state", std::string(store::SlotStateName(r.state))},
                       {"in_window", InWindow(r, now_ms)},
                       {"connected", ready_.count(node_id) > 0},
                       {"availability_30d", availability},
                       {"probes_30d", probes},
                       {"last_probe", live.last_probe},
                       {"period_credit_micro", SlotPeriodCredit(live)},
                       {"credited_micro", live.credited},
                       {"last_period", live.last_period},
                       {"lost_reason", r.lost_reason}});
  }
  return out;
}

}  // namespace loom::network::hub
