#include "loom/network/placement/placement.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>

namespace loom::network::placement {
namespace {

constexpr double kBytesPerGb = 1e9;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// How many targets ahead the scans prefetch (the indexed one: a target, then its model list).
constexpr size_t kPrefetchAhead = 8;
constexpr size_t kPrefetchListAhead = 4;

// The first filter a target fails, in the order they are applied (kPass: none).
enum class Check : uint8_t {
  kPass,
  kExcluded,
  kOffline,
  kSuspect,
  kDraining,
  kPaused,
  kConcurrency,
  kMemory,
  kContext,
  kCount,
};

enum class SpeedSource : uint8_t { kMeasured, kEstimated, kClamped, kDefault };

std::string_view SpeedSourceName(SpeedSource s) {
  switch (s) {
    case SpeedSource::kMeasured:
      return "measured";
    case SpeedSource::kEstimated:
      return "estimated";
    case SpeedSource::kClamped:
      return "clamped";
    case SpeedSource::kDefault:
      return "default";
  }
  return "default";
}

int64_t NonNegative(int64_t v) { return v < 0 ? 0 : v; }

// Both arguments >= 0; saturates instead of overflowing (byte counts from the wire are bounded,
// but a product of two bounded numbers need not be).
int64_t SatAdd(int64_t a, int64_t b) { return a > kInt64Max - b ? kInt64Max : a + b; }
int64_t SatMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kInt64Max / b ? kInt64Max : a * b;
}
int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0; }

// Everything Place() needs to know about one target holding the model.
struct Eval {
  Check check = Check::kPass;
  bool memory_ok = false;
  bool context_ok = false;
  int64_t positions = 0;       // prompt + max_tokens
  int64_t need_per_rank = 0;   // bytes: weights (if not loaded) + KV, one rank's share
  int64_t avail_per_rank = 0;  // bytes: mem_free / ranks after the reserve
  Costs costs;                 // only when check == kPass
  double prefill_tps = 0;
  double decode_tps = 0;  // effective
  SpeedSource source = SpeedSource::kDefault;
};

// Finds a model by name in a target's list.  The registry scan compares the request's model
// name with every offer of every target, so mismatches are settled cheaply first: by length, then
// by three 8-byte words (start, middle, end: catalogue names tend to share an organisation prefix
// and a quantisation suffix and differ in the middle), and only then by a full compare.
class NameMatcher {
 public:
  explicit NameMatcher(const std::string& name) : name_(name) {
    if (name.size() >= 8) {
      head_ = Word(name.data());
      middle_ = Word(name.data() + MiddleOffset(name.size()));
      tail_ = Word(name.data() + name.size() - 8);
    }
  }

  bool Matches(const std::string& other) const {
    const size_t n = name_.size();
    if (other.size() != n) return false;
    if (n >= 8) {
      const char* p = other.data();
      if (Word(p + MiddleOffset(n)) != middle_ || Word(p) != head_ || Word(p + n - 8) != tail_) {
        return false;
      }
    }
    return std::memcmp(other.data(), name_.data(), n) == 0;
  }

  const ModelOffer* Find(const Target& target) const {
    for (const ModelOffer& m : target.models) {
      if (Matches(m.name)) return &m;
    }
    return nullptr;
  }

 private:
  static size_t MiddleOffset(size_t n) { return (n - 8) / 2; }
  static uint64_t Word(const char* p) {
    uint64_t w;
    std::memcpy(&w, p, sizeof(w));
    return w;
  }

  const std::string& name_;
  uint64_t head_ = 0, middle_ = 0, tail_ = 0;
};

const ModelOffer* FindOffer(const Target& target, const std::string& model) {
  return NameMatcher(model).Find(target);
}

bool IsExcluded(const Request& request, const std::string& id) {
  for (const std::string& e : request.exclude) {
    if (e == id) return true;
  }
  return false;
}

int64_t QueueDepth(const Target& t) {
  return int64_t{std::max(t.running, 0)} + int64_t{std::max(t.waiting, 0)};
}

