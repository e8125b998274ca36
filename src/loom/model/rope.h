// Rotary position embedding tables: the inverse frequency of every rotated pair of a head, with the
// context-extension schemes models ship with (linear, llama3) and per-pair frequency divisors
// (RopeScaling::freq_factors, from GGUF's rope_freqs.weight).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/model/model_file.h"

namespace loom::model {

class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(int64_t head_dim, float theta, const RopeScaling& scaling);

  int64_t head_dim() const { return head_dim_; }

  // cos_sin(head_dim) = cos(pos * f_i), sin(pos * f_i) interleaved for the head_dim/2 pairs i:
  // the layout kernels::Rope expects.
  void CosSin(int64_t pos, float* cos_sin) const;

 private:
  int64_t head_dim_ = 0;
  std::vector<double> inv_freq_;  // (head_dim / 2)
};

}  // namespace loom::model
