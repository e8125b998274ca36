#include "loom/base/sysinfo.h"

#include <unistd.h>

#include <algorithm>
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

double MeasureReadBandwidth(int threads, int64_t bytes, int repeats) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(uint64_t));
  AlignedBuffer<uint64_t> buf(n);
  for (int64_t i = 0; i < n; i += 512) buf[i] = static_cast<uint64_t>(i);  // fault pages in
  ThreadPool pool(threads);
  std::vector<uint64_t> sinks(static_cast<size_t>(pool.size()) * 8, 0);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = NowSeconds();
    pool.Run([&](int t) {
      const int64_t per = (n / pool.size() + 7) / 8 * 8;
      const int64_t begin = t * per;
      const int64_t end = std::min(n, begin + per);
      // Eight independent accumulators let the compiler vectorize and keep loads in flight.
      uint64_t acc[8] = {};
      for (int64_t i = begin; i + 8 <= end; i += 8) {
        for (int k = 0; k < 8; ++k) acc[k] ^= buf[i + k];
      }
      uint64_t x = 0;
      for (uint64_t a : acc) x ^= a;
      sinks[static_cast<size_t>(t) * 8] = x;  // one cache line per thread; keeps the loop alive
    });
    const double dt = NowSeconds() - t0;
    if (dt > 0) best = std::max(best, static_cast<double>(n * 8) / dt);
  }
  return best;
}

std::string SelfExecutable(const std::string& fallback) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);  // fails off Linux
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : fallback;
}

}  // namespace loom::base