// Applies the filters and, when all pass, the cost model.  `excluded` comes from the request.
Eval Evaluate(const Request& request, const Target& t, const ModelOffer& m, const Tuning& tuning,
              bool excluded) {
  Eval e;
  const int64_t ranks = std::max<int64_t>(t.ranks, 1);
  const int64_t prompt = NonNegative(request.prompt_tokens);
  const int64_t max_tokens = NonNegative(request.max_tokens);
  e.positions = SatAdd(prompt, max_tokens);

  const int64_t kv_bytes = SatMul(NonNegative(m.kv_bytes_per_token), e.positions);
  const int64_t weight_bytes = NonNegative(m.weight_bytes);
  e.need_per_rank = SatAdd(CeilDiv(kv_bytes, ranks), m.loaded ? 0 : CeilDiv(weight_bytes, ranks));
  const double reserve = std::clamp(tuning.memory_reserve_fraction, 0.0, 1.0);
  const double avail = static_cast<double>(NonNegative(t.mem_free_bytes) / ranks) * (1 - reserve);
  e.avail_per_rank = static_cast<int64_t>(avail);
  e.memory_ok = e.need_per_rank <= e.avail_per_rank;
  e.context_ok = e.positions <= m.context;

  const int32_t running = std::max(t.running, 0);
  const int32_t max_concurrency = std::max(t.max_concurrency, 1);
  if (excluded) {
    e.check = Check::kExcluded;
  } else if (t.state == TargetState::kOffline) {
    e.check = Check::kOffline;
  } else if (t.state == TargetState::kSuspect) {
    e.check = Check::kSuspect;
  } else if (t.draining) {
    e.check = Check::kDraining;
  } else if (t.paused) {
    e.check = Check::kPaused;
  } else if (running >= max_concurrency) {
    e.check = Check::kConcurrency;
  } else if (!e.memory_ok) {
    e.check = Check::kMemory;
  } else if (!e.context_ok) {
    e.check = Check::kContext;
  }
  if (e.check != Check::kPass) return e;

  // Speeds.  Bytes read per generated token: one rank's share of the weights, all ranks at once.
  const double bytes_per_token = static_cast<double>(weight_bytes) / static_cast<double>(ranks);
  const double bandwidth =
      PositiveFinite(t.mem_bandwidth_gbps) ? t.mem_bandwidth_gbps * kBytesPerGb : 0;
  const double bound = (bandwidth > 0 && bytes_per_token > 0)
                           ? bandwidth / bytes_per_token
                           : std::numeric_limits<double>::infinity();
  const double fallback =
      PositiveFinite(tuning.fallback_decode_tps) ? tuning.fallback_decode_tps : 1;
  double decode = 0;
  if (PositiveFinite(m.decode_tps)) {
    decode = m.decode_tps;
    e.source = SpeedSource::kMeasured;
    if (decode > bound) {
      decode = bound;
      e.source = SpeedSource::kClamped;
    }
  } else if (std::isfinite(bound) && PositiveFinite(tuning.unmeasured_efficiency)) {
    decode = std::min(tuning.unmeasured_efficiency, 1.0) * bound;
    e.source = SpeedSource::kEstimated;
  }
  if (!PositiveFinite(decode)) {
    decode = fallback;
    e.source = SpeedSource::kDefault;
  }
  // Unmeasured prefill: 10x the single-stream decode speed (prompts are compute-bound and batched).
  e.prefill_tps = PositiveFinite(m.prefill_tps) ? m.prefill_tps : 10 * decode;
  const double slowdown = std::max(tuning.running_slowdown, 0.0);
  e.decode_tps = decode / (1 + slowdown * running);

  Costs& c = e.costs;
  c.cold_load_s = m.loaded ? 0
                           : tuning.cold_load_fixed_s + tuning.cold_load_s_per_gb *
                                                            static_cast<double>(weight_bytes) /
                                                            kBytesPerGb;
  c.decode_s = static_cast<double>(max_tokens) / e.decode_tps;
  c.queue_s = static_cast<double>(QueueDepth(t)) / max_concurrency * c.decode_s;
  c.prefill_s = static_cast<double>(prompt) / e.prefill_tps;
  c.total_s = c.cold_load_s + c.queue_s + c.prefill_s + c.decode_s;
  return e;
}

// "5.2 GB", "512 GB", "0.0123 GB".
std::string Gb(int64_t bytes) {
  char buf[32];
  const double gb = static_cast<double>(bytes) / kBytesPerGb;
  std::snprintf(buf, sizeof(buf), gb >= 100 ? "%.0f GB" : "%.3g GB", gb);
  return buf;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g s", s);
  return buf;
}

