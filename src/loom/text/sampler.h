// Token samplers: greedy, temperature, top-k, top-p (nucleus), min-p and a repetition penalty,
// drawn with a seeded PCG32 generator of our own so that one seed gives the same tokens with
// every compiler and standard library (std::*_distribution differ between them).
//
// Order of the steps (the order llama.cpp's default chain uses for these samplers):
//   1. repetition penalty over the last repeat_last_n accepted tokens, each distinct token once
//      (llama.cpp semantics: a positive logit is divided by the penalty, a negative one multiplied)
//   2. greedy when temperature <= 0: argmax, ties -> lowest id (as llama2.c); the rest is skipped
//   3. top-k on the logits (k most likely; ties -> lower id)
//   4. temperature: logits / T
//   5. softmax over what is left
//   6. top-p: the smallest most-likely-first prefix (ties -> lower id) whose probability sum is
//      >= top_p, the sum taken exactly in units of 2^-56
//   7. min-p: drop tokens whose probability is < min_p * (the largest probability)
//   8. draw: one uniform number in [0, total of the kept probabilities), walked along the kept
//      tokens in id order
// Selection is O(vocab) (nth_element / quickselect, no full sort), and the kept set is put back
// in id order between steps, so every sum adds its terms in one canonical order: a seed gives the
// same tokens with any standard library's sort and selection algorithms.
// Every step keeps at least one token.  A NaN logit counts as -infinity.
//
// All buffers are sized to the vocabulary in Create(); Sample() never touches the heap.
#pragma once

#include <cstdint>
#include <span>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"

namespace loom::text {

// PCG32 (O'Neill's pcg32, XSH-RR output, 64-bit state): small, fast, and the same everywhere.
class Pcg32 {
 public:
  explicit Pcg32(uint64_t seed, uint64_t stream = 0xda3e39cb94b95bdbull);
  uint32_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double NextDouble();

 private:
  uint64_t state_ = 0;
  uint64_t inc_ = 0;  // odd; selects the stream
};

struct SamplerConfig {
  float temperature = 1.0f;     // <= 0: greedy
  int32_t top_k = 0;            // keep the k most likely tokens; 0 = off
  float top_p = 1.0f;           // [0, 1]; 1 = off, 0 = only the most likely token
  float min_p = 0.0f;           // [0, 1]; 0 = off
  float repeat_penalty = 1.0f;  // > 0; 1 = off, > 1 discourages repeats
  int32_t repeat_last_n = 64;   // tokens the penalty looks back over; 0 = off
  uint64_t seed = 0x4c6f6f6dull;
};

// One token of the truncated distribution.
struct TokenProb {
  int32_t id = 0;
  float logit = 0;  // after penalties, top-k and temperature
  float prob = 0;   // after softmax, before renormalizing the truncated set
};

class Sampler {
 public:
  // Validates the configuration (ranges above) and allocates the buffers.
  static StatusOr<Sampler> Create(int64_t vocab_size, const SamplerConfig& config);

  Sampler(Sampler&&) noexcept = default;
  Sampler& operator=(Sampler&&) noexcept = default;

  // Records a token (prompt or generated) in the repetition-penalty window.  Ids outside the
  // vocabulary are ignored.
  void Accept(int32_t token);
  void ClearHistory();

  // Chooses the next token from `logits` (vocab_size floats; not modified).  Errors only when
  // `logits` has the wrong length.
  StatusOr<int32_t> Sample(std::span<const float> logits);

  // The tokens the draw in Sample() would choose from, in id order, with their probabilities
  // (steps 1-7, no draw, RNG untouched).  For tests and log-probabilities.  Greedy gives the
  // argmax with probability 1.  Valid until the next call on this object.
  StatusOr<std::span<const TokenProb>> Distribution(std::span<const float> logits);

  int64_t vocab_size() const { return vocab_size_; }
  const SamplerConfig& config() const { return config_; }

 private:
  Sampler(int64_t vocab_size, const SamplerConfig& config);
  // Runs steps 1-7 into candidates_[0, n); returns n.
  int64_t Prepare(std::span<const float> logits);
  void ApplyPenalties();
  int64_t Greedy() const;
  // Reorders candidates_[0, n) by id (O(n log n) for few, O(vocab) for many).
  void RestoreIdOrder(int64_t n);
  // Moves the top-p nucleus of candidates_[0, n) (largest probability max_prob) to the front;
  // returns its size.
  int64_t TopP(int64_t n, float max_prob);

  int64_t vocab_size_ = 0;
  SamplerConfig config_;
  Pcg32 rng_;
  base::AlignedBuffer<TokenProb> candidates_;  // (vocab_size)
  base::AlignedBuffer<TokenProb> scratch_;     // (vocab_size) for RestoreIdOrder
  base::AlignedBuffer<int32_t> slot_;          // (vocab_size) for RestoreIdOrder; all 0 at rest
  base::AlignedBuffer<int32_t> history_;       // (repeat_last_n) ring of accepted tokens
  int64_t history_count_ = 0;                  // valid entries in history_
  int64_t history_next_ = 0;                   // ring position of the next write
  base::AlignedBuffer<uint32_t> seen_;         // (vocab_size) stamp: penalized in this call
  uint32_t stamp_ = 0;
};

}  // namespace loom::text
