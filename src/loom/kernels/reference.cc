#include "loom/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "loom/base/half.h"
#include "loom/kernels/block_formats.h"

namespace loom::kernels::reference {
namespace {

uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d) {
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t j = 0; j < kQ8Block; ++j) {
      q[b * kQ8Block + j] = static_cast<int8_t>(std::nearbyint(xb[j] * inv));
    }
    d[b] = scale;
  }
}

float DotQuantizedRow(const MatrixView& w, int64_t row, const int8_t* q, const float* d) {
  const std::byte* p = w.data + row * w.row_stride;
  const int64_t blocks = w.cols / kQ8Block;
  internal::FileBlockReader reader(w.type, w.layout, p, blocks);
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* qx = q + b * kQ8Block;
    const std::byte* blk = reader.Block(b);
    const float dw = base::F16ToF32(LoadU16(blk));
    int32_t isum = 0;
    if (w.type == DType::kQ8_0) {
      for (int j = 0; j < 32; ++j) isum += static_cast<int8_t>(blk[2 + j]) * qx[j];
    } else {  // kQ4_0
      for (int j = 0; j < 16; ++j) {
        const int v = static_cast<int>(blk[2 + j]);
        isum += ((v & 0x0F) - 8) * qx[j] + ((v >> 4) - 8) * qx[j + 16];
      }
    }
    sum += (dw * d[b]) * static_cast<float>(isum);
  }
  return sum;
}