std::string RejectText(const Eval& e, const Target& t, const ModelOffer& m, const Tuning& tuning) {
  switch (e.check) {
    case Check::kPass:
      return "";
    case Check::kExcluded:
      return "excluded (failed this job)";
    case Check::kOffline:
      return "offline";
    case Check::kSuspect:
      return "suspect (heartbeat late)";
    case Check::kDraining:
      return "draining";
    case Check::kPaused:
      return "paused";
    case Check::kConcurrency:
      return "at concurrency " + std::to_string(std::max(t.running, 0)) + "/" +
             std::to_string(std::max(t.max_concurrency, 1));
    case Check::kMemory: {
      const int reserve_pct =
          static_cast<int>(std::lround(std::clamp(tuning.memory_reserve_fraction, 0.0, 1.0) * 100));
      const std::string tail = " (after the " + std::to_string(reserve_pct) + "% reserve)";
      if (t.ranks > 1) {
        return "needs " + Gb(e.need_per_rank) + " per rank, " + Gb(e.avail_per_rank) +
               " free per rank of " + std::to_string(t.ranks) + tail;
      }
      return "needs " + Gb(e.need_per_rank) + ", " + Gb(e.avail_per_rank) + " free" + tail;
    }
    case Check::kContext:
      return "context " + std::to_string(m.context) + " is smaller than " +
             std::to_string(e.positions) + " positions (prompt + max_tokens)";
    case Check::kCount:
      break;
  }
  return "";
}

std::string_view CheckCountName(Check c) {
  switch (c) {
    case Check::kExcluded:
      return "excluded";
    case Check::kOffline:
      return "offline";
    case Check::kSuspect:
      return "suspect";
    case Check::kDraining:
      return "draining";
    case Check::kPaused:
      return "paused";
    case Check::kConcurrency:
      return "at concurrency";
    case Check::kMemory:
      return "short of memory";
    case Check::kContext:
      return "with too small a context";
    default:
      return "";
  }
}

Candidate MakeCandidate(const Request& request, const Target& t, const Tuning& tuning) {
  const ModelOffer& m = *FindOffer(t, request.model);
  const Eval e = Evaluate(request, t, m, tuning, IsExcluded(request, t.id));
  Candidate c;
  c.target_id = t.id;
  c.eligible = e.check == Check::kPass;
  c.rejected = RejectText(e, t, m, tuning);
  if (c.eligible) {
    c.costs = e.costs;
    c.prefill_tps = e.prefill_tps;
    c.decode_tps = e.decode_tps;
    c.speed_source = SpeedSourceName(e.source);
  }
  return c;
}

// What the first pass keeps of an eligible target.
struct Light {
  int32_t index;  // into targets
  bool reserved;  // the offer is a reserved slot
  int64_t queue;  // running + waiting
  double total_s;
};

bool Better(const Light& a, const Light& b) {
  if (a.reserved != b.reserved) return a.reserved;
  if (a.total_s != b.total_s) return a.total_s < b.total_s;
  if (a.queue != b.queue) return a.queue < b.queue;
  return a.index < b.index;
}

// What the pass over the holders learns, and the decision made from it.  Both Place() overloads
// feed it the holders in their order; it keeps 24 bytes per eligible target and the first
// kMaxCandidates rejects, and builds full candidates only for the ones kept.
class Tally {
 public:
  Tally(const Request& request, const std::vector<Target>& targets, const Tuning& tuning,
        size_t max_holders)
      : request_(request), targets_(targets), tuning_(tuning) {
    eligible_.reserve(max_holders);
    rejects_.reserve(kMaxCandidates);
  }

  void Add(size_t index, const ModelOffer& offer) {
    const Target& t = targets_[index];
    ++holders_;
    const bool excluded = !request_.exclude.empty() && IsExcluded(request_, t.id);
    const Eval e = Evaluate(request_, t, offer, tuning_, excluded);
    if (!excluded) {
      ++not_excluded_;
      if (!e.context_ok) ++context_too_small_;
      max_context_ = std::max(max_context_, offer.context);
      if (e.context_ok && (e.memory_ok || t.running > 0)) ++could_ever_run_;
    }
    if (e.check == Check::kPass) {
      eligible_.push_back(
          {static_cast<int32_t>(index), offer.reserved, QueueDepth(t), e.costs.total_s});
    } else {
      ++counts_[static_cast<size_t>(e.check)];
      if (rejects_.size() < static_cast<size_t>(kMaxCandidates)) {
        rejects_.push_back(static_cast<int32_t>(index));
      }
    }
  }

  Decision Finish(std::mt19937_64& random);

