#include "loom/text/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::text {
namespace {

// Most likely first; equal values: lower id first (a strict total order, so every sort gives
// the same result).
struct ByLogit {
  bool operator()(const TokenProb& a, const TokenProb& b) const {
    if (a.logit != b.logit) return a.logit > b.logit;
    return a.id < b.id;
  }
};
struct ByProb {
  bool operator()(const TokenProb& a, const TokenProb& b) const {
    if (a.prob != b.prob) return a.prob > b.prob;
    return a.id < b.id;
  }
};

struct ById {
  bool operator()(const TokenProb& a, const TokenProb& b) const { return a.id < b.id; }
};

// top-p adds probabilities as integers in units of 2^-56: integer sums do not depend on the order
// of the terms, so the nucleus found by partial selection is exactly the one a full sort would
// give, on every standard library.  (Probabilities below 2^-56 count as 0; 2^31 float
// probabilities that each round up still sum below 2^63.)
constexpr double kMassScale = 0x1p56;
uint64_t Mass(float prob) {
  // Through int64 (exact: the value is below 2^57), which converts in one instruction.
  return static_cast<uint64_t>(static_cast<int64_t>(static_cast<double>(prob) * kMassScale));
}

// top-p first tries the tokens with p >= max_p * 2^-10, then 2^-20, 2^-30 (see TopP).
constexpr float kTopPShrink = 0x1p-10f;
constexpr int kTopPShrinkRounds = 3;

// Below this many candidates a range is sorted outright.
constexpr int64_t kSmallRange = 16;

}  // namespace

Pcg32::Pcg32(uint64_t seed, uint64_t stream) : inc_((stream << 1) | 1) {
  Next();
  state_ += seed;
  Next();
}

uint32_t Pcg32::Next() {
  const uint64_t old = state_;
  state_ = old * 6364136223846793005ull + inc_;
  const uint32_t xorshifted = static_cast<uint32_t>(((old >> 18) ^ old) >> 27);
  const uint32_t rot = static_cast<uint32_t>(old >> 59);
  return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
}

double Pcg32::NextDouble() {
  const uint64_t hi = Next() >> 5;  // 27 bits
  const uint64_t lo = Next() >> 6;  // 26 bits
  return static_cast<double>((hi << 26) | lo) * 0x1.0p-53;
}

StatusOr<Sampler> Sampler::Create(int64_t vocab_size, const SamplerConfig& c) {
  if (vocab_size <= 0 || vocab_size > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("sampler: vocabulary size ", vocab_size, " is not in [1, 2^31)");
  }
  if (!std::isfinite(c.temperature)) {
    return InvalidArgumentError("sampler: temperature ", c.temperature, " is not finite");
  }
  if (c.top_k < 0) return InvalidArgumentError("sampler: top_k ", c.top_k, " is negative");
  if (!(c.top_p >= 0.0f && c.top_p <= 1.0f)) {
    return InvalidArgumentError("sampler: top_p ", c.top_p, " is not in [0, 1]");
  }
  if (!(c.min_p >= 0.0f && c.min_p <= 1.0f)) {
    return InvalidArgumentError("sampler: min_p ", c.min_p, " is not in [0, 1]");
  }
  if (!(c.repeat_penalty > 0.0f) || !std::isfinite(c.repeat_penalty)) {
    return InvalidArgumentError("sampler: repeat_penalty ", c.repeat_penalty,
                                " is not a positive number");
  }
  if (c.repeat_last_n < 0) {
    return InvalidArgumentError("sampler: repeat_last_n ", c.repeat_last_n, " is negative");
  }
  return Sampler(vocab_size, c);
}

Sampler::Sampler(int64_t vocab_size, const SamplerConfig& config)
    : vocab_size_(vocab_size),
      config_(config),
      rng_(config.seed),
      candidates_(vocab_size),
      scratch_(vocab_size),
      slot_(vocab_size),
      history_(config.repeat_last_n),
      seen_(vocab_size) {}

