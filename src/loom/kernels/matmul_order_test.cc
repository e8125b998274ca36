// The x86 quad tiles (AVX3_DL, and AVX2 / AVX3 on 256-bit halves) promise one order of operations,
// so that every x86 machine gives a product the same bits: a pod that mixes an AVX2 machine with
// an AVX-512 one, or a node re-checked by another, computes the same tokens.  This file writes
// that order down in scalar code and holds each of those targets that this CPU has to it, bit for
// bit (here an AVX2-only CPU checks AVX2; an AVX-512 one also checks AVX3 and AVX3_DL).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "loom/base/half.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/matmul_test_util.h"
#include "loom/kernels/reference.h"

namespace loom::kernels {
namespace {

using testing::RandomVector;
using testing::TestMatrix;

// The quad tiles' dot of one Q8_0/Q4_0 row with one activation row: per 32-value block b, the
// exact integer dot of the quants with the quantized activations; lane b mod 4 accumulates
// fma(float(dot), d_w * d_x, lane) over the blocks in order; the lanes are added as
// (l0 + l2) + (l1 + l3).
float QuadOrderDot(DType type, const std::byte* row, int64_t cols, const int8_t* xq,
                   const float* xd) {
  float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < cols / 32; ++b) {
    const std::byte* blk = row + b * internal::QuantBlockBytes(type);
    int32_t dot = 0;
    for (int64_t j = 0; j < 32; ++j) {
      int32_t q;
      if (type == DType::kQ8_0) {
        q = static_cast<int8_t>(blk[2 + j]);
      } else {
        const auto byte = static_cast<uint8_t>(blk[2 + j % 16]);
        q = (j < 16 ? byte & 0x0F : byte >> 4) - 8;
      }
      dot += q * xq[32 * b + j];
    }
    const float scale = internal::LoadF16(blk) * xd[b];
    lane[b % 4] = std::fma(static_cast<float>(dot), scale, lane[b % 4]);
  }
  return (lane[0] + lane[2]) + (lane[1] + lane[3]);
}

bool IsQuadTileTarget(int64_t target) {
  return target == HWY_AVX2 || target == HWY_AVX3 || target == HWY_AVX3_DL;
}

TEST(QuadOrderTest, X86QuadTilesComputeTheWrittenOrderBitForBit) {
  int64_t checked = 0;
  for (int64_t target : AvailableSimdTargets()) {
    if (!IsQuadTileTarget(target)) continue;
    ForceSimdTargetForTest(target);
    SCOPED_TRACE(std::string("SIMD target ") + std::string(SimdTargetName(target)));
    ++checked;
    base::ThreadPool pool(2);
    for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
      for (int64_t cols : {32, 96, 128, 160, 2080}) {
        for (int64_t n : {1, 3, 9}) {
          const int64_t rows = 7;
          const TestMatrix m(type, rows, cols, static_cast<uint32_t>(cols + n));
          const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(7 * cols + n));
          Workspace ws;
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          MatMul(m.view, x.data(), n, y.data(), ws, pool);
          std::vector<int8_t> xq(static_cast<size_t>(cols));
          std::vector<float> xd(static_cast<size_t>(cols / 32));
          for (int64_t i = 0; i < n; ++i) {
            reference::QuantizeActivations(x.data() + i * cols, cols, xq.data(), xd.data());
            for (int64_t r = 0; r < rows; ++r) {
              const float want = QuadOrderDot(type, m.view.data + r * m.view.row_stride, cols,
                                              xq.data(), xd.data());
              const float got = y[static_cast<size_t>(i * rows + r)];
              uint32_t want_bits, got_bits;
              std::memcpy(&want_bits, &want, sizeof(want));
              std::memcpy(&got_bits, &got, sizeof(got));
              ASSERT_EQ(got_bits, want_bits)
                  << Traits(type).name << " cols " << cols << " n " << n << " row " << r
                  << " act " << i << ": " << got << " vs " << want;
            }
          }
        }
      }
    }
  }
  ForceSimdTargetForTest(0);
  if (checked == 0) GTEST_SKIP() << "no x86 quad-tile target (AVX2 or AVX-512) on this CPU";
}

}  // namespace
}  // namespace loom::kernels
