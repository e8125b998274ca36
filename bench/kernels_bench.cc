// Matrix-product benchmarks on the TinyLlama-1.1B shapes (dim 2048, ffn 5632, 4 KV heads of 64,
// vocab 32000) for every weight type, 1 and 2 threads:
//   MatVec/<type>/<rows>x<cols>/threads:T   n = 1 (decode): weight GB/s and its ratio to the read
//                                           bandwidth measured (base::MeasureReadBandwidth) just
//                                           before, with the same thread count
//   MatMul/<type>/<rows>x<cols>/n:N/threads:T  batched (prefill): GOP/s (2 * rows * cols * n)
// With threads:1 the *_cpu counters divide by the thread's CPU time instead of wall time: on a
// machine shared with other work they show what the kernel does while it has a core.
//   Model/<type>/decode|prefill:N/threads:T  one whole 1.1B forward pass worth of products
//                                           (22 layers of q/k/v, o, gate/up, down + the output
//                                           head): tokens/s, the ceiling the kernels allow
// Weights are cycled over copies totalling >= 256 MiB so that they stream from memory, as in a
// real forward pass, instead of sitting in the 32 MiB L3.  LOOM_BENCH_IN_CACHE=1 uses one copy
// instead (MatVec then shows the kernel's compute ceiling: Q4_0 2048x2048 reads 60 GB/s on one
// Zen 5 core, twice what one core streams from memory).
//
//   kernels_bench --benchmark_filter=MatVec/q4_0 --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
// LOOM_SIMD_TARGET=AVX2 (SSE4, AVX3, SCALAR) measures another compiled code path.
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/sysinfo.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/quantize.h"
#include "loom/kernels/simd_target.h"

namespace loom::kernels {
namespace {

constexpr int64_t kStreamBytes = int64_t{256} << 20;

// MLX matrices use groups of kMlxGroup values with bf16 scales and biases (mlx-lm's default).
constexpr int64_t kMlxGroup = 64;

// `copies` matrices of rows x cols in `type`, made of 64 random rows repeated, in the layout the
// engine's weight copy gives them on this CPU (PreferredLayout).
class Weights {
 public:
  Weights(DType type, int64_t rows, int64_t cols, int64_t copies)
      : type_(type), rows_(rows), cols_(cols) {
    row_bytes_ = RowBytes(type, cols).value();
    const int64_t matrix_bytes = rows * row_bytes_;
    copies_ = copies;
    storage_ = base::AlignedBuffer<std::byte>(matrix_bytes * copies_);
    if (IsMlx(type)) {
      scale_row_bytes_ = cols / kMlxGroup * Traits(DType::kBF16).block_bytes;
      scales_ = base::AlignedBuffer<std::byte>(rows * scale_row_bytes_ * copies_);
      biases_ = base::AlignedBuffer<std::byte>(rows * scale_row_bytes_ * copies_);
    }
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<std::byte> pattern(static_cast<size_t>(64 * row_bytes_));
    std::vector<std::byte> s_pattern(static_cast<size_t>(64 * scale_row_bytes_));
    std::vector<std::byte> b_pattern(s_pattern.size());
    layout_ = PreferredLayout(type, cols);
    for (int64_t r = 0; r < 64; ++r) {
      for (float& v : row) v = dist(rng);
      if (IsMlx(type)) {
        QuantizeMlxRow(type, kMlxGroup, DType::kBF16, row.data(), cols,
                       pattern.data() + r * row_bytes_, s_pattern.data() + r * scale_row_bytes_,
                       b_pattern.data() + r * scale_row_bytes_);
      } else {
        QuantizeRow(type, row.data(), cols, pattern.data() + r * row_bytes_);
        std::byte* out = pattern.data() + r * row_bytes_;
        CopyRowsToLayout(type, cols, 1, WeightLayout::kFile, out, row_bytes_, layout_, out,
                         row_bytes_);
      }
    }
    for (int64_t r = 0; r < rows * copies_; ++r) {
      std::memcpy(storage_.data() + r * row_bytes_, pattern.data() + r % 64 * row_bytes_,
                  static_cast<size_t>(row_bytes_));
      if (IsMlx(type)) {
        std::memcpy(scales_.data() + r * scale_row_bytes_,
                    s_pattern.data() + r % 64 * scale_row_bytes_,
                    static_cast<size_t>(scale_row_bytes_));
        std::memcpy(biases_.data() + r * scale_row_bytes_,
                    b_pattern.data() + r % 64 * scale_row_bytes_,
                    static_cast<size_t>(scale_row_bytes_));
      }
    }
  }
  // Copies so that one pass over all of them streams >= kStreamBytes.
  static int64_t CopiesFor(DType type, int64_t rows, int64_t cols) {
    const int64_t bytes = rows * RowBytes(type, cols).value();
    if (std::getenv("LOOM_BENCH_IN_CACHE") != nullptr) return 1;
    return std::max<int64_t>(1, (kStreamBytes + bytes - 1) / bytes);
  }
  MatrixView View(int64_t copy) const {
    MatrixView v{type_, rows_, cols_, storage_.data() + copy % copies_ * rows_ * row_bytes_,
                 row_bytes_};
    v.layout = layout_;
    if (IsMlx(type_)) {
      v.scales = scales_.data() + copy % copies_ * rows_ * scale_row_bytes_;
      v.biases = biases_.data() + copy % copies_ * rows_ * scale_row_bytes_;
      v.scale_row_stride = scale_row_bytes_;
      v.scale_type = DType::kBF16;
      v.group_size = kMlxGroup;
    }
    return v;
  }
  int64_t copies() const { return copies_; }
  int64_t matrix_bytes() const { return rows_ * row_bytes_; }

