#include "loom/kernels/simd_target.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/simd_target.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
int64_t ActiveTargetImpl() { return HWY_TARGET; }
}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(ActiveTargetImpl);

std::vector<int64_t> AvailableSimdTargets() { return hwy::SupportedAndGeneratedTargets(); }

std::string_view SimdTargetName(int64_t target) { return hwy::TargetName(target); }

int64_t ActiveSimdTarget() { return HWY_DYNAMIC_DISPATCH(ActiveTargetImpl)(); }

void ForceSimdTargetForTest(int64_t target) { hwy::SetSupportedTargetsForTest(target); }

}  // namespace loom::kernels
#endif  // HWY_ONCE
