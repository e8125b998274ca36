// The x86 register tiles of the K-quant and MLX products (matmul_kquant_tile-inl.h on AVX3_DL,
// matmul_kquant_tile_avx2-inl.h on AVX2 and AVX3) must give the same bits on every x86 machine,
// whatever its vector width, so that a pod mixing AVX2 and AVX-512 hosts generates the same
// tokens.  Checked here against a scalar model of their lane arithmetic (so one target suffices),
// against each other where a CPU runs several, with quants at the ends of their range (where
// 16-bit products would saturate), and with weights that end at an unmapped page (nothing past a
// row may be read: weights are memory-mapped files).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/matmul_test_util.h"
#include "loom/kernels/simd_target.h"

namespace loom::kernels {
namespace {

using testing::AllMlxCases;
using testing::ExpectMatchesReference;
using testing::ForEachSimdTarget;
using testing::MlxCase;
using testing::MlxCaseName;
using testing::RandomVector;
using testing::TestMatrix;

// The SIMD targets here that run the tiles.
std::vector<int64_t> TileTargets() {
  std::vector<int64_t> out;
  for (int64_t t : AvailableSimdTargets()) {
    const std::string_view name = SimdTargetName(t);
    if (name == "AVX2" || name == "AVX3" || name == "AVX3_DL") out.push_back(t);
  }
  return out;
}

// Unsigned quant l of 32-value block b of a K-quant or MLX row, and the factors of its halves:
// value = a[p] * q + c for values 16p..16p+15 (the tiles' factor lanes, computed as they do).
struct BlockModel {
  int32_t q[32];
  float a[2];
  float c;
};

BlockModel ModelBlock(const MatrixView& w, int64_t r, int64_t b) {
  using namespace internal;  // NOLINT: the layout constants
  BlockModel m{};
  const std::byte* row = w.data + r * w.row_stride;
  const auto byte = [](const std::byte* p, int64_t i) { return static_cast<int32_t>(p[i]); };
  if (IsMlx(w.type)) {
    const int64_t g = b * 32 / w.group_size;
    const int64_t scale_bytes = Traits(w.scale_type).block_bytes;
    const bool exists = b < w.cols / 32;  // the tiles' zero lanes past a partial chunk
    const bool group_exists = g < w.cols / w.group_size;
    const std::byte* s = w.scales + r * w.scale_row_stride + g * scale_bytes;
    const std::byte* z = w.biases + r * w.scale_row_stride + g * scale_bytes;
    m.a[0] = m.a[1] = group_exists ? LoadScalar(w.scale_type, s) : 0.0f;
    m.c = group_exists ? LoadScalar(w.scale_type, z) : 0.0f;
    for (int l = 0; l < 32; ++l) {
      m.q[l] = exists ? static_cast<int32_t>(MlxUnpack(row, MlxBitsOf(w.type), 32 * b + l)) : 0;
    }
    return m;
  }
  const int j = static_cast<int>(b % 8);  // sub-block of the super-block
  if (w.type == DType::kQ6_K) {
    const std::byte* blk = row + b / 8 * kQ6KBlockBytes;
    const float d = LoadF16(blk + kQ6KD);
    for (int p = 0; p < 2; ++p) {
      m.a[p] = static_cast<float>(static_cast<int8_t>(blk[kQ6KScales + 2 * j + p])) * d;
    }
    const int n = j / 4;
    for (int l = 0; l < 32; ++l) {
      const int v = (32 * j + l) % 128;
      const std::byte* ql = blk + 64 * n;
      const int32_t low = v < 64 ? byte(ql, v) & 0x0F : byte(ql, v - 64) >> 4;
      const int32_t high = (byte(blk + kQ6KQh + 32 * n, v % 32) >> (2 * (v / 32))) & 3;
      m.q[l] = (low | high << 4) - 32;
    }
    return m;
  }
  const int64_t block_bytes = w.type == DType::kQ4_K ? kQ4KBlockBytes : kQ5KBlockBytes;
  const std::byte* blk = row + b / 8 * block_bytes;
  int sc, mn;
  KScaleMin(j, blk + kQ4KScales, &sc, &mn);
  m.a[0] = m.a[1] = static_cast<float>(sc) * LoadF16(blk);
  m.c = static_cast<float>(mn) * -LoadF16(blk + 2);
  const std::byte* qs = blk + (w.type == DType::kQ4_K ? kQ4KQs : kQ5KQs) + 32 * (j / 2);
  for (int l = 0; l < 32; ++l) {
    m.q[l] = j % 2 == 0 ? byte(qs, l) & 0x0F : byte(qs, l) >> 4;
    if (w.type == DType::kQ5_K) m.q[l] |= ((byte(blk + kQ5KQh, l) >> j) & 1) << 4;
  }
  return m;
}

// Row r of w times the kact row at x_row, as the tiles compute it: each block's exact integer dot
// (Q6_K: each half-block's), converted to f32 and fused-multiply-added with (weight factor *
// activation scale) into the f32 lane of its position s in the 4-block step, then the min or bias
// term times the block's activation sum; at the end (s0 + s2) + (s1 + s3).
float ModelRow(const MatrixView& w, int64_t r, const std::byte* x_row) {
  const std::byte* tiles = x_row + internal::KActTileOffset(w.cols);
  const int64_t steps = (w.cols / 32 + 3) / 4;
  float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t t = 0; t < steps; ++t) {
    const std::byte* g = tiles + t * internal::kKTileGroupBytes;
    for (int s = 0; s < 4; ++s) {
      const BlockModel m = ModelBlock(w, r, 4 * t + s);
      const auto* x_lo = reinterpret_cast<const int8_t*>(g + internal::kKTileLo) + 16 * s;
      const auto* x_hi = reinterpret_cast<const int8_t*>(g + internal::kKTileHi) + 16 * s;
      float dx, sum;
      std::memcpy(&dx, g + internal::kKTileScale + 16 * s, sizeof(dx));
      std::memcpy(&sum, g + internal::kKTileSum + 16 * s, sizeof(sum));
      int32_t dot[2] = {0, 0};
      for (int l = 0; l < 16; ++l) {
        dot[0] += m.q[l] * x_lo[l];
        dot[1] += m.q[16 + l] * x_hi[l];
      }
      if (w.type == DType::kQ6_K) {
        for (int p = 0; p < 2; ++p) {
          lane[s] = std::fma(static_cast<float>(dot[p]), m.a[p] * dx, lane[s]);
        }
      } else {
        lane[s] = std::fma(static_cast<float>(dot[0] + dot[1]), m.a[0] * dx, lane[s]);
        lane[s] = std::fma(m.c, sum, lane[s]);
      }
    }
  }
  return (lane[0] + lane[2]) + (lane[1] + lane[3]);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Every tile target's product of w with x(n, w.cols) equals the model bit for bit.
void ExpectTilesMatchModel(const MatrixView& w, const std::vector<float>& x, int64_t n) {
  const int64_t x_stride = internal::KActRowBytes(w.cols);
  base::AlignedBuffer<std::byte> xa(n * x_stride);
  internal::QuantizeKActRowsScalar(x.data(), n, w.cols, xa.data());
  std::vector<float> want(static_cast<size_t>(n * w.rows));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < w.rows; ++r) {
      want[static_cast<size_t>(i * w.rows + r)] = ModelRow(w, r, xa.data() + i * x_stride);
    }
  }
  base::ThreadPool pool(2, /*spin_microseconds=*/0);
  for (int64_t target : TileTargets()) {
    ForceSimdTargetForTest(target);
    Workspace ws;
    std::vector<float> y(static_cast<size_t>(n * w.rows), NAN);
    MatMul(w, x.data(), n, y.data(), ws, pool);
    for (size_t k = 0; k < y.size(); ++k) {
      ASSERT_EQ(Bits(y[k]), Bits(want[k]))
          << SimdTargetName(target) << " " << Traits(w.type).name << " cols " << w.cols << ", row "
          << k % static_cast<size_t>(w.rows) << ", act row " << k / static_cast<size_t>(w.rows)
          << ": " << y[k] << ", model " << want[k];
    }
  }
  ForceSimdTargetForTest(0);
}

