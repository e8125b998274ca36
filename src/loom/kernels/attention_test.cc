// AttendMany against its scalar reference on ragged shapes (every context length around the key
// block, head_dim 8/64/128 and odd ones, grouped-query ratios 1/4/8), float and Q8_0 rows, keys as
// rows and in the cache's transposed tiles; plus the
// property the model relies on: a query's output has the same bits whichever queries share its
// call (prompt tiles against token-by-token decoding).
#include "loom/kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/reference.h"

namespace loom::kernels {
namespace {

using testing::ForEachSimdTarget;
using testing::RandomVector;

// A sequence's cache rows of two kv heads (interleaved as in the KV cache), in f32 and Q8_0.
struct Rows {
  int64_t head_dim = 0, stride = 0, block = 0;
  std::vector<float> k, v;
  std::vector<int8_t> kq, vq;
  std::vector<float> kd, vd;
  Rows(int64_t len, int64_t hd, uint32_t seed)
      : head_dim(hd),
        stride(2 * hd),
        block(KvBlock(hd)),
        k(RandomVector(len * 2 * hd, seed)),
        v(RandomVector(len * 2 * hd, seed + 1)) {
    kq.resize(k.size());
    vq.resize(v.size());
    kd.resize(k.size() / static_cast<size_t>(block));
    vd.resize(kd.size());
    for (int64_t p = 0; p < len; ++p) {
      QuantizeKvRow(k.data() + p * stride, stride, block, kq.data() + p * stride,
                    kd.data() + p * stride / block);
      QuantizeKvRow(v.data() + p * stride, stride, block, vq.data() + p * stride,
                    vd.data() + p * stride / block);
    }
    Tile(len);
  }
  // kv head 1: offsets exercise the head's place in the row and in the scales.  Tiled keys: the
  // KV cache's layout (tiles of kAttendKeyBlock positions, transposed).
  KvHeadRows View(bool keys, KvType type, bool tiled = false) const {
    KvHeadRows r;
    r.type = type;
    r.block = block;
    if (keys && tiled) {
      constexpr int64_t kB = kAttendKeyBlock;
      r.tiled = true;
      r.stride = stride * kB;
      r.d_stride = stride / block * kB;
      if (type == KvType::kF32) {
        r.f32 = kt.data() + head_dim * kB;
      } else {
        r.q = ktq.data() + head_dim * kB;
        r.d = ktd.data() + head_dim / block * kB;
      }
      return r;
    }
    r.stride = stride;
    r.d_stride = stride / block;
    if (type == KvType::kF32) {
      r.f32 = (keys ? k : v).data() + head_dim;
    } else {
      r.q = (keys ? kq : vq).data() + head_dim;
      r.d = (keys ? kd : vd).data() + head_dim / block;
    }
    return r;
  }
  std::vector<float> kt, ktd;  // tiled keys and their scales
  std::vector<int8_t> ktq;
  void Tile(int64_t len) {
    constexpr int64_t kB = kAttendKeyBlock;
    const int64_t tiles = (len + kB - 1) / kB, scales = stride / block;
    kt.assign(static_cast<size_t>(tiles * stride * kB), 7.0f);  // unused columns: finite junk
    ktq.assign(kt.size(), 5);
    ktd.assign(static_cast<size_t>(tiles * scales * kB), 0.5f);
    for (int64_t p = 0; p < len; ++p) {
      const int64_t t = p / kB, j = p % kB;
      for (int64_t e = 0; e < stride; ++e) {
        kt[static_cast<size_t>((t * stride + e) * kB + j)] = k[static_cast<size_t>(p * stride + e)];
        ktq[static_cast<size_t>((t * stride + e) * kB + j)] =
            kq[static_cast<size_t>(p * stride + e)];
      }
      for (int64_t b = 0; b < scales; ++b) {
        ktd[static_cast<size_t>((t * scales + b) * kB + j)] =
            kd[static_cast<size_t>(p * scales + b)];
      }
    }
  }
};

// `group` query heads for each of `rows` positions ending at len (a prompt tile's last rows).
struct Queries {
  std::vector<float> q, out;
  std::vector<AttendQuery> list;
  Queries(int64_t group, int64_t rows, int64_t len, int64_t hd, uint32_t seed)
      : q(RandomVector(group * rows * hd, seed)), out(q.size(), -1.0f) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < group; ++g) {
        const int64_t m = r * group + g;
        list.push_back(
            {q.data() + m * hd, std::max<int64_t>(1, len - rows + 1 + r), out.data() + m * hd});
      }
    }
  }
};

// Attends qs's queries over rows into out (the kernel, or the reference).
void Attend(const Queries& qs, const Rows& rows, KvType type, float* out, bool reference,
            bool tiled = false) {
  const int64_t hd = rows.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<AttendQuery> list = qs.list;
  for (size_t m = 0; m < list.size(); ++m) list[m].out = out + static_cast<int64_t>(m) * hd;
  const int64_t n = static_cast<int64_t>(list.size());
  if (reference) {
    reference::AttendMany(list.data(), n, rows.View(true, type, tiled), rows.View(false, type), hd,
                          scale);
  } else {
    std::vector<float> scratch(static_cast<size_t>(AttendScratchFloats(n, hd)));
    AttendMany(list.data(), n, rows.View(true, type, tiled), rows.View(false, type), hd, scale,
               scratch.data());
  }
}

