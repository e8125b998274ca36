#include "loom/cli/bench_memory.h"

#include "loom/base/sysinfo.h"

namespace loom::cli {

std::span<const std::byte> WeightRegion(const engine::LoadedModel& m) {
  if (m.weights_copied && !m.weights->owned_bytes.empty()) {
    const auto& copy = m.weights->owned_bytes.back();  // CopyMatricesToMemory's one buffer
    return {copy.data(), static_cast<size_t>(copy.size())};
  }
  std::span<const std::byte> largest;
  for (const auto& mapping : m.file->mappings) {
    if (mapping.bytes().size() > largest.size()) largest = mapping.bytes();
  }
  return largest;
}

double MeasureWeightPagesBandwidth(const engine::LoadedModel& m, int threads) {
  return base::MeasureReadBandwidth(WeightRegion(m), threads, 2);
}

double WeightHugePageFraction(const engine::LoadedModel& m) {
  const std::span<const std::byte> region = WeightRegion(m);
  const int64_t size = static_cast<int64_t>(region.size());
  const int64_t huge = base::HugePageBytes(region.data(), size);
  return huge < 0 || size == 0 ? -1 : static_cast<double>(huge) / static_cast<double>(size);
}

}  // namespace loom::cli