// Weights whose bytes are all 0xFF hold the largest quants (K-quants: 15, 31, 63 with 6-bit
// scales and mins of 63; MLX: 2^bits - 1, 255 at 8 bits), with unit scales: the int16 pair sums
// of 255 * 127 would saturate, and those of 4 * 63 * 127 come within 2.5% of doing so.
struct ExtremeMatrix {
  ExtremeMatrix(DType type, int64_t rows, int64_t cols, int64_t group = 64) {
    const int64_t row_bytes = RowBytes(type, cols).value();
    bytes.assign(static_cast<size_t>(rows * row_bytes), std::byte{0xFF});
    view = MatrixView{type, rows, cols, bytes.data(), row_bytes};
    const auto set_f16 = [](std::byte* p, uint16_t v) { std::memcpy(p, &v, sizeof(v)); };
    constexpr uint16_t kF16One = 0x3C00, kBf16One = 0x3F80;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols / internal::kQK && !IsMlx(type); ++k) {
        std::byte* blk = bytes.data() + r * row_bytes + k * Traits(type).block_bytes;
        if (type == DType::kQ6_K) {
          set_f16(blk + internal::kQ6KD, kF16One);  // scales of int8 -1
        } else {
          set_f16(blk, kF16One);      // d
          set_f16(blk + 2, kF16One);  // dmin
        }
      }
    }
    if (IsMlx(type)) {
      const int64_t groups = rows * cols / group;
      scales.resize(static_cast<size_t>(2 * groups));
      biases.assign(scales.size(), std::byte{0});
      for (int64_t g = 0; g < groups; ++g) set_f16(scales.data() + 2 * g, kBf16One);
      view.scales = scales.data();
      view.biases = biases.data();
      view.scale_row_stride = cols / group * 2;
      view.scale_type = DType::kBF16;
      view.group_size = group;
    }
  }
  std::vector<std::byte> bytes, scales, biases;
  MatrixView view;
};