 private:
  const Request& request_;
  const std::vector<Target>& targets_;
  const Tuning& tuning_;
  std::vector<Light> eligible_;
  std::vector<int32_t> rejects_;  // the first kMaxCandidates rejected, in the order seen
  std::array<int32_t, static_cast<size_t>(Check::kCount)> counts_{};
  int32_t holders_ = 0;
  int32_t not_excluded_ = 0;
  int32_t could_ever_run_ = 0;  // not excluded, context big enough, memory fits or may free up
  int32_t context_too_small_ = 0;
  int64_t max_context_ = 0;  // the largest context among the non-excluded holders
};

Decision Tally::Finish(std::mt19937_64& random) {
  Decision d;
  d.holders = holders_;
  d.eligible = static_cast<int32_t>(eligible_.size());
  const std::string quoted_model = "'" + request_.model + "'";

  if (!eligible_.empty()) {
    // Reserved slots first: when one is eligible, only those compete.  The best total; totals
    // within near_tie_fraction of it are ties, won by the lowest queue, then at random.
    const bool any_reserved =
        std::any_of(eligible_.begin(), eligible_.end(), [](const Light& l) { return l.reserved; });
    double best = std::numeric_limits<double>::infinity();
    for (const Light& l : eligible_) {
      if (l.reserved == any_reserved) best = std::min(best, l.total_s);
    }
    const double tie = best + std::abs(best) * std::max(tuning_.near_tie_fraction, 0.0);
    // Outside the pool (a spare target while a reserved slot is eligible) nothing is a tie.
    auto near = [&](const Light& l) { return l.reserved == any_reserved && l.total_s <= tie; };
    int64_t min_queue = std::numeric_limits<int64_t>::max();
    int32_t near_ties = 0;
    for (const Light& l : eligible_) {
      if (near(l)) {
        ++near_ties;
        min_queue = std::min(min_queue, l.queue);
      }
    }
    size_t winners = 0;
    for (const Light& l : eligible_) winners += (near(l) && l.queue == min_queue);
    size_t pick = 0;
    if (winners > 1) pick = std::uniform_int_distribution<size_t>(0, winners - 1)(random);
    size_t chosen = 0;
    for (size_t i = 0, k = 0; i < eligible_.size(); ++i) {
      const Light& l = eligible_[i];
      if (near(l) && l.queue == min_queue && k++ == pick) {
        chosen = i;
        break;
      }
    }
    std::swap(eligible_[0], eligible_[chosen]);
    const size_t kept = std::min(eligible_.size(), static_cast<size_t>(kMaxCandidates));
    std::partial_sort(eligible_.begin() + 1, eligible_.begin() + static_cast<ptrdiff_t>(kept),
                      eligible_.end(), Better);

    const Target& winner = targets_[static_cast<size_t>(eligible_[0].index)];
    d.placed = true;
    d.target_id = winner.id;
    d.candidates.reserve(std::min(kept + rejects_.size(), static_cast<size_t>(kMaxCandidates)));
    for (size_t i = 0; i < kept; ++i) {
      d.candidates.push_back(
          MakeCandidate(request_, targets_[static_cast<size_t>(eligible_[i].index)], tuning_));
    }
    const Costs& c = d.candidates[0].costs;
    d.detail = "placed " + quoted_model + " on '" + winner.id + "': estimated " +
               Seconds(c.total_s) + " (cold load " + Seconds(c.cold_load_s) + ", queue " +
               Seconds(c.queue_s) + ", prefill " + Seconds(c.prefill_s) + ", decode " +
               Seconds(c.decode_s) + "); " + std::to_string(d.eligible) + " of " +
               std::to_string(d.holders) + " targets holding it eligible";
    if (any_reserved) d.detail += "; a reserved slot (reserved slots go first)";
    if (near_ties > 1) {
      d.detail += "; " + std::to_string(near_ties) + " within " +
                  std::to_string(static_cast<int>(std::lround(tuning_.near_tie_fraction * 100))) +
                  "% of the best, decided by queue depth" + (winners > 1 ? " then at random" : "");
    }
  } else {
    d.placed = false;
    if (d.holders == 0) {
      d.reason = "no_node_for_model";
      d.detail = "no target holds model " + quoted_model;
    } else if (not_excluded_ == 0) {
      d.reason = "no_node_for_model";
      d.detail = "every target holding model " + quoted_model +
                 " is excluded (it already failed this job)";
    } else if (could_ever_run_ == 0) {
      d.reason = "no_node_for_model";
      const int64_t positions =
          SatAdd(NonNegative(request_.prompt_tokens), NonNegative(request_.max_tokens));
      if (context_too_small_ == not_excluded_) {
        d.detail = "the context of model " + quoted_model + " is too small: the request needs " +
                   std::to_string(positions) +
                   " positions (prompt + max_tokens), the largest "
                   "context offered is " +
                   std::to_string(max_context_);
      } else {
        d.detail = "no target holding model " + quoted_model + " can fit it with KV for " +
                   std::to_string(positions) + " positions, even idle (" +
                   std::to_string(not_excluded_ - context_too_small_) + " short of memory, " +
                   std::to_string(context_too_small_) + " with too small a context)";
      }
    } else {
      d.reason = "over_capacity";
      d.detail = "all " + std::to_string(d.holders) + " targets holding model " + quoted_model +
                 " are unavailable right now (";
      bool first = true;
      for (size_t k = 1; k < counts_.size(); ++k) {
        if (counts_[k] == 0) continue;
        d.detail += (first ? "" : ", ") + std::to_string(counts_[k]) + " " +
                    std::string(CheckCountName(static_cast<Check>(k)));
        first = false;
      }
      d.detail += ")";
    }
  }

  for (int32_t index : rejects_) {
    if (d.candidates.size() >= static_cast<size_t>(kMaxCandidates)) break;
    d.candidates.push_back(MakeCandidate(request_, targets_[static_cast<size_t>(index)], tuning_));
  }
  return d;
}

}  // namespace

