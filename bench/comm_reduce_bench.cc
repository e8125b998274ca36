// Element-wise sums of all-reduce (comm/reduce.h): GB/s of output for 2 and 4 sources.
#include <benchmark/benchmark.h>

#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/comm/reduce.h"

namespace {

using loom::comm::ElementType;

void BM_SumInto(benchmark::State& state, ElementType type) {
  const int64_t count = state.range(0);
  const int n = static_cast<int>(state.range(1));
  const int64_t bytes = count * loom::comm::ElementSize(type);
  std::vector<loom::base::AlignedBuffer<uint8_t>> in;
  std::vector<const void*> srcs;
  for (int k = 0; k < n; ++k) {
    in.emplace_back(bytes);
    srcs.push_back(in.back().data());
  }
  loom::base::AlignedBuffer<uint8_t> out(bytes);
  srcs[0] = out.data();  // in place, as all-reduce does
  for (auto _ : state) {
    loom::comm::SumInto(out.data(), srcs.data(), n, count, type);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes * n);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t count : {2048, 16384, 1 << 20, 1 << 24}) {
    for (int n : {2, 4}) b->Args({count, n});
  }
}

BENCHMARK_CAPTURE(BM_SumInto, f32, ElementType::kF32)->Apply(Args);
BENCHMARK_CAPTURE(BM_SumInto, f16, ElementType::kF16)->Apply(Args);
BENCHMARK_CAPTURE(BM_SumInto, bf16, ElementType::kBF16)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
