#include "loom/model/moe.h"

#include <algorithm>
#include <cmath>

#include "loom/kernels/ops.h"
#include "loom/model/transformer.h"

namespace loom::model {

namespace k = loom::kernels;

Routing RoutingOf(const HParams& hp, const float* bias) {
  Routing r;
  r.n_experts = hp.n_experts;
  r.k = hp.n_experts_used;
  r.gating = hp.gating;
  r.bias = bias;
  r.n_groups = hp.n_expert_groups;
  r.n_groups_used = hp.n_expert_groups_used;
  r.norm = hp.expert_weights_norm;
  r.scale = hp.expert_weights_scale;
  return r;
}

void Route(const Routing& r, const float* logits, float* probs, float* select, int32_t* experts,
           float* weights) {
  const int64_t n = r.n_experts;
  if (r.gating == HParams::Gating::kSoftmax) {
    float max = logits[0];
    for (int64_t e = 1; e < n; ++e) max = std::max(max, logits[e]);
    double sum = 0.0;
    for (int64_t e = 0; e < n; ++e) {
      probs[e] = std::exp(logits[e] - max);
      sum += probs[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t e = 0; e < n; ++e) probs[e] *= inv;
  } else {
    for (int64_t e = 0; e < n; ++e) probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int64_t e = 0; e < n; ++e) select[e] = r.bias != nullptr ? probs[e] + r.bias[e] : probs[e];
  if (r.n_groups > 1) {
    // Each group's score: the sum of its two largest choice scores.  Groups are few (8 in
    // DeepSeek-V3) and chosen by passes, like the experts below.
    const int64_t per = n / r.n_groups;
    float score[kMaxExpertGroups];
    bool keep[kMaxExpertGroups] = {};
    for (int64_t g = 0; g < r.n_groups; ++g) {
      float a = -INFINITY, b = -INFINITY;  // largest, second largest
      for (int64_t e = g * per; e < (g + 1) * per; ++e) {
        if (select[e] > a) {
          b = a;
          a = select[e];
        } else if (select[e] > b) {
          b = select[e];
        }
      }
      score[g] = a + b;
    }
    for (int64_t j = 0; j < r.n_groups_used; ++j) {
      int64_t best = -1;
      for (int64_t g = 0; g < r.n_groups; ++g) {
        if (!keep[g] && (best < 0 || score[g] > score[best])) best = g;
      }
      keep[best] = true;
    }
    for (int64_t e = 0; e < n; ++e) {
      if (!keep[e / per]) select[e] = -INFINITY;
    }
  }
  // Selection by k passes (k is small: 2 for Mixtral, 8 for Qwen3-MoE and DeepSeek-V3).
  for (int64_t j = 0; j < r.k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken = taken || experts[i] == e;
      if (!taken && (best < 0 || select[e] > select[best])) best = static_cast<int32_t>(e);
    }
    experts[j] = best;
    weights[j] = probs[best];
  }
  if (r.norm) {
    float chosen = 0.0f;
    for (int64_t j = 0; j < r.k; ++j) chosen += weights[j];
    chosen = std::max(chosen, 6.103515625e-5f);
    for (int64_t j = 0; j < r.k; ++j) weights[j] /= chosen;
  }
  if (r.scale != 1.0f) {
    for (int64_t j = 0; j < r.k; ++j) weights[j] *= r.scale;
  }
}

void RouteTopK(const float* logits, int64_t n_experts, int64_t top_k, float* probs,
               int32_t* experts, float* weights) {
  Routing r;
  r.n_experts = n_experts;
  r.k = top_k;
  Route(r, logits, probs, probs, experts, weights);
}

void ScaleBySharedGate(const float* gate_inp, const float* x, int64_t n, int64_t dim, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dot += gate_inp[d] * xi[d];
    const float g = 1.0f / (1.0f + std::exp(-dot));
    float* oi = out + i * dim;
    for (int64_t d = 0; d < dim; ++d) oi[d] *= g;
  }
}

