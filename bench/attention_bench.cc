// kernels::AttendMany on TinyLlama-1.1B's attention shape (head_dim 64, 8 query heads per kv
// head), one thread, one kv head of one layer, over a cache of `len` positions:
//   Attend/<f32|q8_0>/decode/len:L        8 queries (one token's group): cache GB/s read
//   Attend/<f32|q8_0>/prefill16/len:L     16 rows x 8 heads at positions L-16..L-1 (a prompt
//                                         tile): query-positions/s (GOP/s counts 4 * hd flops each)
// The rows are cycled over copies totalling >= 128 MiB so that decode streams them from memory.
//   attention_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/kernels/attention.h"

namespace loom::kernels {
namespace {

constexpr int64_t kHeadDim = 64, kGroup = 8, kKvDim = 4 * kHeadDim;

struct Cache {
  int64_t len, copies;
  base::AlignedBuffer<float> k, v;     // (copies, len, kKvDim)
  base::AlignedBuffer<int8_t> kq, vq;  // (copies, len, kKvDim)
  base::AlignedBuffer<float> kd, vd;   // (copies, len, kKvDim / 32)
  Cache(int64_t len_, KvType type) : len(len_) {
    const int64_t row_bytes = type == KvType::kF32 ? kHeadDim * 4 : kHeadDim + 8;
    copies = std::max<int64_t>(1, (int64_t{128} << 20) / (len * 4 * row_bytes));
    const int64_t n = copies * len * kKvDim;
    uint32_t state = 1;
    auto dist = [&state](std::mt19937&) {  // cheap uniform [-1, 1): setup time, not quality
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / static_cast<float>(1 << 23) - 1.0f;
    };
    std::mt19937 rng(1);
    std::vector<float> row(kKvDim);
    if (type == KvType::kF32) {
      k = base::AlignedBuffer<float>(n);
      v = base::AlignedBuffer<float>(n);
      for (int64_t i = 0; i < n; ++i) k[i] = dist(rng), v[i] = dist(rng);
    } else {
      kq = base::AlignedBuffer<int8_t>(n);
      vq = base::AlignedBuffer<int8_t>(n);
      kd = base::AlignedBuffer<float>(n / 32);
      vd = base::AlignedBuffer<float>(n / 32);
      for (int64_t p = 0; p < n / kKvDim; ++p) {
        for (float& x : row) x = dist(rng);
        QuantizeKvRow(row.data(), kKvDim, 32, kq.data() + p * kKvDim, kd.data() + p * kKvDim / 32);
        for (float& x : row) x = dist(rng);
        QuantizeKvRow(row.data(), kKvDim, 32, vq.data() + p * kKvDim, vd.data() + p * kKvDim / 32);
      }
    }
  }
  // Keys as the KV cache holds them: tiles of kAttendKeyBlock positions, transposed (the values
  // are random, so the same buffers serve; len is a multiple of the tile).
  KvHeadRows Rows(bool keys, KvType type, int64_t copy) const {
    KvHeadRows r;
    r.type = type;
    r.stride = kKvDim;
    r.d_stride = kKvDim / 32;
    r.block = 32;
    if (keys) {
      r.tiled = true;
      r.stride = kKvDim * kAttendKeyBlock;
      r.d_stride = kKvDim / 32 * kAttendKeyBlock;
    }
    const int64_t base = copy * len * kKvDim;
    if (type == KvType::kF32) {
      r.f32 = (keys ? k : v).data() + base;
    } else {
      r.q = (keys ? kq : vq).data() + base;
      r.d = (keys ? kd : vd).data() + base / 32;
    }
    return r;
  }
};

void BM_Attend(benchmark::State& state, KvType type, int64_t rows) {
  const int64_t len = state.range(0);
  const Cache cache(len, type);
  const int64_t nq = rows * kGroup;
  std::vector<float> q(static_cast<size_t>(nq * kHeadDim), 0.1f), out(q.size());
  std::vector<AttendQuery> queries(static_cast<size_t>(nq));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < kGroup; ++g) {
      const int64_t m = r * kGroup + g;
      queries[m] = {q.data() + m * kHeadDim, len - rows + 1 + r, out.data() + m * kHeadDim};
    }
  }
  std::vector<float> scratch(static_cast<size_t>(AttendScratchFloats(nq, kHeadDim)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  int64_t copy = 0;
  for (auto _ : state) {
    AttendMany(queries.data(), nq, cache.Rows(true, type, copy), cache.Rows(false, type, copy),
               kHeadDim, scale, scratch.data());
    benchmark::DoNotOptimize(out.data());
    copy = (copy + 1) % cache.copies;
  }
  const double it = static_cast<double>(state.iterations());
  const double row_bytes = type == KvType::kF32 ? 2.0 * kHeadDim * 4 : 2.0 * (kHeadDim + 8);
  state.counters["GB/s"] =
      benchmark::Counter(it * len * row_bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["GOP/s"] = benchmark::Counter(
      it * static_cast<double>(nq) * static_cast<double>(len) * 4 * kHeadDim / 1e9,
      benchmark::Counter::kIsRate);
}

void RegisterAll() {
  for (KvType type : {KvType::kF32, KvType::kQ8_0}) {
    const std::string t(KvTypeName(type));
    benchmark::RegisterBenchmark(("Attend/" + t + "/decode").c_str(), BM_Attend, type, 1)
        ->Arg(4096)
        ->Arg(16384)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("Attend/" + t + "/prefill16").c_str(), BM_Attend, type, 16)
        ->Arg(4096)
        ->Arg(16384)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

}  // namespace
}  // namespace loom::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  loom::kernels::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
