// Helpers shared by the kernels tests (test-only).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "loom/kernels/simd_target.h"

namespace loom::kernels::testing {

// Runs body() once per SIMD target compiled in and supported here (a SCOPED_TRACE names it), so
// every code path is compared with the reference, then restores the automatic choice.
inline void ForEachSimdTarget(const std::function<void()>& body) {
  const std::vector<int64_t> targets = AvailableSimdTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    ForceSimdTargetForTest(target);
    ASSERT_EQ(ActiveSimdTarget(), target) << SimdTargetName(target);
    SCOPED_TRACE(std::string("SIMD target ") + std::string(SimdTargetName(target)));
    body();
  }
  ForceSimdTargetForTest(0);
}

// n values uniform in [-scale, scale], with a few larger outliers as real activations have.
inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  for (int64_t i = 0; i < n; i += 37) v[static_cast<size_t>(i)] *= 6.0f;
  return v;
}

}  // namespace loom::kernels::testing
