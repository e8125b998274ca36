// Which SIMD code path the kernels run (Highway dynamic dispatch picks the best one for this CPU
// once), and a hook for tests and benchmarks to run every compiled path.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace loom::kernels {

// Highway target bits of the SIMD paths compiled into the kernels that this CPU supports, best
// first (e.g. AVX3_DL, AVX3, AVX2, SSE4, SCALAR on a recent x86 server).
std::vector<int64_t> AvailableSimdTargets();

// "AVX3_DL", "AVX2", ... for a target bit.
std::string_view SimdTargetName(int64_t target);

// The target the kernels dispatch to now.
int64_t ActiveSimdTarget();

// Tests and benchmarks only: makes every kernel dispatch to `target` (one of
// AvailableSimdTargets()); 0 restores the automatic choice.  Process-wide state inside Highway:
// call it only while no kernel is running.
void ForceSimdTargetForTest(int64_t target);

}  // namespace loom::kernels