// Activations that quantize to +127 everywhere, -127 everywhere, or alternating.
std::vector<float> ExtremeActivations(int64_t n, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = i % 3 == 0 ? 1.0f : i % 3 == 1 ? -1.0f : (c % 2 == 0 ? 1.0f : -1.0f);
      x[static_cast<size_t>(i * cols + c)] = v;
    }
  }
  return x;
}

// w times n rows of ExtremeActivations: near the reference on every target, the model's bits on the
// tile targets.
void ExpectExtremesRight(const MatrixView& w, int64_t n) {
  const std::vector<float> all = ExtremeActivations(n, w.cols);
  const auto expect = [&](const std::vector<float>& x, int64_t rows) {
    ForEachSimdTarget([&] {
      Workspace ws;
      base::ThreadPool pool(1, /*spin_microseconds=*/0);
      std::vector<float> y(static_cast<size_t>(rows * w.rows), NAN);
      MatMul(w, x.data(), rows, y.data(), ws, pool);
      ExpectMatchesReference(w, x.data(), rows, y.data());
    });
    if (!TileTargets().empty()) ExpectTilesMatchModel(w, x, rows);
  };
  expect(all, n);
  // Each row alone too: decode (one activation row) has its own int16 sums on AVX2
  // (matmul_kquant_decode_avx2-inl.h).
  for (int64_t i = 0; i < n; ++i) {
    expect(std::vector<float>(all.begin() + i * w.cols, all.begin() + (i + 1) * w.cols), 1);
  }
}

class KTileLanesTest : public ::testing::TestWithParam<DType> {};