void MoeScratch::Allocate(const HParams& hp, int64_t max_batch) {
  const int64_t kk = hp.n_experts_used;
  const int64_t m = max_batch * kk;
  logits = base::AlignedBuffer<float>(max_batch * hp.n_experts);
  select = base::AlignedBuffer<float>(hp.n_experts);
  chosen.assign(static_cast<size_t>(m), 0);
  weight.assign(static_cast<size_t>(m), 0.0f);
  group_begin.assign(static_cast<size_t>(hp.n_experts + 1), 0);
  row_of.assign(static_cast<size_t>(m), 0);
  xg = base::AlignedBuffer<float>(m * hp.dim);
  gate = base::AlignedBuffer<float>(m * hp.expert_ffn_dim);
  up = base::AlignedBuffer<float>(m * hp.expert_ffn_dim);
  yg = base::AlignedBuffer<float>(m * hp.dim);
  held.reserve(static_cast<size_t>(hp.n_experts));
  w_list.reserve(static_cast<size_t>(2 * hp.n_experts));
  x_rows.reserve(static_cast<size_t>(2 * hp.n_experts));
  n_list.reserve(static_cast<size_t>(2 * hp.n_experts));
  y_list.reserve(static_cast<size_t>(2 * hp.n_experts));
  if (hp.n_shared_experts > 0) {
    const int64_t sf = hp.shared_ffn();
    sh_gate = base::AlignedBuffer<float>(max_batch * sf);
    sh_up = base::AlignedBuffer<float>(max_batch * sf);
    sh_out = base::AlignedBuffer<float>(max_batch * hp.dim);
  }
}

