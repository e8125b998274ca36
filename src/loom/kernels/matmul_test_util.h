// Matrix-product test helpers shared by matmul_test.cc and matmul_kquant_test.cc (test-only):
// random weight matrices in every type, the reference product with its tolerance, and the check
// that a batched product's rows equal the single-row products bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "loom/base/thread_pool.h"
#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/quantize.h"
#include "loom/kernels/reference.h"

namespace loom::kernels::testing {

// A weight matrix stored in `type`, built from random floats (MLX types with groups of `group`
// values and scales/biases of `scale_type`).
struct TestMatrix {
  TestMatrix(DType type, int64_t rows, int64_t cols, uint32_t seed, int64_t group = 32,
             DType scale_type = DType::kBF16)
      : floats(RandomVector(rows * cols, seed, 0.5f)) {
    row_bytes = RowBytes(type, cols).value();
    bytes.resize(static_cast<size_t>(rows * row_bytes));
    view = MatrixView{type, rows, cols, bytes.data(), row_bytes};
    if (IsMlx(type)) {
      const int64_t scale_row_bytes = cols / group * Traits(scale_type).block_bytes;
      scales.resize(static_cast<size_t>(rows * scale_row_bytes));
      biases.resize(scales.size());
      view.scales = scales.data();
      view.biases = biases.data();
      view.scale_row_stride = scale_row_bytes;
      view.scale_type = scale_type;
      view.group_size = group;
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (IsMlx(type)) {
        QuantizeMlxRow(type, group, scale_type, floats.data() + r * cols, cols,
                       bytes.data() + r * row_bytes, scales.data() + r * view.scale_row_stride,
                       biases.data() + r * view.scale_row_stride);
      } else {
        QuantizeRow(type, floats.data() + r * cols, cols, bytes.data() + r * row_bytes);
      }
    }
  }
  std::vector<float> floats;
  std::vector<std::byte> bytes, scales, biases;
  int64_t row_bytes = 0;
  MatrixView view;
};

// A packed copy of the rows and columns of `view` (data, and MLX scales/biases).
struct PackedCopy {
  explicit PackedCopy(const MatrixView& v) {
    const int64_t row_bytes = RowBytes(v.type, v.cols).value();
    bytes.resize(static_cast<size_t>(v.rows * row_bytes));
    for (int64_t r = 0; r < v.rows; ++r) {
      std::memcpy(bytes.data() + r * row_bytes, v.data + r * v.row_stride,
                  static_cast<size_t>(row_bytes));
    }
    view = v;
    view.data = bytes.data();
    view.row_stride = row_bytes;
    if (IsMlx(v.type)) {
      const int64_t scale_row_bytes = v.cols / v.group_size * Traits(v.scale_type).block_bytes;
      scales.resize(static_cast<size_t>(v.rows * scale_row_bytes));
      biases.resize(scales.size());
      for (int64_t r = 0; r < v.rows; ++r) {
        std::memcpy(scales.data() + r * scale_row_bytes, v.scales + r * v.scale_row_stride,
                    static_cast<size_t>(scale_row_bytes));
        std::memcpy(biases.data() + r * scale_row_bytes, v.biases + r * v.scale_row_stride,
                    static_cast<size_t>(scale_row_bytes));
      }
      view.scales = scales.data();
      view.biases = biases.data();
      view.scale_row_stride = scale_row_bytes;
    }
  }
  std::vector<std::byte> bytes, scales, biases;
  MatrixView view;
};

// What the kernels actually multiply: x itself for float types, its quantized values otherwise.
inline std::vector<float> EffectiveActivations(DType type, const float* x, int64_t n,
                                               int64_t cols) {
  std::vector<float> out(x, x + n * cols);
  if (!reference::UsesQuantizedActivations(type)) return out;
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> d(static_cast<size_t>(cols / 32));
  for (int64_t i = 0; i < n; ++i) {
    reference::QuantizeActivations(x + i * cols, cols, q.data(), d.data());
    for (int64_t c = 0; c < cols; ++c) {
      out[static_cast<size_t>(i * cols + c)] =
          d[static_cast<size_t>(c / 32)] * q[static_cast<size_t>(c)];
    }
  }
  return out;
}

// The reference product of w and x and, per output, the tolerance for an optimized kernel.
// Tolerance: both sides sum the same f32 (or exact integer block) products in a different order
// and grouping, so their difference is bounded by a few float roundings of the sum of |products|,
// not of the (possibly cancelling) result: 1e-5 * sum_k |w_k x_k| is ~80 f32 epsilons, well above
// the ~sqrt(cols) epsilons of a reordered sum of up to a few thousand terms and far below any
// indexing or scaling error (which would be of the order of whole products).
struct Expected {
  Expected(const MatrixView& w, const float* x, int64_t n)
      : y(static_cast<size_t>(n * w.rows)), tol(static_cast<size_t>(n * w.rows)) {
    reference::MatMul(w, x, n, y.data());
    const std::vector<float> xe = EffectiveActivations(w.type, x, n, w.cols);
    std::vector<float> wrow(static_cast<size_t>(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
      reference::DequantizeRow(w, r, wrow.data());
      for (int64_t i = 0; i < n; ++i) {
        double bound = 0.0;
        for (int64_t c = 0; c < w.cols; ++c) {
          bound += std::fabs(static_cast<double>(wrow[static_cast<size_t>(c)]) *
                             xe[static_cast<size_t>(i * w.cols + c)]);
        }
        tol[static_cast<size_t>(i * w.rows + r)] = 1e-5 * bound + 1e-30;
      }
    }
  }
  std::vector<float> y;
  std::vector<double> tol;
};

inline void ExpectNear(const Expected& want, const MatrixView& w, int64_t n, const float* y) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < w.rows; ++r) {
      const size_t k = static_cast<size_t>(i * w.rows + r);
      ASSERT_NEAR(y[k], want.y[k], want.tol[k])
          << Traits(w.type).name << " row " << r << " of " << w.rows << ", act row " << i << " of "
          << n << ", cols " << w.cols;
    }
  }
}