void Sampler::Accept(int32_t token) {
  if (token < 0 || token >= vocab_size_ || history_.size() == 0) return;
  history_[history_next_] = token;
  history_next_ = (history_next_ + 1) % history_.size();
  history_count_ = std::min(history_count_ + 1, history_.size());
}

void Sampler::ClearHistory() {
  history_count_ = 0;
  history_next_ = 0;
}

void Sampler::ApplyPenalties() {
  if (config_.repeat_penalty == 1.0f || history_count_ == 0) return;
  if (++stamp_ == 0) {  // wrapped: forget all stamps
    std::fill(seen_.data(), seen_.data() + seen_.size(), 0u);
    stamp_ = 1;
  }
  const float penalty = config_.repeat_penalty;
  for (int64_t i = 0; i < history_count_; ++i) {
    const int32_t t = history_[i];
    if (seen_[t] == stamp_) continue;  // each distinct token is penalized once
    seen_[t] = stamp_;
    float& logit = candidates_[t].logit;  // candidates are still in id order here
    logit = logit > 0 ? logit / penalty : logit * penalty;
  }
}

int64_t Sampler::Greedy() const {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab_size_; ++i) {
    if (candidates_[i].logit > candidates_[best].logit) best = i;
  }
  return best;
}

void Sampler::RestoreIdOrder(int64_t n) {
  TokenProb* c = candidates_.data();
  if (n * 16 <= vocab_size_) {
    std::sort(c, c + n, ById());
    return;
  }
  // Many candidates: one pass over the vocabulary instead of an n log n sort.
  int32_t* slot = slot_.data();  // 1 + index in candidates_, 0 = not kept; all 0 between calls
  for (int64_t i = 0; i < n; ++i) slot[c[i].id] = static_cast<int32_t>(i + 1);
  TokenProb* out = scratch_.data();
  int64_t j = 0;
  for (int64_t id = 0; id < vocab_size_; ++id) {
    if (slot[id] != 0) {
      out[j++] = c[slot[id] - 1];
      slot[id] = 0;
    }
  }
  std::swap(candidates_, scratch_);
}

int64_t Sampler::TopP(int64_t n, float max_prob) {
  TokenProb* c = candidates_.data();
  const uint64_t target = static_cast<uint64_t>(static_cast<double>(config_.top_p) * kMassScale);
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) total += Mass(c[i].prob);
  if (total < target) return n;  // rounding left the whole set short of top_p: keep it all
  // Most distributions put the nucleus in a few tokens.  The tokens with p >= t are a prefix of
  // the most-likely-first order, so when their mass reaches the target the nucleus lies among
  // them: two cheap passes (sum, partition) shrink the range before the costlier selection.
  float t = max_prob;
  for (int round = 0; round < kTopPShrinkRounds; ++round) {
    t *= kTopPShrink;
    uint64_t mass = 0;
    for (int64_t i = 0; i < n; ++i) mass += c[i].prob >= t ? Mass(c[i].prob) : 0;
    if (mass >= target) {
      n = std::partition(c, c + n, [t](const TokenProb& x) { return x.prob >= t; }) - c;
      break;
    }
  }
  // Quickselect on the mass: [0, lo) is kept for sure (the most likely tokens), the cut lies in
  // (lo, hi], and `need` is the mass still missing at lo.
  int64_t lo = 0;
  int64_t hi = n;
  uint64_t need = target;
  while (hi - lo > kSmallRange) {
    const int64_t mid = lo + (hi - lo) / 2;
    std::nth_element(c + lo, c + mid, c + hi, ByProb());
    uint64_t mass = 0;
    for (int64_t i = lo; i < mid; ++i) mass += Mass(c[i].prob);
    if (mass >= need) {
      hi = mid;
    } else {
      need -= mass;
      lo = mid;
    }
  }
  std::sort(c + lo, c + hi, ByProb());
  uint64_t cumulative = 0;
  for (int64_t i = lo; i < hi; ++i) {
    cumulative += Mass(c[i].prob);
    if (cumulative >= need) return i + 1;
  }
  return hi;
}