TEST_P(KTileLanesTest, TilesComputeTheModelsBits) {
  if (TileTargets().empty()) GTEST_SKIP() << "no x86 tile target on this CPU";
  for (int64_t cols : {256, 768, 2304, 16640}) {  // 16640: 130 steps
    for (int64_t rows : {1, 6}) {
      const TestMatrix m(GetParam(), rows, cols, static_cast<uint32_t>(rows + cols));
      for (int64_t n : {1, 6}) {
        ExpectTilesMatchModel(m.view, RandomVector(n * cols, static_cast<uint32_t>(n * cols)), n);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(KTileLanesTest, ExtremeQuantsDoNotSaturate) {
  const int64_t cols = 512, n = 3;
  const ExtremeMatrix m(GetParam(), 5, cols);
  ExpectExtremesRight(m.view, n);
}

INSTANTIATE_TEST_SUITE_P(KQuants, KTileLanesTest,
                         ::testing::Values(DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(Traits(info.param).name);
                         });

class MlxTileLanesTest : public ::testing::TestWithParam<MlxCase> {};

TEST_P(MlxTileLanesTest, TilesComputeTheModelsBits) {
  if (TileTargets().empty()) GTEST_SKIP() << "no x86 tile target on this CPU";
  const MlxCase c = GetParam();
  for (int64_t cols : {32, 96, 128, 224, 384, 1152, 4224}) {  // 4224: 33 groups of 128
    if (cols % c.group != 0) continue;
    const TestMatrix m(c.type, 5, cols, static_cast<uint32_t>(cols), c.group, c.scale_type);
    for (int64_t n : {1, 6}) {
      ExpectTilesMatchModel(m.view, RandomVector(n * cols, static_cast<uint32_t>(n + cols)), n);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mlx, MlxTileLanesTest, ::testing::ValuesIn(AllMlxCases()), MlxCaseName);

TEST(MlxTileExtremesTest, ExtremeQuantsDoNotSaturate) {
  for (DType type :
       {DType::kMlx2, DType::kMlx3, DType::kMlx4, DType::kMlx5, DType::kMlx6, DType::kMlx8}) {
    for (int64_t cols : {128, 224}) {  // whole chunks; a partial last one
      const int64_t n = 3;
      const ExtremeMatrix m(type, 5, cols, 32);
      ExpectExtremesRight(m.view, n);
      if (HasFatalFailure()) return;
    }
  }
}

// The tile targets of this CPU against each other: the model above pins them down one by one, this
// compares them directly (it needs an AVX-512 CPU, which runs AVX2, AVX3 and AVX3_DL).
TEST(KTileTargetsTest, TargetsGiveTheSameBits) {
  const std::vector<int64_t> targets = TileTargets();
  if (targets.size() < 2) {
    GTEST_SKIP() << "needs two of AVX2, AVX3, AVX3_DL; this CPU runs "
                 << (targets.empty() ? std::string("none")
                                     : std::string(SimdTargetName(targets[0])))
                 << " only (ExpectTilesMatchModel checks each target alone)";
  }
  std::vector<TestMatrix> matrices;
  matrices.reserve(3 + AllMlxCases().size());  // views point into the matrices' own bytes
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    matrices.emplace_back(type, 7, 768, 5);
  }
  for (const MlxCase& c : AllMlxCases())
    matrices.emplace_back(c.type, 5, 384, 6, c.group, c.scale_type);
  base::ThreadPool pool(2, /*spin_microseconds=*/0);
  for (const TestMatrix& m : matrices) {
    for (int64_t n : {1, 9}) {
      const std::vector<float> x = RandomVector(n * m.view.cols, static_cast<uint32_t>(n));
      std::vector<std::vector<float>> y;
      for (int64_t target : targets) {
        ForceSimdTargetForTest(target);
        Workspace ws;
        y.emplace_back(static_cast<size_t>(n * m.view.rows), NAN);
        MatMul(m.view, x.data(), n, y.back().data(), ws, pool);
      }
      ForceSimdTargetForTest(0);
      for (size_t t = 1; t < targets.size(); ++t) {
        for (size_t k = 0; k < y[0].size(); ++k) {
          ASSERT_EQ(Bits(y[t][k]), Bits(y[0][k]))
              << Traits(m.view.type).name << ": " << SimdTargetName(targets[t]) << " against "
              << SimdTargetName(targets[0]) << ", output " << k;
        }
      }
    }
  }
}

// `size` bytes that end where an unmapped page begins: reading one byte past them faults.
class GuardedBytes {
 public:
  explicit GuardedBytes(int64_t size) {
    const int64_t page = sysconf(_SC_PAGESIZE);
    mapped_ = static_cast<size_t>((size + page - 1) / page * page + page);
    base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      return;
    }
    std::byte* guard = static_cast<std::byte*>(base_) + mapped_ - page;
    if (mprotect(guard, static_cast<size_t>(page), PROT_NONE) != 0) return;
    data_ = guard - size;
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  ~GuardedBytes() {
    if (base_ != nullptr) munmap(base_, mapped_);
  }
  std::byte* data() const { return data_; }  // null if the mapping failed

 private:
  void* base_ = nullptr;
  size_t mapped_ = 0;
  std::byte* data_ = nullptr;
};

// Every quantized type's rows (and MLX scales and biases) placed at the end of the mapped memory:
// the last row's last block, and a partial last chunk, must not be read past.
TEST(GuardPageTest, NothingPastTheLastRowIsRead) {
  struct Case {
    DType type;
    int64_t cols, group;
    DType scale_type;
  };
  std::vector<Case> cases;
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t cols : {32, 96, 160}) cases.push_back({type, cols, 32, DType::kBF16});
  }
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    cases.push_back({type, 256, 32, DType::kBF16});
  }
  for (const MlxCase& c : AllMlxCases()) {
    for (int64_t cols : {32, 96, 128, 224, 256}) {
      if (cols % c.group == 0) cases.push_back({c.type, cols, c.group, c.scale_type});
    }
  }
  for (const Case& c : cases) {
    const int64_t rows = 5, n = 5;
    const TestMatrix m(c.type, rows, c.cols, 3, c.group, c.scale_type);
    MatrixView v = m.view;
    GuardedBytes data(static_cast<int64_t>(m.bytes.size()));
    GuardedBytes scales(static_cast<int64_t>(m.scales.size()));
    GuardedBytes biases(static_cast<int64_t>(m.biases.size()));
    ASSERT_NE(data.data(), nullptr);
    std::memcpy(data.data(), m.bytes.data(), m.bytes.size());
    v.data = data.data();
    if (IsMlx(c.type)) {
      ASSERT_NE(scales.data(), nullptr);
      ASSERT_NE(biases.data(), nullptr);
      std::memcpy(scales.data(), m.scales.data(), m.scales.size());
      std::memcpy(biases.data(), m.biases.data(), m.biases.size());
      v.scales = scales.data();
      v.biases = biases.data();
    }
    const std::vector<float> x = RandomVector(n * c.cols, 4);
    ForEachSimdTarget([&] {
      base::ThreadPool pool(1, /*spin_microseconds=*/0);
      for (int64_t k : {int64_t{1}, n}) {  // decode and a batch
        Workspace ws;
        std::vector<float> y(static_cast<size_t>(k * rows), NAN);
        MatMul(v, x.data(), k, y.data(), ws, pool);
        ExpectMatchesReference(v, x.data(), k, y.data());
      }
    });
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace loom::kernels
