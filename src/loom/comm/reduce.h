// Element-wise sums for all-reduce, vectorized with Highway (dispatched once per call to the best
// target of this CPU), with scalar references for tests.  The summation order is fixed (sources in
// the order given), so every rank that sums the same inputs gets bitwise identical results.
#pragma once

#include <cstdint>

#include "loom/comm/group.h"

namespace loom::comm {

// dst: (count) elements; srcs: (num_srcs) pointers to (count) elements each, summed in order
// ((srcs[0] + srcs[1]) + srcs[2]) ...  A source may be dst itself (exactly, not partially
// overlapping).  f16 and bf16 accumulate in f32 and round to nearest even once.
// num_srcs is 1..kMaxSumSources.
inline constexpr int kMaxSumSources = 64;
void SumInto(void* dst, const void* const* srcs, int num_srcs, int64_t count, ElementType type);

// dst[i] = dst[i] + src[i] (one rounding per element for f16/bf16).
void AddInto(void* dst, const void* src, int64_t count, ElementType type);

// Scalar references (same results as the vector code, bit for bit, except NaN payloads).
void SumIntoReference(void* dst, const void* const* srcs, int num_srcs, int64_t count,
                      ElementType type);

}  // namespace loom::comm