Decision Place(const Request& request, const std::vector<Target>& targets, const Tuning& tuning,
               std::mt19937_64& random) {
  Tally tally(request, targets, tuning, targets.size());
  const NameMatcher matcher(request.model);
  for (size_t i = 0; i < targets.size(); ++i) {
    // The scan is bound by memory: every target's model list is its own heap block, which the
    // hardware prefetcher cannot predict.  Ask for the list a few targets ahead.  (Prefetching
    // the names in it as well measured slower: it walks every list twice.)
    if (i + kPrefetchAhead < targets.size()) {
      __builtin_prefetch(targets[i + kPrefetchAhead].models.data());
    }
    if (const ModelOffer* offer = matcher.Find(targets[i])) tally.Add(i, *offer);
  }
  return tally.Finish(random);
}

Decision Place(const Request& request, const std::vector<Target>& targets,
               std::span<const int32_t> holders, const Tuning& tuning, std::mt19937_64& random) {
  Tally tally(request, targets, tuning, holders.size());
  const NameMatcher matcher(request.model);
  const auto valid = [&](int32_t index) {
    return index >= 0 && static_cast<size_t>(index) < targets.size();
  };
  for (size_t k = 0; k < holders.size(); ++k) {
    if (k + kPrefetchAhead < holders.size() && valid(holders[k + kPrefetchAhead])) {
      __builtin_prefetch(&targets[static_cast<size_t>(holders[k + kPrefetchAhead])]);
    }
    if (k + kPrefetchListAhead < holders.size() && valid(holders[k + kPrefetchListAhead])) {
      __builtin_prefetch(
          targets[static_cast<size_t>(holders[k + kPrefetchListAhead])].models.data());
    }
    // A stale index (out of range, or a target that no longer lists the model) is skipped.
    if (!valid(holders[k])) continue;
    const size_t i = static_cast<size_t>(holders[k]);
    if (const ModelOffer* offer = matcher.Find(targets[i])) tally.Add(i, *offer);
  }
  return tally.Finish(random);
}

nlohmann::json DecisionToJson(const Decision& d) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const Candidate& c : d.candidates) {
    candidates.push_back({
        {"target_id", c.target_id},
        {"eligible", c.eligible},
        {"rejected", c.rejected},
        {"costs",
         {{"cold_load_s", c.costs.cold_load_s},
          {"queue_s", c.costs.queue_s},
          {"prefill_s", c.costs.prefill_s},
          {"decode_s", c.costs.decode_s},
          {"total_s", c.costs.total_s}}},
        {"prefill_tps", c.prefill_tps},
        {"decode_tps", c.decode_tps},
        {"speed_source", c.speed_source},
    });
  }
  return {
      {"placed", d.placed},
      {"target_id", d.target_id},
      {"reason", d.reason},
      {"detail", d.detail},
      {"holders", d.holders},
      {"eligible", d.eligible},
      {"candidates", std::move(candidates)},
  };
}

}  // namespace loom::network::placement
