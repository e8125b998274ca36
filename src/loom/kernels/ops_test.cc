#include "loom/kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/reference.h"

namespace loom::kernels {
namespace {

using testing::ForEachSimdTarget;
using testing::RandomVector;

// Sizes around every vector width and unroll boundary (SSE4 4 lanes ... AVX-512 16 lanes x 2).
const int64_t kSizes[] = {0, 1, 3, 4, 15, 16, 17, 31, 32, 33, 100, 1000, 2051};

// Element-wise ops do the same f32 operations per element as the reference (one rounding each),
// so they must agree exactly, except where exp is involved: Highway's Exp is within a few ulp of
// std::exp, hence a relative tolerance of 4e-7 (~3 ulp) on those.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float rel,
                 float abs = 0.0f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + abs) << "element " << i;
  }
}

// Reductions (Dot, the RmsNorm sum of squares) add in a different order: the difference is a few
// roundings of sum |terms|.
double AbsDot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(a[i]) * b[i]);
  return s;
}

TEST(OpsTest, DotMatchesReference) {
  ForEachSimdTarget([] {
    for (int64_t n : kSizes) {
      const auto a = RandomVector(n, 1);
      const auto b = RandomVector(n, 2);
      EXPECT_NEAR(Dot(a.data(), b.data(), n), reference::Dot(a.data(), b.data(), n),
                  1e-6 * AbsDot(a.data(), b.data(), n))
          << n;
    }
  });
}

TEST(OpsTest, AddAxpyScaleMatchReferenceExactly) {
  ForEachSimdTarget([] {
    for (int64_t n : kSizes) {
      const auto x = RandomVector(n, 3);
      const auto y0 = RandomVector(n, 4);
      auto y = y0, y_ref = y0;
      Add(x.data(), n, y.data());
      reference::Add(x.data(), n, y_ref.data());
      EXPECT_EQ(y, y_ref) << n;
      y = y0;
      y_ref = y0;
      // Axpy is a fused multiply-add in SIMD: compare with one rounding of the exact value.
      Axpy(0.37f, x.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        y_ref[i] = static_cast<float>(0.37f * static_cast<double>(x[i]) + y0[i]);
      }
      ExpectClose(y, y_ref, 1e-7f, 1e-7f);
      y = y0;
      y_ref = y0;
      Scale(-1.5f, n, y.data());
      reference::Scale(-1.5f, n, y_ref.data());
      EXPECT_EQ(y, y_ref) << n;
    }
  });
}

TEST(OpsTest, RmsNormMatchesReferenceAndMayAlias) {
  ForEachSimdTarget([] {
    for (int64_t n : kSizes) {
      if (n == 0) continue;
      const auto x = RandomVector(n, 5, 3.0f);
      const auto w = RandomVector(n, 6);
      std::vector<float> out(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      RmsNorm(x.data(), w.data(), n, 1e-5f, out.data());
      reference::RmsNorm(x.data(), w.data(), n, 1e-5f, want.data());
      ExpectClose(out, want, 2e-6f);  // the sum of squares is reordered (positive terms)
      auto inplace = x;
      RmsNorm(inplace.data(), w.data(), n, 1e-5f, inplace.data());
      EXPECT_EQ(inplace, out) << n;
    }
  });
}

TEST(OpsTest, RopeMatchesReferenceForBothPairStyles) {
  ForEachSimdTarget([] {
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalves}) {
      for (int64_t head_dim : {2, 6, 32, 48, 64, 128}) {
        const int64_t heads = 3;
        std::vector<float> cos_sin(static_cast<size_t>(head_dim));
        for (int64_t i = 0; i < head_dim / 2; ++i) {
          const double angle = 7.0 / std::pow(10000.0, 2.0 * i / head_dim);
          cos_sin[2 * i] = static_cast<float>(std::cos(angle));
          cos_sin[2 * i + 1] = static_cast<float>(std::sin(angle));
        }
        const auto x0 = RandomVector(heads * head_dim, 7);
        auto x = x0, want = x0;
        Rope(x.data(), heads, head_dim, cos_sin.data(), style);
        reference::Rope(want.data(), heads, head_dim, cos_sin.data(), style);
        // a*c - b*s may be contracted into a fused multiply-add on either side: a few ulp of the
        // operands' magnitude.
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(x[i], want[i], 1e-6f * (std::fabs(x0[i]) + 1.0f)) << head_dim << " " << i;
        }
      }
    }
  });
}

