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

WeightPages MeasureWeightPages(const engine::LoadedModel& m, int threads) {
  WeightPages w;
  const std::span<const std::byte> region = WeightRegion(m);
  w.bytes = static_cast<int64_t>(region.size());
  w.bytes_per_s = base::MeasureReadBandwidth(region, threads, 2);
  w.huge_page_bytes = base::HugePageBytes(region.data(), w.bytes);
  return w;
}

}  // namespace loom::cli