void DequantizeRow(const MatrixView& w, int64_t row, float* out) {
  const std::byte* p = w.data + row * w.row_stride;
  switch (w.type) {
    case DType::kF32:
      std::memcpy(out, p, static_cast<size_t>(w.cols) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = base::F16ToF32(LoadU16(p + 2 * i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = base::Bf16ToF32(LoadU16(p + 2 * i));
      return;
    case DType::kQ8_0:
    case DType::kQ4_0: {
      const int64_t blocks = w.cols / 32;
      internal::FileBlockReader reader(w.type, w.layout, p, blocks);
      for (int64_t b = 0; b < blocks; ++b) {
        const std::byte* blk = reader.Block(b);
        const float dw = base::F16ToF32(LoadU16(blk));
        if (w.type == DType::kQ8_0) {
          for (int j = 0; j < 32; ++j) out[b * 32 + j] = dw * static_cast<int8_t>(blk[2 + j]);
          continue;
        }
        for (int j = 0; j < 16; ++j) {
          const int v = static_cast<int>(blk[2 + j]);
          out[b * 32 + j] = dw * static_cast<float>((v & 0x0F) - 8);
          out[b * 32 + j + 16] = dw * static_cast<float>((v >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K:
      if (w.layout == WeightLayout::kPairedNibbles) {
        // Back to the file's pairs, a super-block at a time.
        const int64_t bytes = Traits(w.type).block_bytes;
        std::byte blk[internal::kQ5KBlockBytes];
        for (int64_t b = 0; b < w.cols / internal::kQK; ++b) {
          std::memcpy(blk, p + b * bytes, static_cast<size_t>(bytes));
          internal::SwapSuperBlockNibblePairs(w.type, blk);
          internal::DequantizeKQuantRow(w.type, blk, internal::kQK, out + b * internal::kQK);
        }
        return;
      }
      internal::DequantizeKQuantRow(w.type, p, w.cols, out);
      return;
    case DType::kQ6_K:
      internal::DequantizeKQuantRow(w.type, p, w.cols, out);
      return;
    case DType::kMlx2:
    case DType::kMlx3:
    case DType::kMlx4:
    case DType::kMlx5:
    case DType::kMlx6:
    case DType::kMlx8:
      internal::DequantizeMlxRow(w, row, out);
      return;
  }
}

bool UsesQuantizedActivations(DType type) {
  return type != DType::kF32 && type != DType::kF16 && type != DType::kBF16;
}

void MatMul(const MatrixView& w, const float* x, int64_t n, float* y) {
  if (w.type == DType::kQ8_0 || w.type == DType::kQ4_0) {
    std::vector<int8_t> q(static_cast<size_t>(w.cols));
    std::vector<float> d(static_cast<size_t>(w.cols / kQ8Block));
    for (int64_t i = 0; i < n; ++i) {
      QuantizeActivations(x + i * w.cols, w.cols, q.data(), d.data());
      for (int64_t r = 0; r < w.rows; ++r)
        y[i * w.rows + r] = DotQuantizedRow(w, r, q.data(), d.data());
    }
    return;
  }
  std::vector<float> wrow(static_cast<size_t>(w.cols));
  if (UsesQuantizedActivations(w.type)) {  // K-quants and MLX
    std::vector<int8_t> q(static_cast<size_t>(n * w.cols));
    std::vector<float> d(static_cast<size_t>(n * (w.cols / kQ8Block)));
    for (int64_t i = 0; i < n; ++i) {
      QuantizeActivations(x + i * w.cols, w.cols, q.data() + i * w.cols,
                          d.data() + i * (w.cols / kQ8Block));
    }
    for (int64_t r = 0; r < w.rows; ++r) {
      DequantizeRow(w, r, wrow.data());
      for (int64_t i = 0; i < n; ++i) {
        float sum = 0.0f;
        for (int64_t b = 0; b < w.cols / kQ8Block; ++b) {
          float block = 0.0f;
          for (int64_t c = b * kQ8Block; c < (b + 1) * kQ8Block; ++c) {
            block += wrow[static_cast<size_t>(c)] * q[static_cast<size_t>(i * w.cols + c)];
          }
          sum += d[static_cast<size_t>(i * (w.cols / kQ8Block) + b)] * block;
        }
        y[i * w.rows + r] = sum;
      }
    }
    return;
  }
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w, r, wrow.data());
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * w.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) sum += wrow[c] * xi[c];
      y[i * w.rows + r] = sum;
    }
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (inv * x[i]);
}

void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, RopeStyle style) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i0 = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int64_t i1 = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const float c = cos_sin[2 * i];
      const float s = cos_sin[2 * i + 1];
      const float v0 = xh[i0];
      const float v1 = xh[i1];
      xh[i0] = v0 * c - v1 * s;
      xh[i1] = v0 * s + v1 * c;
    }
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void Add(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float alpha, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void Attend(const float* q, const float* keys, const float* values, int64_t len, int64_t stride,
            int64_t head_dim, float scale, float* scores, float* out) {
  for (int64_t p = 0; p < len; ++p) scores[p] = Dot(q, keys + p * stride, head_dim) * scale;
  Softmax(scores, len);
  for (int64_t i = 0; i < head_dim; ++i) out[i] = 0.0f;
  for (int64_t p = 0; p < len; ++p) Axpy(scores[p], values + p * stride, head_dim, out);
}

namespace {
float KvValue(const KvHeadRows& r, int64_t p, int64_t i) {
  if (r.tiled) {
    const int64_t t = p / kAttendKeyBlock, j = p % kAttendKeyBlock;
    const int64_t at = t * r.stride + i * kAttendKeyBlock + j;
    if (r.type == KvType::kF32) return r.f32[at];
    return static_cast<float>(r.q[at]) * r.d[t * r.d_stride + (i / r.block) * kAttendKeyBlock + j];
  }
  if (r.type == KvType::kF32) return r.f32[p * r.stride + i];
  return static_cast<float>(r.q[p * r.stride + i]) * r.d[p * r.d_stride + i / r.block];
}
}  // namespace

void AttendMany(const AttendQuery* queries, int64_t n_queries, const KvHeadRows& keys,
                const KvHeadRows& values, int64_t head_dim, float scale) {
  for (int64_t m = 0; m < n_queries; ++m) {
    const int64_t len = queries[m].len;
    std::vector<float> k(static_cast<size_t>(len * head_dim)), v(k.size());
    for (int64_t p = 0; p < len; ++p) {
      for (int64_t i = 0; i < head_dim; ++i) {
        k[static_cast<size_t>(p * head_dim + i)] = KvValue(keys, p, i);
        v[static_cast<size_t>(p * head_dim + i)] = KvValue(values, p, i);
      }
    }
    std::vector<float> scores(static_cast<size_t>(len));
    Attend(queries[m].q, k.data(), v.data(), len, head_dim, head_dim, scale, scores.data(),
           queries[m].out);
  }
}

}  // namespace loom::kernels::reference
