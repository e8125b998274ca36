#include "loom/network/verify/verify.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::network::verify {

double CheckRate(const store::NodeReputation& r, const RateConfig& c) {
  if (r.untrusted) return 1;
  const double rate =
      c.initial * std::pow(c.decay, static_cast<double>(std::max<int64_t>(0, r.streak)));
  return std::clamp(rate, c.floor, 1.0);
}

double SampleValue(std::string_view seed, std::string_view attempt_id) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), seed.data(), static_cast<int>(seed.size()),
       reinterpret_cast<const unsigned char*>(attempt_id.data()), attempt_id.size(), mac, &len);
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x = (x << 8) | mac[i];
  // The top 53 bits, exactly representable: a value in [0, 1).
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

bool Sampled(std::string_view seed, std::string_view attempt_id, double rate) {
  return SampleValue(seed, attempt_id) < rate;
}

bool Record(store::NodeReputation* r, bool passed, int64_t now_ms, const RateConfig& c) {
  r->last_check_ms = now_ms;
  if (passed) {
    r->checks_passed += 1;
    r->streak += 1;
    r->last_result = "passed";
    return false;
  }
  r->checks_failed += 1;
  r->streak = 0;
  r->last_result = "failed";
  if (r->window_failures == 0 || now_ms - r->window_start_ms > c.failure_window_ms) {
    r->window_start_ms = now_ms;
    r->window_failures = 0;
  }
  r->window_failures += 1;
  if (r->untrusted || r->window_failures < c.failures_to_untrust) return false;
  r->untrusted = true;
  r->untrusted_ms = now_ms;
  return true;
}

Verdict Compare(bool greedy, double temperature, const std::vector<double>& logprobs,
                const std::vector<double>& best, const Thresholds& t) {
  Verdict v;
  v.tokens = static_cast<int64_t>(logprobs.size());
  if (logprobs.size() != best.size()) {
    v.passed = false;
    v.reason = "the verifier's scores do not cover the tokens";
    return v;
  }
  if (logprobs.empty()) return v;  // nothing returned, nothing to doubt
  double sum = 0;
  v.min_logprob = std::numeric_limits<double>::infinity();
  int64_t first_mismatch = -1;
  for (size_t i = 0; i < logprobs.size(); ++i) {
    sum += logprobs[i];
    v.min_logprob = std::min(v.min_logprob, logprobs[i]);
    if (best[i] - logprobs[i] > t.tie_nats) {
      if (v.mismatches == 0) first_mismatch = static_cast<int64_t>(i);
      v.mismatches += 1;
    }
  }
  v.mean_logprob = sum / static_cast<double>(logprobs.size());
  if (greedy) {
    if (v.mismatches > 0) {
      v.passed = false;
      v.reason = StrCat(v.mismatches, " of ", v.tokens,
                        " greedy tokens are not the model's most likely (the first at ",
                        first_mismatch, ")");
    }
    return v;
  }
  const double scale = std::max(1.0, temperature);
  if (v.min_logprob < t.min_logprob * scale) {
    v.passed = false;
    v.reason = StrCat("a sampled token has log-probability ", v.min_logprob, " (below ",
                      t.min_logprob * scale, ")");
  } else if (v.tokens >= t.min_tokens_for_mean && v.mean_logprob < t.mean_logprob * scale) {
    v.passed = false;
    v.reason = StrCat("the sampled tokens' mean log-probability is ", v.mean_logprob, " (below ",
                      t.mean_logprob * scale, ")");
  }
  return v;
}

Decoding DecodingOf(const nlohmann::json& request) {
  Decoding d;
  auto number = [&](const char* key, double absent) {
    auto it = request.find(key);
    return it != request.end() && it->is_number() ? it->get<double>() : absent;
  };
  d.temperature = number("temperature", 1.0);
  const bool penalty =
      number("repetition_penalty", 1.0) != 1.0 || number("repeat_penalty", 1.0) != 1.0;
  d.greedy = (d.temperature <= 0 || number("top_p", 1.0) <= 0) && !penalty;
  return d;
}

}  // namespace loom::network::verify