int64_t Sampler::Prepare(std::span<const float> logits) {
  TokenProb* c = candidates_.data();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab_size_; ++i) {
    const float l = logits[static_cast<size_t>(i)];
    c[i] = {.id = static_cast<int32_t>(i), .logit = std::isnan(l) ? kNegInf : l, .prob = 0.0f};
  }
  ApplyPenalties();

  if (config_.temperature <= 0.0f) {
    const int64_t best = Greedy();
    c[0] = {.id = static_cast<int32_t>(best), .logit = c[best].logit, .prob = 1.0f};
    return 1;
  }

  // Between steps the candidates are kept in id order, so that sums (softmax, draw) add their
  // terms in one canonical order whatever the selection algorithms did.
  int64_t n = vocab_size_;
  if (config_.top_k > 0 && config_.top_k < n) {
    std::nth_element(c, c + config_.top_k, c + n, ByLogit());
    n = config_.top_k;
    RestoreIdOrder(n);
    c = candidates_.data();
  }

  if (config_.temperature != 1.0f) {
    for (int64_t i = 0; i < n; ++i) c[i].logit /= config_.temperature;
  }

  float max_logit = kNegInf;
  for (int64_t i = 0; i < n; ++i) max_logit = std::max(max_logit, c[i].logit);
  if (max_logit == kNegInf) {
    // Nothing is possible (all -inf): fall back to the lowest id, deterministically.
    c[0] = {.id = c[0].id, .logit = kNegInf, .prob = 1.0f};
    return 1;
  }
  const bool infinite_max = std::isinf(max_logit);  // +inf logits share all the mass
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double e =
        infinite_max ? (c[i].logit == max_logit ? 1.0 : 0.0)
                     : std::exp(static_cast<double>(c[i].logit) - static_cast<double>(max_logit));
    c[i].prob = static_cast<float>(e);
    sum += e;
  }
  const double inv_sum = 1.0 / sum;
  float max_prob = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    c[i].prob = static_cast<float>(static_cast<double>(c[i].prob) * inv_sum);
    max_prob = std::max(max_prob, c[i].prob);
  }

  if (config_.top_p < 1.0f) {
    n = TopP(n, max_prob);
    RestoreIdOrder(n);
    c = candidates_.data();
  }

  if (config_.min_p > 0.0f) {
    const float threshold = config_.min_p * max_prob;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {  // stable compaction keeps the id order
      if (c[i].prob >= threshold) c[kept++] = c[i];
    }
    n = std::max<int64_t>(kept, 1);  // the most likely token always passes: p_max >= min_p*p_max
  }
  return n;
}

StatusOr<std::span<const TokenProb>> Sampler::Distribution(std::span<const float> logits) {
  if (static_cast<int64_t>(logits.size()) != vocab_size_) {
    return InvalidArgumentError("sampler: got ", logits.size(), " logits for a vocabulary of ",
                                vocab_size_);
  }
  const int64_t n = Prepare(logits);
  return std::span<const TokenProb>(candidates_.data(), static_cast<size_t>(n));
}

StatusOr<int32_t> Sampler::Sample(std::span<const float> logits) {
  if (static_cast<int64_t>(logits.size()) != vocab_size_) {
    return InvalidArgumentError("sampler: got ", logits.size(), " logits for a vocabulary of ",
                                vocab_size_);
  }
  const int64_t n = Prepare(logits);
  const TokenProb* c = candidates_.data();
  if (n == 1) return c[0].id;
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += c[i].prob;
  const double target = rng_.NextDouble() * total;
  double cdf = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    cdf += c[i].prob;
    if (target < cdf) return c[i].id;
  }
  return c[n - 1].id;  // rounding left target just past the last cdf
}

}  // namespace loom::text