TEST(AttentionTest, MatchesReferenceOnRaggedShapes) {
  ForEachSimdTarget([] {
    for (int64_t hd : {8, 17, 64, 80, 128}) {
      for (int64_t len : {1, 2, 31, 63, 64, 65, 127, 128, 129, 200, 300}) {
        for (int64_t group : {1, 4, 8}) {
          const int64_t tile = len >= 3 ? 3 : 1;
          const Rows rows(len, hd, 7);
          const Queries qs(group, tile, len, hd, 11);
          for (KvType type : {KvType::kF32, KvType::kQ8_0}) {
            for (bool tiled : {false, true}) {
              if (type == KvType::kQ8_0 && !KvQ8Supports(hd)) continue;
              SCOPED_TRACE(::testing::Message()
                           << "head_dim " << hd << " len " << len << " group " << group << " "
                           << KvTypeName(type) << (tiled ? " tiled" : ""));
              std::vector<float> got(qs.out.size()), want(qs.out.size());
              Attend(qs, rows, type, got.data(), false, tiled);
              Attend(qs, rows, type, want.data(), true, tiled);
              // A convex combination of values (|v| <= 6): reordered sums and exp within a few ulp.
              for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5f) << i;
            }
          }
        }
      }
    }
  });
}

// Alone, a query takes the one-query path; in a call, tiles of kAttendTileQueries queries where
// they see the same positions of a block: group 4 makes each tile one row's heads, group 3 tiles
// that span rows (and, in the last block, where the rows' lengths differ, the one-query path
// between).
TEST(AttentionTest, QueryGetsTheSameBitsAloneAsInATile) {
  ForEachSimdTarget([] {
    for (int64_t hd : {8, 64, 128}) {
      for (auto [type, group] : {std::pair{KvType::kF32, int64_t{4}},
                                 {KvType::kQ8_0, int64_t{4}},
                                 {KvType::kF32, int64_t{3}},
                                 {KvType::kQ8_0, int64_t{3}}}) {
        const int64_t len = 300, tile = 16;
        const Rows rows(len, hd, 21);
        const Queries qs(group, tile, len, hd, 23);
        std::vector<float> together(qs.out.size()), rowwise(qs.out.size());
        Attend(qs, rows, type, together.data(), false, true);
        // The cache's tiled keys and row-major keys make the same float tiles: the same bits.
        Attend(qs, rows, type, rowwise.data(), false, false);
        ASSERT_EQ(together, rowwise)
            << "head_dim " << hd << " " << KvTypeName(type) << " group " << group;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        std::vector<float> scratch(static_cast<size_t>(AttendScratchFloats(1, hd)));
        std::vector<float> alone(static_cast<size_t>(hd));
        for (size_t m = 0; m < qs.list.size(); ++m) {
          AttendQuery one = qs.list[m];
          one.out = alone.data();
          AttendMany(&one, 1, rows.View(true, type, true), rows.View(false, type), hd, scale,
                     scratch.data());
          ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + m * hd,
                                   static_cast<size_t>(hd) * sizeof(float)))
              << "head_dim " << hd << " " << KvTypeName(type) << " group " << group << " query "
              << m;
        }
      }
    }
  });
}

TEST(AttentionTest, Q8RowsStayCloseToFloatRows) {
  for (int64_t hd : {8, 64, 128}) {
    const int64_t len = 257;
    const Rows rows(len, hd, 31);
    const Queries qs(4, 2, len, hd, 33);
    std::vector<float> f32(qs.out.size()), q8(qs.out.size());
    Attend(qs, rows, KvType::kF32, f32.data(), true);
    Attend(qs, rows, KvType::kQ8_0, q8.data(), false);
    double worst = 0;
    for (size_t i = 0; i < f32.size(); ++i)
      worst = std::max(worst, double{std::fabs(f32[i] - q8[i])});
    // 8-bit rows: each value within half a step (absmax / 254) of the float; the outputs move by
    // a small fraction of the values' range (|v| <= 6).
    EXPECT_LT(worst, 0.05) << "head_dim " << hd;
  }
}

TEST(AttentionTest, QuantizeKvRowRoundTripsWithinHalfAStep) {
  const int64_t block = 32;
  auto x = RandomVector(96, 41, 3.0f);
  std::fill_n(x.begin() + 32, 32, 0.0f);  // a block of zeros: d = 0
  std::vector<int8_t> q(96);
  std::vector<float> d(3);
  QuantizeKvRow(x.data(), 96, block, q.data(), d.data());
  EXPECT_EQ(d[1], 0.0f);
  for (int64_t i = 0; i < 96; ++i) {
    const float back = static_cast<float>(q[i]) * d[i / block];
    EXPECT_LE(std::fabs(back - x[i]), 0.5f * d[i / block] * 1.0001f + 1e-7f) << i;
    EXPECT_GE(q[i], -127);
  }
}

}  // namespace
}  // namespace loom::kernels