inline void ExpectMatchesReference(const MatrixView& w, const float* x, int64_t n, const float* y) {
  ExpectNear(Expected(w, x, n), w, n, y);
}

// Row i of a product with n activation rows must be, bit for bit, the product with row i alone:
// a continuation prefills the tokens another node decoded one at a time, and greedy decoding only
// continues the same text if those positions get the same KV cache and logits.
inline void ExpectBatchRowsEqualSingleRows(const MatrixView& w, const float* x, int64_t n,
                                           base::ThreadPool& pool) {
  Workspace ws;
  std::vector<float> batch(static_cast<size_t>(n * w.rows), NAN);
  MatMul(w, x, n, batch.data(), ws, pool);
  std::vector<float> alone(static_cast<size_t>(w.rows), NAN);
  for (int64_t i = 0; i < n; ++i) {
    MatMul(w, x + i * w.cols, 1, alone.data(), ws, pool);
    for (int64_t r = 0; r < w.rows; ++r) {
      const float b = batch[static_cast<size_t>(i * w.rows + r)];
      const float a = alone[static_cast<size_t>(r)];
      uint32_t b_bits, a_bits;
      std::memcpy(&b_bits, &b, sizeof(b));
      std::memcpy(&a_bits, &a, sizeof(a));
      ASSERT_EQ(b_bits, a_bits) << Traits(w.type).name << " row " << r << " of " << w.rows
                                << ", act row " << i << " of " << n << ", cols " << w.cols
                                << ": batched " << b << ", alone " << a;
    }
  }
}

// Every MLX width with every group size and scale type, for parameterized tests.
struct MlxCase {
  DType type;
  int64_t group;
  DType scale_type;
};

inline std::vector<MlxCase> AllMlxCases() {
  std::vector<MlxCase> out;
  for (DType t :
       {DType::kMlx2, DType::kMlx3, DType::kMlx4, DType::kMlx5, DType::kMlx6, DType::kMlx8}) {
    for (int64_t g : {32, 64, 128}) {
      for (DType s : {DType::kBF16, DType::kF16, DType::kF32}) out.push_back({t, g, s});
    }
  }
  return out;
}

inline std::string MlxCaseName(const ::testing::TestParamInfo<MlxCase>& info) {
  return std::string(Traits(info.param.type).name) + "_g" + std::to_string(info.param.group) +
         "_" + std::string(Traits(info.param.scale_type).name);
}

}  // namespace loom::kernels::testing