Status MoeForward(const HParams& hp, const LayerWeights& L, const float* x, int64_t n, float* y,
                  MoeScratch& s, kernels::Workspace& ws, base::ThreadPool& pool,
                  const ExpertRows* rows, Collective* collective) {
  const int64_t dim = hp.dim;
  const int64_t n_exp = hp.n_experts;
  const int64_t kk = hp.n_experts_used;
  const int64_t ffn_all = hp.expert_ffn_dim;
  // This rank's rows of every expert: gate and up [ffn_begin, +ffn), down [dim_begin, +dim_part).
  const bool parted = rows != nullptr && (rows->ffn != ffn_all || rows->dim != dim);
  const int64_t ffn = parted ? rows->ffn : ffn_all;
  const int64_t ffn_begin = parted ? rows->ffn_begin : 0;
  const int64_t dim_part = parted ? rows->dim : dim;
  const int64_t dim_begin = parted ? rows->dim_begin : 0;
  if (parted && collective == nullptr) {
    return FailedPreconditionError("moe: experts split into row parts need the group's collective");
  }

  // The shared experts first: y may be x.
  const bool shared = L.shexp_gate.data != nullptr;
  if (shared) {
    const int64_t sf = L.shexp_gate.rows;  // this rank's columns of hp.shared_ffn()
    if (L.shexp_gate.type == L.shexp_up.type) {
      const k::MatrixView ws2[] = {L.shexp_gate, L.shexp_up};
      float* const ys[] = {s.sh_gate.data(), s.sh_up.data()};
      k::MatMulMulti(ws2, x, n, ys, ws, pool);
    } else {
      k::MatMul(L.shexp_gate, x, n, s.sh_gate.data(), ws, pool);
      k::MatMul(L.shexp_up, x, n, s.sh_up.data(), ws, pool);
    }
    k::SwiGlu(s.sh_gate.data(), s.sh_up.data(), n * sf, s.sh_gate.data());
    k::MatMul(L.shexp_down, s.sh_gate.data(), n, s.sh_out.data(), ws, pool);
    if (L.shexp_gate_inp != nullptr)
      ScaleBySharedGate(L.shexp_gate_inp, x, n, dim, s.sh_out.data());
  }

  // Route every token.
  k::MatMul(L.router, x, n, s.logits.data(), ws, pool);
  const Routing routing = RoutingOf(hp, L.expert_bias);
  for (int64_t i = 0; i < n; ++i) {
    float* row = s.logits.data() + i * n_exp;
    Route(routing, row, row, s.select.data(), s.chosen.data() + i * kk, s.weight.data() + i * kk);
  }

  // Group the (token, choice) pairs by expert (a counting sort; tokens stay in order within an
  // expert's group) and gather their inputs.  A single token (decode) needs no gathering: every
  // expert reads row 0 of x.
  std::fill(s.group_begin.begin(), s.group_begin.end(), 0);
  for (int64_t p = 0; p < n * kk; ++p) ++s.group_begin[static_cast<size_t>(s.chosen[p]) + 1];
  for (int64_t e = 0; e < n_exp; ++e) s.group_begin[e + 1] += s.group_begin[e];
  // group_begin[e] is used as expert e's fill cursor, then restored.
  for (int64_t p = 0; p < n * kk; ++p) {
    const int64_t r = s.group_begin[static_cast<size_t>(s.chosen[p])]++;
    s.row_of[p] = r;
    if (n > 1 && L.experts[static_cast<size_t>(s.chosen[p])].gate.data != nullptr)
      std::copy_n(x + (p / kk) * dim, dim, s.xg.data() + r * dim);
  }
  for (int64_t e = n_exp; e > 0; --e) s.group_begin[e] = s.group_begin[e - 1];
  s.group_begin[0] = 0;

  // The experts some token chose, each once over its group (an expert this process does not hold,
  // data null, is skipped and contributes nothing): the gate and up products of all of them in
  // one pass over the pool, the SwiGLU, then all the down products in a second pass.
  s.held.clear();
  for (int64_t e = 0; e < n_exp; ++e) {
    if (s.group_begin[e + 1] > s.group_begin[e] && L.experts[static_cast<size_t>(e)].gate.data)
      s.held.push_back(static_cast<int32_t>(e));
  }
  const size_t h = s.held.size();
  const float* xs = n > 1 ? s.xg.data() : x;
  const int64_t m = n > 1 ? n * kk : 1;  // rows of xs
  s.w_list.clear();
  s.x_rows.clear();
  s.n_list.clear();
  s.y_list.clear();
  auto add = [&](const k::MatrixView& w, int64_t x_row, int64_t count, float* out) {
    s.w_list.push_back(w);
    s.x_rows.push_back(x_row);
    s.n_list.push_back(count);
    s.y_list.push_back(out);
  };
  auto group = [&](int32_t e) {
    return std::pair{s.group_begin[e], s.group_begin[e + 1] - s.group_begin[e]};
  };
  for (int pass = 0; pass < 2; ++pass) {  // gates, then ups
    for (size_t i = 0; i < h; ++i) {
      const auto [r0, count] = group(s.held[i]);
      const LayerWeights::Expert& ex = L.experts[static_cast<size_t>(s.held[i])];
      add(pass == 0 ? ex.gate : ex.up, n > 1 ? r0 : 0, count,
          (pass == 0 ? s.gate.data() : s.up.data()) + r0 * ffn);
    }
  }
  k::MatMulGrouped(s.w_list, xs, m, s.x_rows, s.n_list, s.y_list, ws, pool);
  s.w_list.clear();
  s.x_rows.clear();
  s.n_list.clear();
  s.y_list.clear();
  for (size_t i = 0; i < h; ++i) {
    const auto [r0, count] = group(s.held[i]);
    float* ge = s.gate.data() + r0 * ffn;
    k::SwiGlu(ge, s.up.data() + r0 * ffn, count * ffn, ge);
    add(L.experts[static_cast<size_t>(s.held[i])].down, r0, count, s.yg.data() + r0 * dim_part);
  }
  const float* act = s.gate.data();  // (n * kk, ffn_all) the down products' input
  if (parted) {
    // Gather the whole activations: this rank's columns of each row, zeros elsewhere, summed over
    // the group (x + 0 is x: exact).  Every rank holds every expert, so the rows are the same.
    const int64_t m_rows = n * kk;
    std::fill_n(s.up.data(), m_rows * ffn_all, 0.0f);
    for (int64_t r = 0; r < m_rows; ++r) {
      std::copy_n(s.gate.data() + r * ffn, ffn, s.up.data() + r * ffn_all + ffn_begin);
    }
    LOOM_RETURN_IF_ERROR(collective->AllReduceSum(s.up.data(), m_rows * ffn_all));
    act = s.up.data();
  }
  k::MatMulGrouped(s.w_list, act, n * kk, s.x_rows, s.n_list, s.y_list, ws, pool);

  // Weighted sum in each token's choice order (as llama.cpp adds its weighted experts), over the
  // experts this rank holds (all of them but under expert parallelism).
  // By row parts, this rank's rows [dim_begin, +dim_part) of y, zeros elsewhere.
  for (int64_t i = 0; i < n; ++i) {
    float* row = y + i * dim;
    float* out = row + dim_begin;
    bool first = true;
    for (int64_t j = 0; j < kk; ++j) {
      if (L.experts[static_cast<size_t>(s.chosen[i * kk + j])].gate.data == nullptr) continue;
      const float w = s.weight[i * kk + j];
      const float* ye = s.yg.data() + s.row_of[i * kk + j] * dim_part;
      if (first) {
        for (int64_t d = 0; d < dim_part; ++d) out[d] = w * ye[d];
      } else {
        for (int64_t d = 0; d < dim_part; ++d) out[d] += w * ye[d];
      }
      first = false;
    }
    if (first) std::fill_n(out, dim_part, 0.0f);
    if (parted) {
      std::fill(row, out, 0.0f);
      std::fill(out + dim_part, row + dim, 0.0f);
    }
  }
  if (shared) k::Add(s.sh_out.data(), n * dim, y);
  return OkStatus();
}

}  // namespace loom::model
