// Compiled once per Highway target (foreach_target re-includes this file).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/comm/reduce.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "loom/base/half.h"
#include "loom/comm/reduce.h"

HWY_BEFORE_NAMESPACE();
namespace loom::comm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Scalar tails use the same operations in the same order as the vector body.
void SumF32(void* dst_v, const void* const* srcs_v, int n, int64_t count) {
  float* dst = static_cast<float*>(dst_v);
  const float* const* srcs = reinterpret_cast<const float* const*>(srcs_v);
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    auto acc = hn::LoadU(d, srcs[0] + i);
    for (int k = 1; k < n; ++k) acc = hn::Add(acc, hn::LoadU(d, srcs[k] + i));
    hn::StoreU(acc, d, dst + i);
  }
  for (; i < count; ++i) {
    float acc = srcs[0][i];
    for (int k = 1; k < n; ++k) acc += srcs[k][i];
    dst[i] = acc;
  }
}

void SumF16(void* dst_v, const void* const* srcs_v, int n, int64_t count) {
  using hwy::float16_t;
  float16_t* dst = static_cast<float16_t*>(dst_v);
  const float16_t* const* srcs = reinterpret_cast<const float16_t* const*>(srcs_v);
  const hn::ScalableTag<float> df;
  const hn::Rebind<float16_t, decltype(df)> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    auto acc = hn::PromoteTo(df, hn::LoadU(dh, srcs[0] + i));
    for (int k = 1; k < n; ++k) acc = hn::Add(acc, hn::PromoteTo(df, hn::LoadU(dh, srcs[k] + i)));
    hn::StoreU(hn::DemoteTo(dh, acc), dh, dst + i);
  }
  const uint16_t* const* s16 = reinterpret_cast<const uint16_t* const*>(srcs_v);
  uint16_t* d16 = static_cast<uint16_t*>(dst_v);
  for (; i < count; ++i) {
    float acc = base::F16ToF32(s16[0][i]);
    for (int k = 1; k < n; ++k) acc += base::F16ToF32(s16[k][i]);
    d16[i] = base::F32ToF16(acc);
  }
}

void SumBf16(void* dst_v, const void* const* srcs_v, int n, int64_t count) {
  uint16_t* dst = static_cast<uint16_t*>(dst_v);
  const uint16_t* const* srcs = reinterpret_cast<const uint16_t* const*>(srcs_v);
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::RebindToSigned<decltype(df)> di32;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto load = [&](const uint16_t* p) {
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
  };
  const auto k7fff = hn::Set(du32, 0x7FFFu);
  const auto kOne = hn::Set(du32, 1u);
  const auto kQuiet = hn::Set(du32, 0x40u);
  int64_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    auto acc = load(srcs[0] + i);
    for (int k = 1; k < n; ++k) acc = hn::Add(acc, load(srcs[k] + i));
    // Round to nearest even on the bits, as base::F32ToBf16 does; NaN stays a (quiet) NaN.
    const auto u = hn::BitCast(du32, acc);
    const auto lsb = hn::And(hn::ShiftRight<16>(u), kOne);
    const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(u, k7fff), lsb));
    const auto nan = hn::Or(hn::ShiftRight<16>(u), kQuiet);
    const auto hi = hn::IfThenElse(hn::RebindMask(du32, hn::Ne(acc, acc)), nan, rounded);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, hi)), du16, dst + i);
  }
  for (; i < count; ++i) {
    float acc = base::Bf16ToF32(srcs[0][i]);
    for (int k = 1; k < n; ++k) acc += base::Bf16ToF32(srcs[k][i]);
    dst[i] = base::F32ToBf16(acc);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace loom::comm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::comm {

HWY_EXPORT(SumF32);
HWY_EXPORT(SumF16);
HWY_EXPORT(SumBf16);

void SumInto(void* dst, const void* const* srcs, int num_srcs, int64_t count, ElementType type) {
  if (count <= 0 || num_srcs <= 0) return;
  switch (type) {
    case ElementType::kF32:
      return HWY_DYNAMIC_DISPATCH(SumF32)(dst, srcs, num_srcs, count);
    case ElementType::kF16:
      return HWY_DYNAMIC_DISPATCH(SumF16)(dst, srcs, num_srcs, count);
    case ElementType::kBF16:
      return HWY_DYNAMIC_DISPATCH(SumBf16)(dst, srcs, num_srcs, count);
  }
}

void AddInto(void* dst, const void* src, int64_t count, ElementType type) {
  const void* srcs[2] = {dst, src};
  SumInto(dst, srcs, 2, count, type);
}

void SumIntoReference(void* dst, const void* const* srcs, int n, int64_t count, ElementType type) {
  for (int64_t i = 0; i < count; ++i) {
    switch (type) {
      case ElementType::kF32: {
        float acc = static_cast<const float*>(srcs[0])[i];
        for (int k = 1; k < n; ++k) acc += static_cast<const float*>(srcs[k])[i];
        static_cast<float*>(dst)[i] = acc;
        break;
      }
      case ElementType::kF16: {
        float acc = base::F16ToF32(static_cast<const uint16_t*>(srcs[0])[i]);
        for (int k = 1; k < n; ++k) acc += base::F16ToF32(static_cast<const uint16_t*>(srcs[k])[i]);
        static_cast<uint16_t*>(dst)[i] = base::F32ToF16(acc);
        break;
      }
      case ElementType::kBF16: {
        float acc = base::Bf16ToF32(static_cast<const uint16_t*>(srcs[0])[i]);
        for (int k = 1; k < n; ++k) {
          acc += base::Bf16ToF32(static_cast<const uint16_t*>(srcs[k])[i]);
        }
        static_cast<uint16_t*>(dst)[i] = base::F32ToBf16(acc);
        break;
      }
    }
  }
}

}  // namespace loom::comm
#endif  // HWY_ONCE
