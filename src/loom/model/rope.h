// Rotary position embedding tables: the inverse frequency of every rotated pair of a head, with the
// context-extension schemes models ship with (linear, llama3, YaRN) and per-pair frequency divisors
// (RopeScaling::freq_factors, from GGUF's rope_freqs.weight).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/model/model_file.h"

namespace loom::model {

class RopeTable {
 public:
  RopeTable() = default;
  // `deepseek2`: llama.cpp's DeepSeek-V2/V3 reading of YaRN's magnitude (YarnMscale).
  RopeTable(int64_t head_dim, float theta, const RopeScaling& scaling, bool deepseek2 = false);

  int64_t head_dim() const { return head_dim_; }
  // The factor cos and sin are multiplied by (YaRN's magnitude correction; 1 otherwise).
  double mscale() const { return mscale_; }

  // cos_sin(head_dim) = cos(pos * f_i), sin(pos * f_i) interleaved for the head_dim/2 pairs i:
  // the layout kernels::Rope expects.
  void CosSin(int64_t pos, float* cos_sin) const;

 private:
  int64_t head_dim_ = 0;
  std::vector<double> inv_freq_;  // (head_dim / 2)
  double mscale_ = 1.0;
};

// YaRN's magnitude corrections as llama.cpp applies them (its llama-context.cpp and deepseek2
// graph): `rope` multiplies the rotated values, `mla_scores` the attention scores of DeepSeek-V2/V3
// (mscale^2, with mscale = rope * (1 + 0.1 * yarn_log_mul * ln factor)).  Both 1 without YaRN.
struct YarnMagnitude {
  double rope = 1.0;
  double mla_scores = 1.0;
};
YarnMagnitude YarnMscale(const RopeScaling& scaling, bool deepseek2);

}  // namespace loom::model
