#include "loom/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace loom::model {

namespace {

// HF's / llama.cpp's yarn_get_mscale.
double GetMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// The pair index where a rotation makes `rotations` turns over the original context (ggml's
// ggml_rope_yarn_corr_dim).
double CorrDim(int64_t n_dims, int64_t original_context, double rotations, double base) {
  return static_cast<double>(n_dims) *
         std::log(static_cast<double>(original_context) / (rotations * 2 * std::numbers::pi)) /
         (2 * std::log(base));
}

}  // namespace

YarnMagnitude YarnMscale(const RopeScaling& s, bool deepseek2) {
  YarnMagnitude m;
  if (s.type != RopeScalingType::kYarn) return m;
  const double factor = s.factor;
  double org = GetMscale(factor, 1.0);
  if (s.yarn_log_mul != 0.0f) {
    // DeepSeek-V2 configs set mscale = mscale_all_dim (llama.cpp assumes mscale 1 otherwise).
    const double mscale = deepseek2 && s.yarn_log_mul != 1.0f ? s.yarn_log_mul : 1.0;
    org = GetMscale(factor, mscale) / GetMscale(factor, s.yarn_log_mul);
  }
  org *= s.attn_factor;
  m.rope = org;
  if (deepseek2) {
    const double mscale = org * (1.0 + 0.1 * s.yarn_log_mul * std::log(factor));
    m.mla_scores = mscale * mscale;
  }
  return m;
}

RopeTable::RopeTable(int64_t head_dim, float theta, const RopeScaling& scaling, bool deepseek2)
    : head_dim_(head_dim), inv_freq_(static_cast<size_t>(head_dim / 2)) {
  // YaRN's ramp: pairs below `low` rotate fast enough to keep their frequency, pairs above `high`
  // are interpolated by 1 / factor, and the band between blends the two.
  double low = 0.0, high = 0.0;
  if (scaling.type == RopeScalingType::kYarn) {
    low = std::max(
        0.0, std::floor(CorrDim(head_dim, scaling.original_context, scaling.beta_fast, theta)));
    high =
        std::min(static_cast<double>(head_dim - 1),
                 std::ceil(CorrDim(head_dim, scaling.original_context, scaling.beta_slow, theta)));
    mscale_ = YarnMscale(scaling, deepseek2).rope;
  }
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
      case RopeScalingType::kYarn: {
        const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
        const double extrapolate = 1.0 - std::min(1.0, std::max(0.0, y));
        f = f / scaling.factor * (1.0 - extrapolate) + f * extrapolate;
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
    cos_sin[2 * i] = static_cast<float>(std::cos(angle) * mscale_);
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(angle) * mscale_);
  }
}

}  // namespace loom::model
