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

MemoryState MeasureMemoryState(const engine::LoadedModel& m, int threads) {
  MemoryState s;
  s.probe_bytes_per_s = base::MeasureReadBandwidth(threads, int64_t{512} << 20, 3);
  const std::span<const std::byte> region = WeightRegion(m);
  s.weight_bytes = static_cast<int64_t>(region.size());
  s.weights_bytes_per_s = base::MeasureReadBandwidth(region, threads, 2);
  s.huge_page_bytes = base::HugePageBytes(region.data(), s.weight_bytes);
  return s;
}

}  // namespace loom::cli
