// Facts about this machine that planners and benchmarks need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace loom::base {

struct MemoryInfo {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;  // MemAvailable: what can be used without swapping
};

// Reads /proc/meminfo (falls back to sysconf); zeros when unknown.
MemoryInfo ReadMemoryInfo();

// This program's own executable (Linux: /proc/self/exe), to start more of itself; `fallback` when
// the OS does not say.
std::string SelfExecutable(const std::string& fallback = "loom");

// The CPU model name, e.g. "AMD EPYC 9B45", or "unknown".
std::string CpuModelName();

// Measures the sustained memory read bandwidth in bytes/s with `threads` threads reading a buffer of
// `bytes` (larger than the last-level cache; backed by huge pages where the OS gives them, as a
// weight copy is), best of `repeats` passes.  Takes ~0.1-1 s.
double MeasureReadBandwidth(int threads, int64_t bytes = int64_t{1} << 30, int repeats = 5);

// The same over memory that already exists (a model's weight copy): how fast these very pages
// read, wherever the OS placed them.  Reads whole 64-byte lines; a region under 64 bytes gives 0.
double MeasureReadBandwidth(std::span<const std::byte> region, int threads, int repeats = 3);

// Bytes of [p, p + bytes) backed by transparent huge pages (Linux: AnonHugePages of the mappings
// in /proc/self/smaps that overlap the range, counted within it), or -1 where the OS does not say.
int64_t HugePageBytes(const void* p, int64_t bytes);

}  // namespace loom::base
