#include "loom/model/mla.h"

#include <algorithm>
#include <cmath>

#include "loom/kernels/ops.h"
#include "loom/model/rope.h"
#include "loom/model/transformer.h"

namespace loom::model {

namespace k = loom::kernels;

void MlaScratch::Allocate(const HParams& hp, int64_t max_batch, int threads, int64_t ctx) {
  const int64_t n = max_batch, h = hp.n_heads;
  const int64_t row = hp.kv_lora_rank + hp.rope_dim;
  const int64_t nope = hp.head_dim - hp.rope_dim;
  qa = base::AlignedBuffer<float>(n * std::max<int64_t>(1, hp.q_lora_rank));
  q = base::AlignedBuffer<float>(n * h * hp.head_dim);
  kva = base::AlignedBuffer<float>(n * row);
  qnope = base::AlignedBuffer<float>(h * n * nope);
  qabs = base::AlignedBuffer<float>(h * n * row);
  outs = base::AlignedBuffer<float>(h * n * row);
  lat = base::AlignedBuffer<float>(h * n * hp.kv_lora_rank);
  vout = base::AlignedBuffer<float>(h * n * hp.v_head_dim);
  rows = base::AlignedBuffer<float>(static_cast<int64_t>(threads) * hp.kv_lora_rank);
  scores = base::AlignedBuffer<float>(static_cast<int64_t>(threads) * ctx);
}

float MlaScoreScale(const HParams& hp) {
  const double mscale2 = YarnMscale(hp.rope_scaling, /*deepseek2=*/true).mla_scores;
  return static_cast<float>(mscale2 / std::sqrt(static_cast<double>(hp.head_dim)));
}

void MlaForward(const HParams& hp, const LayerWeights& L, int64_t heads, const Batch& batch,
                const float* x,
                const float* cos_sin, int64_t cs_stride, KvCache& cache, int64_t layer, float* att,
                MlaScratch& s, kernels::Workspace& ws, base::ThreadPool& pool) {
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t hd = hp.head_dim, rd = hp.rope_dim;
  const int64_t nope = hd - rd, rank = hp.kv_lora_rank, vd = hp.v_head_dim;
  const int64_t row = rank + rd;
  const int threads = pool.size();

  // Queries, latents and rope keys.
  if (L.wq_a.data != nullptr) {
    k::MatMul(L.wq_a, x, n, s.qa.data(), ws, pool);
    for (int64_t i = 0; i < n; ++i) {
      float* qa = s.qa.data() + i * hp.q_lora_rank;
      k::RmsNorm(qa, L.q_a_norm, hp.q_lora_rank, hp.rms_eps, qa);
    }
    k::MatMul(L.wq_b, s.qa.data(), n, s.q.data(), ws, pool);
  } else {
    k::MatMul(L.wq, x, n, s.q.data(), ws, pool);
  }
  k::MatMul(L.wkv_a, x, n, s.kva.data(), ws, pool);
  for (int64_t i = 0; i < n; ++i) {
    const float* cs = cos_sin + i * cs_stride;
    float* q = s.q.data() + i * heads * hd;
    for (int64_t h = 0; h < heads; ++h) {
      k::Rope(q + h * hd + nope, 1, rd, cs, hp.rope_style);
      std::copy_n(q + h * hd, nope, s.qnope.data() + (h * n + i) * nope);
      std::copy_n(q + h * hd + nope, rd, s.qabs.data() + (h * n + i) * row + rank);
    }
    float* kv = s.kva.data() + i * row;
    k::RmsNorm(kv, L.kv_a_norm, rank, hp.rms_eps, kv);
    k::Rope(kv + rank, 1, rd, cs, hp.rope_style);
    std::copy_n(kv, row, cache.K(layer, batch.slots[i]) + batch.positions[i] * row);
  }

  // Absorb each head's key half into its queries: qabs_h[:rank] = Wk_h^T q_nope_h.
  if (L.wk_b.data != nullptr) {
    // attn_k_b holds Wk_h^T already: (n_heads * rank, nope).
    for (int64_t h = 0; h < heads; ++h) {
      float* lat = s.lat.data() + h * n * rank;  // (n, rank), then spread into qabs
      k::MatMul(L.wk_b.RowRange(h * rank, rank), s.qnope.data() + h * n * nope, n, lat, ws, pool);
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(lat + i * rank, rank, s.qabs.data() + (h * n + i) * row);
      }
    }
  } else {
    // attn_kv_b: Wk_h is rows [h * (nope + vd), + nope), one row per no-rope query value.
    auto absorb = [&](int t) {
      float* wrow = s.rows.data() + static_cast<int64_t>(t) * rank;
      for (int64_t h = t; h < heads; h += threads) {
        for (int64_t i = 0; i < n; ++i) std::fill_n(s.qabs.data() + (h * n + i) * row, rank, 0.0f);
        for (int64_t j = 0; j < nope; ++j) {
          k::DequantizeRow(L.wkv_b, h * (nope + vd) + j, wrow);
          for (int64_t i = 0; i < n; ++i) {
            k::Axpy(s.qnope[(h * n + i) * nope + j], wrow, rank, s.qabs.data() + (h * n + i) * row);
          }
        }
      }
    };
    if (threads == 1) {
      absorb(0);
    } else {
      pool.Run(absorb);
    }
  }

  // Every head over the cached [latent, rope key] rows; the rows serve as values too (the output's
  // first rank values are the weighted latent, the rest is unused).
  const float scale = MlaScoreScale(hp);
  const int64_t items = n * heads;
  auto work = [&](int64_t first, int64_t stride, float* scores) {
    for (int64_t item = first; item < items; item += stride) {
      const int64_t i = item / heads, h = item % heads;
      const float* rows = cache.K(layer, batch.slots[i]);
      k::Attend(s.qabs.data() + (h * n + i) * row, rows, rows, batch.positions[i] + 1, row, row,
                scale, scores, s.outs.data() + (h * n + i) * row);
    }
  };
  if (threads == 1 || items == 1) {
    work(0, 1, s.scores.data());
  } else {
    pool.Run(
        [&](int t) { work(t, threads, s.scores.data() + static_cast<int64_t>(t) * cache.ctx()); });
  }

  // Values: vout_h = Wv_h · (weighted latent), into att's head columns.
  for (int64_t h = 0; h < heads; ++h) {
    float* lat = s.lat.data() + h * n * rank;
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(s.outs.data() + (h * n + i) * row, rank, lat + i * rank);
    const k::MatrixView wv = L.wv_b.data != nullptr ? L.wv_b.RowRange(h * vd, vd)
                                                    : L.wkv_b.RowRange(h * (nope + vd) + nope, vd);
    float* vout = s.vout.data() + h * n * vd;
    k::MatMul(wv, lat, n, vout, ws, pool);
    for (int64_t i = 0; i < n; ++i) std::copy_n(vout + i * vd, vd, att + i * heads * vd + h * vd);
  }
}

}  // namespace loom::model
