#include "loom/model/rope.h"

#include <cmath>
#include <numbers>

namespace loom::model {

RopeTable::RopeTable(int64_t head_dim, float theta, const RopeScaling& scaling)
    : head_dim_(head_dim), inv_freq_(static_cast<size_t>(head_dim / 2)) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(theta),
                              static_cast<double>(2 * i) / static_cast<double>(head_dim));
    switch (scaling.type) {
      case RopeScalingType::kNone:
        break;
      case RopeScalingType::kLinear:
        f /= scaling.factor;
        break;
      case RopeScalingType::kLlama3: {
        // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and the band in
        // between interpolated smoothly.
        const double old_ctx = static_cast<double>(scaling.original_context);
        const double low_wavelen = old_ctx / scaling.low_freq_factor;
        const double high_wavelen = old_ctx / scaling.high_freq_factor;
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= scaling.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_ctx / wavelen - scaling.low_freq_factor) /
                                (scaling.high_freq_factor - scaling.low_freq_factor);
          f = (1 - smooth) * f / scaling.factor + smooth * f;
        }
        break;
      }
    }
    // Per-pair divisors stored with the model (GGUF rope_freqs.weight), as ggml applies them.
    if (static_cast<int64_t>(scaling.freq_factors.size()) == head_dim / 2) {
      f /= static_cast<double>(scaling.freq_factors[static_cast<size_t>(i)]);
    }
    inv_freq_[static_cast<size_t>(i)] = f;
  }
}

void RopeTable::CosSin(int64_t pos, float* cos_sin) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = static_cast<double>(pos) * inv_freq_[i];
    cos_sin[2 * i] = static_cast<float>(std::cos(angle));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(angle));
  }
}

}  // namespace loom::model
