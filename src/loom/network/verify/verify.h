// Verified work (docs/network.md, "Verification"): the pure rules the hub applies when it checks a
// node's output.
//
//   Which attempts are checked: Sampled(seed, attempt id, rate) is a keyed hash of the attempt id
//   (HMAC-SHA256 under the hub's secret seed) below the node's rate, so a node cannot tell which
//   of its attempts will be checked, and the hub's decision is reproducible from its seed.
//   How often: CheckRate(reputation) starts at RateConfig::initial for a node never checked and
//   falls geometrically with each check passed in a row down to RateConfig::floor; a failure
//   starts it over.  RateConfig::failures_to_untrust failures within failure_window_ms make the
//   node untrusted (Record says when that happened).
//   What passes: Compare(...) over another node's teacher-forced scores of the returned tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/base/status.h"
#include "loom/network/store/store.h"

namespace loom::network::verify {

struct RateConfig {
  double initial = 0.5;  // a new node: 1 attempt in 2
  double floor = 0.02;   // a long-trusted node: 1 in 50
  double decay = 0.8;    // the rate's factor per check passed in a row (floor after ~14)
  int64_t failures_to_untrust = 3;
  int64_t failure_window_ms = int64_t{24} * 3600 * 1000;
};

// The chance that an attempt of a node with `reputation` is checked (1 for an untrusted one).
double CheckRate(const store::NodeReputation& reputation, const RateConfig& config);

// Whether attempt `attempt_id` is checked at `rate`: HMAC-SHA256(seed, attempt id), its first 8
// bytes as a number in [0, 1), below `rate`.  Deterministic per (seed, id).
bool Sampled(std::string_view seed, std::string_view attempt_id, double rate);
// The number in [0, 1) that Sampled compares with the rate.
double SampleValue(std::string_view seed, std::string_view attempt_id);

// Updates `reputation` with a check's result at now_ms; returns true when this result made the
// node untrusted (it was not before).
bool Record(store::NodeReputation* reputation, bool passed, int64_t now_ms,
            const RateConfig& config);

// The comparison rule, with the thresholds documented in docs/network.md.
struct Thresholds {
  // Greedy: the returned token may trail the verifier's most likely token by at most this many
  // nats (a tie, or two builds' rounding of a near-tie).
  double tie_nats = 0.05;
  // Sampled: per token, the returned tokens' mean log-probability must be at least this, times
  // max(1, temperature) (with at least min_tokens_for_mean tokens), and every token's at least
  // min_logprob times max(1, temperature).
  double mean_logprob = -6.0;
  double min_logprob = -30.0;
  int64_t min_tokens_for_mean = 8;
};

struct Verdict {
  bool passed = true;
  std::string reason;  // why not, for people
  int64_t tokens = 0;
  int64_t mismatches = 0;  // greedy: tokens that were not the verifier's argmax
  double mean_logprob = 0;
  double min_logprob = 0;
};

// `logprobs[i]` is returned token i's log-probability under the verifier's model given the prompt
// and the tokens before it; `best[i]` the most likely token's there.  Both as long as the tokens.
Verdict Compare(bool greedy, double temperature, const std::vector<double>& logprobs,
                const std::vector<double>& best, const Thresholds& thresholds);

// Whether a request body decodes greedily (temperature 0, or top_p 0, and no repetition penalty,
// which moves the argmax off the raw logits), and its temperature (1 when absent).
struct Decoding {
  bool greedy = false;
  double temperature = 1;
};
Decoding DecodingOf(const nlohmann::json& request);

}  // namespace loom::network::verify