TEST(OpsTest, SoftmaxMatchesReferenceAndHandlesMaskedScores) {
  ForEachSimdTarget([] {
    for (int64_t n : kSizes) {
      if (n == 0) continue;
      auto x = RandomVector(n, 8, 20.0f);
      if (n > 3) x[2] = -INFINITY;  // a masked score
      auto want = x;
      Softmax(x.data(), n);
      reference::Softmax(want.data(), n);
      ExpectClose(x, want, 4e-7f * 4, 1e-12f);
      double sum = 0.0;
      for (float v : x) sum += v;
      EXPECT_NEAR(sum, 1.0, 1e-5) << n;
      if (n > 3) {
        EXPECT_EQ(x[2], 0.0f);
      }
    }
  });
}

TEST(OpsTest, AttendMatchesReference) {
  ForEachSimdTarget([] {
    for (int64_t head_dim : {1, 3, 16, 17, 64, 80, 128}) {
      for (int64_t len : {1, 2, 7, 100}) {
        const int64_t stride = 3 * head_dim + 5;  // heads interleaved, as in the KV cache
        const auto q = RandomVector(head_dim, 11);
        const auto keys = RandomVector(len * stride, 12);
        const auto values = RandomVector(len * stride, 13);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> scores(static_cast<size_t>(len)), out(static_cast<size_t>(head_dim));
        std::vector<float> want_scores(scores.size()), want(out.size());
        Attend(q.data(), keys.data(), values.data(), len, stride, head_dim, scale, scores.data(),
               out.data());
        reference::Attend(q.data(), keys.data(), values.data(), len, stride, head_dim, scale,
                          want_scores.data(), want.data());
        SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << " len " << len);
        // Scores: softmax of dot products (reordered sums, exp within a few ulp); out: a convex
        // combination of values (|v| <= 6), so an absolute bound.
        ExpectClose(scores, want_scores, 1e-5f, 1e-7f);
        ExpectClose(out, want, 0.0f, 1e-5f);
      }
    }
  });
}

TEST(OpsTest, SwiGluMatchesReferenceIncludingLargeGates) {
  ForEachSimdTarget([] {
    for (int64_t n : kSizes) {
      auto gate = RandomVector(n, 9, 8.0f);
      if (n > 4) {
        gate[0] = 150.0f;   // silu(g) = g
        gate[1] = -150.0f;  // silu(g) = -0
        gate[3] = -95.0f;   // exp(95) overflows f32
      }
      const auto up = RandomVector(n, 10);
      std::vector<float> out(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      SwiGlu(gate.data(), up.data(), n, out.data());
      reference::SwiGlu(gate.data(), up.data(), n, want.data());
      ExpectClose(out, want, 4e-7f * 4, 1e-30f);
      auto inplace = gate;
      SwiGlu(inplace.data(), up.data(), n, inplace.data());
      EXPECT_EQ(inplace, out);
    }
  });
}

// Element-wise ops give an element the same bits wherever it falls: a slice of the arrays (a
// tensor- or expert-parallel part of rows, any start, any length) computes what the whole did.
// Slices of 1 and 3 elements at every start put each element in a vector's tail.  (A scalar
// std::exp tail in SwiGlu differed from the vector exp on a few elements in a thousand: an expert
// part starting at row 168 gave other bits than one process.)
TEST(OpsTest, SwiGluAndAxpyGiveEachElementTheSameBitsAtAnyOffsetAndLength) {
  ForEachSimdTarget([] {
    const int64_t n = 4096;
    const auto gate = RandomVector(n, 11, 8.0f);
    const auto up = RandomVector(n, 12);
    const auto y0 = RandomVector(n, 13);
    std::vector<float> whole(static_cast<size_t>(n)), whole_axpy = y0;
    SwiGlu(gate.data(), up.data(), n, whole.data());
    Axpy(0.37f, gate.data(), n, whole_axpy.data());
    for (int64_t len : {1, 3, 19}) {
      for (int64_t begin = 0; begin + len <= n; ++begin) {
        float part[19], part_axpy[19];
        SwiGlu(gate.data() + begin, up.data() + begin, len, part);
        std::memcpy(part_axpy, y0.data() + begin, static_cast<size_t>(len) * sizeof(float));
        Axpy(0.37f, gate.data() + begin, len, part_axpy);
        for (int64_t i = 0; i < len; ++i) {
          ASSERT_EQ(std::memcmp(&part[i], &whole[static_cast<size_t>(begin + i)], sizeof(float)), 0)
              << "SwiGlu element " << begin + i << " of a slice [" << begin << ", +" << len << ")";
          ASSERT_EQ(std::memcmp(&part_axpy[i], &whole_axpy[static_cast<size_t>(begin + i)],
                                sizeof(float)),
                    0)
              << "Axpy element " << begin + i << " of a slice [" << begin << ", +" << len << ")";
        }
      }
    }
  });
}

}  // namespace
}  // namespace loom::kernels