 private:
  DType type_;
  WeightLayout layout_ = WeightLayout::kFile;
  int64_t rows_, cols_, row_bytes_ = 0, copies_ = 1, scale_row_bytes_ = 0;
  base::AlignedBuffer<std::byte> storage_, scales_, biases_;
};

std::vector<float> RandomActivations(int64_t count) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(count));
  for (float& v : x) v = dist(rng);
  return x;
}

// Seconds of CPU time used by the calling thread (excludes time spent waiting for a core).
double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// A view of the attention output or the down projection as the model binds it: split into the
// column leaves that keep its sums the same bits under tensor parallelism (matmul.h, KLeaves).
MatrixView LeafView(MatrixView v) {
  v.k_leaves = KLeaves(v, v.cols);
  return v;
}

// leaves: the matrix in its column leaves, as the model runs the attention output and down
// projections (short rows per call).
void BM_MatVec(benchmark::State& state, DType type, int64_t rows, int64_t cols, int threads,
               bool leaves) {
  const Weights w(type, rows, cols, Weights::CopiesFor(type, rows, cols));
  const std::vector<float> x = RandomActivations(cols);
  std::vector<float> y(static_cast<size_t>(rows));
  Workspace ws;
  base::ThreadPool pool(threads);
  const double bandwidth = base::MeasureReadBandwidth(threads, int64_t{1} << 29, 3);
  int64_t i = 0;
  const double cpu0 = ThreadCpuSeconds();
  for (auto _ : state) {
    const MatrixView v = w.View(i++);
    MatMul(leaves ? LeafView(v) : v, x.data(), 1, y.data(), ws, pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double cpu = ThreadCpuSeconds() - cpu0;
  const double bytes =
      static_cast<double>(w.matrix_bytes()) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["bw_GB/s"] = bandwidth / 1e9;
  // bytes / bandwidth / time = (kernel GB/s) / (read GB/s).
  state.counters["bw_ratio"] = benchmark::Counter(bytes / bandwidth, benchmark::Counter::kIsRate);
  // With one thread: GB/s over the thread's CPU time, which stays meaningful on a machine shared
  // with other work (wall time then includes waiting for a core).
  if (threads == 1 && cpu > 0) state.counters["GB/s_cpu"] = bytes / cpu / 1e9;
}

void BM_MatMul(benchmark::State& state, DType type, int64_t rows, int64_t cols, int64_t n,
               int threads) {
  const Weights w(type, rows, cols, std::min<int64_t>(4, Weights::CopiesFor(type, rows, cols)));
  const std::vector<float> x = RandomActivations(n * cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  Workspace ws;
  base::ThreadPool pool(threads);
  int64_t i = 0;
  const double cpu0 = ThreadCpuSeconds();
  for (auto _ : state) {
    MatMul(w.View(i++), x.data(), n, y.data(), ws, pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double cpu = ThreadCpuSeconds() - cpu0;
  const double ops =
      2.0 * static_cast<double>(rows * cols * n) * static_cast<double>(state.iterations());
  state.counters["GOP/s"] = benchmark::Counter(ops / 1e9, benchmark::Counter::kIsRate);
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n * state.iterations()), benchmark::Counter::kIsRate);
  if (threads == 1 && cpu > 0) state.counters["GOP/s_cpu"] = ops / cpu / 1e9;
}

// One TinyLlama-1.1B forward pass worth of matrix products for n tokens, the attention output and
// down projections in their leaves as the model runs them.
void BM_Model(benchmark::State& state, DType type, int64_t n, int threads) {
  constexpr int64_t kLayers = 22, kDim = 2048, kKv = 256, kFfn = 5632, kVocab = 32000;
  struct Layer {
    std::unique_ptr<Weights> q, k, v, o, gate, up, down;
  };
  std::vector<Layer> layers(kLayers);
  for (Layer& l : layers) {
    l.q = std::make_unique<Weights>(type, kDim, kDim, 1);
    l.k = std::make_unique<Weights>(type, kKv, kDim, 1);
    l.v = std::make_unique<Weights>(type, kKv, kDim, 1);
    l.o = std::make_unique<Weights>(type, kDim, kDim, 1);
    l.gate = std::make_unique<Weights>(type, kFfn, kDim, 1);
    l.up = std::make_unique<Weights>(type, kFfn, kDim, 1);
    l.down = std::make_unique<Weights>(type, kDim, kFfn, 1);
  }
  const Weights head(type, kVocab, kDim, 1);
  const std::vector<float> x = RandomActivations(n * kFfn);
  std::vector<float> y1(static_cast<size_t>(n * kFfn)), y2(static_cast<size_t>(n * kFfn)),
      y3(static_cast<size_t>(n * kDim)), logits(static_cast<size_t>(kVocab));
  Workspace ws;
  base::ThreadPool pool(threads);
  for (auto _ : state) {
    for (const Layer& l : layers) {
      const MatrixView qkv[3] = {l.q->View(0), l.k->View(0), l.v->View(0)};
      float* const qkv_out[3] = {y1.data(), y2.data(), y3.data()};
      MatMulMulti(qkv, x.data(), n, qkv_out, ws, pool);
      MatMul(LeafView(l.o->View(0)), x.data(), n, y3.data(), ws, pool);
      const MatrixView gate_up[2] = {l.gate->View(0), l.up->View(0)};
      float* const gate_up_out[2] = {y1.data(), y2.data()};
      MatMulMulti(gate_up, x.data(), n, gate_up_out, ws, pool);
      MatMul(LeafView(l.down->View(0)), x.data(), n, y3.data(), ws, pool);
    }
    MatMul(head.View(0), x.data() + (n - 1) * kDim, 1, logits.data(), ws, pool);  // last token
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n * state.iterations()), benchmark::Counter::kIsRate);
}

struct Shape {
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
constexpr DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                            DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                            DType::kMlx3, DType::kMlx4, DType::kMlx6, DType::kMlx8};

// "q4_k", "mlx4_g64", ...
std::string TypeName(DType type) {
  std::string name(Traits(type).name);
  if (IsMlx(type)) name += "_g" + std::to_string(kMlxGroup);
  return name;
}

void RegisterAll() {
  for (DType type : kTypes) {
    const std::string t = TypeName(type);
    for (int threads : {1, 2}) {
      for (const Shape& s : kShapes) {
        const std::string shape = std::to_string(s.rows) + "x" + std::to_string(s.cols);
        benchmark::RegisterBenchmark(
            ("MatVec/" + t + "/" + shape + "/threads:" + std::to_string(threads)).c_str(),
            BM_MatVec, type, s.rows, s.cols, threads, false)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        if (s.rows != 2048) continue;  // the attention output and down projections, in leaves
        benchmark::RegisterBenchmark(
            ("MatVec/" + t + "/" + shape + "/leaves/threads:" + std::to_string(threads)).c_str(),
            BM_MatVec, type, s.rows, s.cols, threads, true)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
      for (const Shape& s : kShapes) {
        if (s.rows == 32000) continue;  // the output head runs for the last token only
        const int64_t n = 128;
        const std::string shape = std::to_string(s.rows) + "x" + std::to_string(s.cols);
        benchmark::RegisterBenchmark(("MatMul/" + t + "/" + shape + "/n:" + std::to_string(n) +
                                      "/threads:" + std::to_string(threads))
                                         .c_str(),
                                     BM_MatMul, type, s.rows, s.cols, n, threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
  for (DType type :
       {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kMlx4, DType::kMlx8}) {
    const std::string t = TypeName(type);
    for (int threads : {1, 2}) {
      benchmark::RegisterBenchmark(
          ("Model/" + t + "/decode/threads:" + std::to_string(threads)).c_str(), BM_Model, type, 1,
          threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(
          ("Model/" + t + "/prefill:128/threads:" + std::to_string(threads)).c_str(), BM_Model,
          type, 128, threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->Iterations(2);
    }
  }
}

}  // namespace
}  // namespace loom::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // LOOM_SIMD_TARGET=AVX2 (or SSE4, AVX3, ...) measures a code path other than the best one.
  if (const char* want = std::getenv("LOOM_SIMD_TARGET"); want != nullptr && *want != '\0') {
    bool found = false;
    for (int64_t t : loom::kernels::AvailableSimdTargets()) {
      if (loom::kernels::SimdTargetName(t) == want) {
        loom::kernels::ForceSimdTargetForTest(t);
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "kernels_bench: SIMD target '%s' is not available here\n", want);
      return 1;
    }
  }
  benchmark::AddCustomContext(
      "simd_target", std::string(loom::kernels::SimdTargetName(loom::kernels::ActiveSimdTarget())));
  benchmark::AddCustomContext("cpu", loom::base::CpuModelName());
  loom::kernels::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
