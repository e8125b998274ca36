#include "loom/base/sysinfo.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/clock.h"
#include "loom/base/thread_pool.h"

namespace loom::base {

MemoryInfo ReadMemoryInfo() {
  MemoryInfo info;
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemTotal:") info.total_bytes = value * 1024;
    if (key == "MemAvailable:") info.available_bytes = value * 1024;
  }
  // Without /proc (macOS, BSDs): sysconf where the OS has the names (_SC_AVPHYS_PAGES is a
  // glibc extension); zeros otherwise.
#ifdef _SC_PHYS_PAGES
  if (info.total_bytes == 0) {
    info.total_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
#ifdef _SC_AVPHYS_PAGES
    info.available_bytes = static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
#endif
  }
#endif
  return info;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");  // absent off Linux: "unknown"
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t b = colon + 1;
        while (b < line.size() && line[b] == ' ') ++b;
        return line.substr(b);
      }
    }
  }
  return "unknown";
}

namespace {

// Best of `repeats` passes of `pool` reading words [0, n) of `words`: eight independent
// accumulators per thread keep loads in flight (the compiler vectorizes them).
double ReadPasses(const uint64_t* words, int64_t n, ThreadPool& pool, int repeats) {
  std::vector<uint64_t> sinks(static_cast<size_t>(pool.size()) * 8, 0);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = NowSeconds();
    pool.Run([&](int t) {
      const int64_t per = (n / pool.size() + 7) / 8 * 8;
      const int64_t begin = std::min(n, t * per);
      const int64_t end = std::min(n, begin + per);
      uint64_t acc[8] = {};
      for (int64_t i = begin; i + 8 <= end; i += 8) {
        for (int k = 0; k < 8; ++k) acc[k] ^= words[i + k];
      }
      uint64_t x = 0;
      for (uint64_t a : acc) x ^= a;
      sinks[static_cast<size_t>(t) * 8] = x;  // one cache line per thread; keeps the loop alive
    });
    const double dt = NowSeconds() - t0;
    if (dt > 0) best = std::max(best, static_cast<double>(n / 8 * 64) / dt);
  }
  return best;
}

}  // namespace

double MeasureReadBandwidth(int threads, int64_t bytes, int repeats) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(uint64_t));
  auto buf = AlignedBuffer<uint64_t>::WithHugePages(n);  // zeroed: every page faulted in
  for (int64_t i = 0; i < n; i += 512) buf[i] = static_cast<uint64_t>(i);
  ThreadPool pool(threads);
  return ReadPasses(buf.data(), n, pool, repeats);
}

double MeasureReadBandwidth(std::span<const std::byte> region, int threads, int repeats) {
  // Whole 64-byte lines inside the region; word reads through an aligned pointer.
  const auto addr = reinterpret_cast<uintptr_t>(region.data());
  const uintptr_t begin = (addr + 63) / 64 * 64;
  const uintptr_t end = (addr + region.size()) / 64 * 64;
  if (end <= begin) return 0;
  ThreadPool pool(threads);
  return ReadPasses(reinterpret_cast<const uint64_t*>(begin),
                    static_cast<int64_t>((end - begin) / sizeof(uint64_t)), pool, repeats);
}

int64_t HugePageBytes(const void* p, int64_t bytes) {
  std::ifstream in("/proc/self/smaps");  // absent off Linux
  if (!in) return -1;
  const auto lo = reinterpret_cast<uintptr_t>(p);
  const uintptr_t hi = lo + static_cast<uintptr_t>(std::max<int64_t>(bytes, 0));
  int64_t total = 0;
  bool overlaps = false;
  uintptr_t map_lo = 0, map_hi = 0;
  std::string line;
  while (std::getline(in, line)) {
    uintptr_t a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &a, &b) == 2) {
      // A mapping's header line, "lo-hi perms offset dev inode [path]".
      map_lo = a;
      map_hi = b;
      overlaps = a < hi && lo < b;
      continue;
    }
    long long kb = 0;
    if (overlaps && std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &kb) == 1 && kb > 0) {
      // Huge pages of a mapping partly in the range count in proportion to the overlap.
      const uintptr_t o_lo = std::max(lo, map_lo), o_hi = std::min(hi, map_hi);
      const double share = static_cast<double>(o_hi - o_lo) / static_cast<double>(map_hi - map_lo);
      total += static_cast<int64_t>(static_cast<double>(kb) * 1024 * share);
    }
  }
  return total;
}

std::string SelfExecutable(const std::string& fallback) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);  // fails off Linux
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : fallback;
}

}  // namespace loom::base
