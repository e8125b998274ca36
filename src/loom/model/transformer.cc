#include "loom/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "loom/kernels/attention.h"
#include "loom/kernels/ops.h"
#include "loom/model/arch.h"

namespace loom::model {

namespace k = loom::kernels;

namespace {

// Rows of one sequence attended together (a prompt tile): its key blocks are read once for them.
constexpr int64_t kAttendTile = 16;

int64_t AttendQueriesPerCall(const HParams& hp) {
  return kAttendTile * std::max<int64_t>(1, hp.n_heads / std::max<int64_t>(1, hp.n_kv_heads));
}

StatusOr<LocalDims> ResolveShard(const ModelFile& file, const ShardSpec& s) {
  const HParams& hp = file.hparams;
  LocalDims d;
  d.head_dim = hp.head_dim;
  d.layer_begin = s.layer_begin;
  d.layer_end = s.layer_end < 0 ? hp.n_layers : s.layer_end;
  d.head_begin = s.head_begin;
  d.n_heads = s.n_heads < 0 ? hp.n_heads - s.head_begin : s.n_heads;
  d.ffn_dim = s.ffn_dim < 0 ? hp.ffn_dim - s.ffn_begin : s.ffn_dim;
  d.embed = s.embed;
  d.head = s.head;
  d.vocab_begin = s.vocab_begin;
  d.vocab_count = s.vocab_count < 0 ? hp.vocab_size - s.vocab_begin : s.vocab_count;
  if (d.vocab_begin < 0 || d.vocab_count <= 0 || d.vocab_begin + d.vocab_count > hp.vocab_size) {
    return InvalidArgumentError(file.path, ": shard vocabulary rows [", d.vocab_begin, ", ",
                                d.vocab_begin + d.vocab_count, ") outside the model's ",
                                hp.vocab_size);
  }
  if (d.layer_begin < 0 || d.layer_begin > d.layer_end || d.layer_end > hp.n_layers) {
    return InvalidArgumentError(file.path, ": shard layers [", d.layer_begin, ", ", d.layer_end,
                                ") outside the model's ", hp.n_layers, " layers");
  }
  if (d.head_begin < 0 || d.n_heads <= 0 || d.head_begin + d.n_heads > hp.n_heads) {
    return InvalidArgumentError(file.path, ": shard heads [", d.head_begin, ", ",
                                d.head_begin + d.n_heads, ") outside the model's ", hp.n_heads,
                                " heads");
  }
  if (s.ffn_begin < 0 || d.ffn_dim <= 0 || s.ffn_begin + d.ffn_dim > hp.ffn_dim) {
    return InvalidArgumentError(file.path, ": shard feed-forward columns [", s.ffn_begin, ", ",
                                s.ffn_begin + d.ffn_dim, ") outside the model's ", hp.ffn_dim);
  }
  d.ffn_begin = s.ffn_begin;
  d.expert_begin = s.expert_begin;
  d.n_experts = s.n_experts < 0 ? hp.n_experts - s.expert_begin : s.n_experts;
  if (hp.is_moe() && (d.expert_begin < 0 || d.n_experts <= 0 ||
                      d.expert_begin + d.n_experts > hp.n_experts)) {
    return InvalidArgumentError(file.path, ": shard experts [", d.expert_begin, ", ",
                                d.expert_begin + d.n_experts, ") outside the model's ",
                                hp.n_experts);
  }
  d.expert_part = s.expert_part;
  d.expert_parts = s.expert_parts;
  if (hp.is_moe() && (d.expert_parts < 1 || d.expert_part < 0 || d.expert_part >= d.expert_parts ||
                      d.expert_parts > std::min(hp.expert_ffn_dim, hp.dim) ||
                      (d.expert_parts > 1 && d.n_experts != hp.n_experts))) {
    return InvalidArgumentError(file.path, ": shard expert row part ", d.expert_part, " of ",
                                d.expert_parts, " (of ", d.n_experts, " experts held) invalid: ",
                                "parts split every expert of ", hp.expert_ffn_dim, " and ", hp.dim,
                                " rows, all ", hp.n_experts, " experts held");
  }
  const int64_t shared = hp.n_shared_experts > 0 ? hp.shared_ffn() : 0;
  d.shared_begin = s.shared_begin;
  d.shared_dim = shared == 0 ? 0 : s.shared_dim < 0 ? shared - s.shared_begin : s.shared_dim;
  if (shared > 0 && (d.shared_begin < 0 || d.shared_dim <= 0 ||
                     d.shared_begin + d.shared_dim > shared)) {
    return InvalidArgumentError(file.path, ": shard shared-expert columns [", d.shared_begin, ", ",
                                d.shared_begin + d.shared_dim, ") outside the model's ", shared);
  }
  // A mixture of experts splits its heads and columns only together with its experts and the
  // other way round (expert parallelism, parallel/plan.h): the ranks' outputs are summed.
  const bool sliced = d.n_heads != hp.n_heads || d.ffn_dim != hp.ffn_dim || d.shared_dim != shared;
  if (hp.is_moe() && sliced != (d.n_experts != hp.n_experts || d.expert_parts > 1)) {
    return UnimplementedError(file.path,
                              ": tensor parallelism of mixture-of-experts layers is not supported "
                              "yet; use --pp, or --ep to split the experts across the ranks");
  }
  const int64_t group = hp.n_heads / hp.n_kv_heads;
  d.kv_head_begin = d.head_begin / group;
  d.n_kv_heads = (d.head_begin + d.n_heads - 1) / group + 1 - d.kv_head_begin;
  return d;
}

}  // namespace

StatusOr<TransformerWeights> BindWeights(const ModelFile& file, const ShardSpec& shard) {
  const ArchInfo* arch = FindArch(file.hparams.arch);
  if (arch == nullptr) {
    return UnimplementedError(file.path, ": architecture '", file.hparams.arch,
                              "' is not supported");
  }
  TransformerWeights w;
  w.hp = file.hparams;
  LOOM_ASSIGN_OR_RETURN(w.local, ResolveShard(file, shard));
  LOOM_RETURN_IF_ERROR(arch->bind(file, &w));
  for (int64_t l = w.local.layer_begin; l < w.local.layer_end; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l - w.local.layer_begin)];
    if (w.hp.is_moe_layer(l) && L.router.data == nullptr) {
      return UnimplementedError(file.path, ": architecture '", file.hparams.arch,
                                "' with experts (mixture of experts) is not supported");
    }
  }
  return w;
}

StatusOr<std::unique_ptr<Transformer>> Transformer::Create(const TransformerWeights& weights,
                                                           const TransformerOptions& options,
                                                           base::ThreadPool& pool) {
  const HParams& hp = weights.hp;
  std::unique_ptr<Transformer> t(new Transformer(weights, pool));
  t->ctx_ = options.context > 0 ? options.context : hp.context_length;
  if (t->ctx_ <= 0) return InvalidArgumentError("transformer: context length must be positive");
  if (options.max_batch <= 0 || options.n_slots <= 0) {
    return InvalidArgumentError("transformer: max_batch and n_slots must be positive");
  }
  t->max_batch_ = options.max_batch;
  const bool deepseek2 = hp.arch == "deepseek2";
  t->rope_ =
      RopeTable(hp.is_mla() ? hp.rope_dim : hp.head_dim, hp.rope_theta, hp.rope_scaling, deepseek2);
  const LocalDims& d = weights.local;
  // Latent attention: the heads' outputs are v_head_dim wide; the cache holds one row of latent
  // and rope key per position.
  const int64_t q_dim = hp.is_mla() ? hp.n_heads * std::max(hp.head_dim, hp.v_head_dim) : d.q_dim();
  const int64_t kv_dim = d.kv_dim();
  if (hp.is_mla() && options.kv_type != KvType::kF32) {
    return InvalidArgumentError("transformer: --kv-type ", k::KvTypeName(options.kv_type),
                                " is not supported for latent attention (", hp.arch,
                                "): its cache holds the latent in f32; use --kv-type f32");
  }
  LOOM_ASSIGN_OR_RETURN(
      t->cache_, hp.is_mla() ? KvCache::Create(std::max<int64_t>(1, d.n_layers()), options.n_slots,
                                               t->ctx_, hp.kv_lora_rank + hp.rope_dim, 0)
                             : KvCache::Create(std::max<int64_t>(1, d.n_layers()), options.n_slots,
                                               t->ctx_, kv_dim, -1, options.kv_type, hp.head_dim));
  const int64_t n = t->max_batch_;
  try {
    t->x_ = base::AlignedBuffer<float>(n * hp.dim);
    t->xb_ = base::AlignedBuffer<float>(n * hp.dim);
    t->q_ = base::AlignedBuffer<float>(n * q_dim);
    t->k_ = base::AlignedBuffer<float>(n * kv_dim);
    t->v_ = base::AlignedBuffer<float>(n * kv_dim);
    t->att_ = base::AlignedBuffer<float>(n * q_dim);
    if (hp.is_moe()) t->moe_.Allocate(hp, n);
    if (hp.is_mla()) t->mla_.Allocate(hp, n, pool.size(), t->ctx_);
    if (!hp.is_moe() || hp.n_dense_layers > 0) {
      t->hb_ = base::AlignedBuffer<float>(n * d.ffn_dim);
      t->hb2_ = base::AlignedBuffer<float>(n * d.ffn_dim);
    }
    t->cos_sin_ = base::AlignedBuffer<float>(n * hp.head_dim);
    const int64_t per_call = AttendQueriesPerCall(hp);
    t->attend_queries_.resize(static_cast<size_t>(pool.size() * per_call));
    t->attend_scratch_ =
        base::AlignedBuffer<float>(pool.size() * k::AttendScratchFloats(per_call, hp.head_dim));
    t->tile_begin_.resize(static_cast<size_t>(n + 1));
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("transformer: cannot allocate scratch for a batch of ", n,
                                  " tokens");
  }
  return t;
}

Status Transformer::Validate(const Batch& b) const {
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  if (n == 0) return InvalidArgumentError("forward: empty batch");
  if (n > max_batch_) {
    return InvalidArgumentError("forward: batch of ", n, " tokens exceeds max_batch ", max_batch_);
  }
  if (static_cast<int64_t>(b.positions.size()) != n || static_cast<int64_t>(b.slots.size()) != n) {
    return InvalidArgumentError("forward: tokens, positions and slots differ in length");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= w_.hp.vocab_size) {
      return OutOfRangeError("forward: token id ", b.tokens[i], " outside the vocabulary (",
                             w_.hp.vocab_size, ")");
    }
    if (b.positions[i] < 0 || b.positions[i] >= ctx_) {
      return OutOfRangeError("forward: position ", b.positions[i], " outside the context (", ctx_,
                             ")");
    }
    if (b.slots[i] < 0 || b.slots[i] >= cache_.n_slots()) {
      return OutOfRangeError("forward: slot ", b.slots[i], " outside 0..", cache_.n_slots() - 1);
    }
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || r >= n) return OutOfRangeError("forward: logit row ", r, " outside the batch");
  }
  return OkStatus();
}

Status Transformer::Forward(const Batch& batch, float* logits) {
  LOOM_RETURN_IF_ERROR(Embed(batch.tokens));
  LOOM_RETURN_IF_ERROR(Layers(batch));
  return Logits(batch.logit_rows, logits);
}

Status Transformer::Embed(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (!w_.local.embed) return FailedPreconditionError("embed: this shard holds no embedding");
  if (n > max_batch_) return InvalidArgumentError("embed: batch exceeds max_batch");
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= w_.hp.vocab_size) {
      return OutOfRangeError("embed: token id ", tokens[i], " outside the vocabulary");
    }
    k::DequantizeRow(w_.token_embd, tokens[i], x_.data() + i * w_.hp.dim);
  }
  return OkStatus();
}

Status Transformer::Layers(const Batch& batch) {
  LOOM_RETURN_IF_ERROR(Validate(batch));
  const HParams& hp = w_.hp;
  const LocalDims& d = w_.local;
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t dim = hp.dim;
  const int64_t hd = hp.head_dim;  // cos_sin_'s stride (latent attention uses rope_dim of it)
  const int64_t ffn = d.ffn_dim;
  for (int64_t i = 0; i < n; ++i) rope_.CosSin(batch.positions[i], cos_sin_.data() + i * hd);
  const ExpertRows expert_rows = ExpertRowsOf(hp, d);

  for (int64_t l = 0; l < d.n_layers(); ++l) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    // Attention block.
    for (int64_t i = 0; i < n; ++i) {
      k::RmsNorm(x_.data() + i * dim, L.attn_norm, dim, hp.rms_eps, xb_.data() + i * dim);
    }
    if (hp.is_mla()) {
      MlaForward(hp, L, d.n_heads, batch, xb_.data(), cos_sin_.data(), hd, cache_, l, att_.data(),
                 mla_, ws_, pool_);
    } else {
      AttentionBlock(batch, l);
    }
    k::MatMul(L.wo, att_.data(), n, xb_.data(), ws_, pool_);
    if (collective_ != nullptr)
      LOOM_RETURN_IF_ERROR(collective_->AllReduceSum(xb_.data(), n * dim));
    k::Add(xb_.data(), n * dim, x_.data());

    // Feed-forward block.
    for (int64_t i = 0; i < n; ++i) {
      k::RmsNorm(x_.data() + i * dim, L.ffn_norm, dim, hp.rms_eps, xb_.data() + i * dim);
    }
    if (hp.is_moe_layer(d.layer_begin + l)) {
      LOOM_RETURN_IF_ERROR(
          MoeForward(hp, L, xb_.data(), n, xb_.data(), moe_, ws_, pool_, &expert_rows, collective_));
    } else {
      if (L.w_gate.type == L.w_up.type) {
        const k::MatrixView ws[] = {L.w_gate, L.w_up};
        float* const ys[] = {hb_.data(), hb2_.data()};
        k::MatMulMulti(ws, xb_.data(), n, ys, ws_, pool_);
      } else {
        k::MatMul(L.w_gate, xb_.data(), n, hb_.data(), ws_, pool_);
        k::MatMul(L.w_up, xb_.data(), n, hb2_.data(), ws_, pool_);
      }
      k::SwiGlu(hb_.data(), hb2_.data(), n * ffn, hb_.data());
      k::MatMul(L.w_down, hb_.data(), n, xb_.data(), ws_, pool_);
    }
    if (collective_ != nullptr)
      LOOM_RETURN_IF_ERROR(collective_->AllReduceSum(xb_.data(), n * dim));
    k::Add(xb_.data(), n * dim, x_.data());
  }
  return OkStatus();
}

void Transformer::AttentionBlock(const Batch& batch, int64_t l) {
  const HParams& hp = w_.hp;
  const LocalDims& d = w_.local;
  const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t hd = hp.head_dim;
  const int64_t q_dim = d.q_dim();
  const int64_t kv_dim = d.kv_dim();
  if (L.wq.type == L.wk.type && L.wk.type == L.wv.type) {
    const k::MatrixView ws[] = {L.wq, L.wk, L.wv};
    float* const ys[] = {q_.data(), k_.data(), v_.data()};
    k::MatMulMulti(ws, xb_.data(), n, ys, ws_, pool_);
  } else {
    k::MatMul(L.wq, xb_.data(), n, q_.data(), ws_, pool_);
    k::MatMul(L.wk, xb_.data(), n, k_.data(), ws_, pool_);
    k::MatMul(L.wv, xb_.data(), n, v_.data(), ws_, pool_);
  }
  for (int64_t i = 0; i < n; ++i) {
    float* q = q_.data() + i * q_dim;
    float* kk = k_.data() + i * kv_dim;
    if (L.bq != nullptr) k::Add(L.bq, q_dim, q);
    if (L.bk != nullptr) k::Add(L.bk, kv_dim, kk);
    if (L.bv != nullptr) k::Add(L.bv, kv_dim, v_.data() + i * kv_dim);
    if (L.q_norm != nullptr) {
      for (int64_t h = 0; h < d.n_heads; ++h) {
        k::RmsNorm(q + h * hd, L.q_norm, hd, hp.rms_eps, q + h * hd);
      }
    }
    if (L.k_norm != nullptr) {
      for (int64_t h = 0; h < d.n_kv_heads; ++h) {
        k::RmsNorm(kk + h * hd, L.k_norm, hd, hp.rms_eps, kk + h * hd);
      }
    }
    const float* cs = cos_sin_.data() + i * hd;
    k::Rope(q, d.n_heads, hd, cs, hp.rope_style);
    k::Rope(kk, d.n_kv_heads, hd, cs, hp.rope_style);
    // Store this position's key and value.
    const int64_t slot = batch.slots[i];
    const int64_t pos = batch.positions[i];
    cache_.Store(l, slot, pos, kk, v_.data() + i * kv_dim);
  }
  Attention(batch, l);
}

void Transformer::Attention(const Batch& batch, int64_t layer) {
  const HParams& hp = w_.hp;
  const LocalDims& d = w_.local;
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t hd = hp.head_dim;
  const int64_t q_dim = d.q_dim();
  const int64_t group = hp.n_heads / hp.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Tiles: runs of up to kAttendTile consecutive rows of one slot.
  int64_t n_tiles = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || batch.slots[i] != batch.slots[i - 1] ||
        i - tile_begin_[n_tiles - 1] == kAttendTile) {
      tile_begin_[n_tiles++] = static_cast<int32_t>(i);
    }
  }
  tile_begin_[n_tiles] = static_cast<int32_t>(n);
  // One item: a tile against one kv head for a part of the query heads it serves.  The heads are
  // split into parts only when there are fewer (tile, kv head) pairs than threads (decoding a few
  // kv heads); a query's result does not depend on which others share its call.
  const int threads = pool_.size();
  const int64_t pairs = n_tiles * d.n_kv_heads;
  const int64_t parts = std::clamp<int64_t>((threads + pairs - 1) / pairs, 1, group);
  const int64_t items = pairs * parts;
  const int64_t per_call = AttendQueriesPerCall(hp);
  const int64_t scratch_floats = k::AttendScratchFloats(per_call, hd);
  auto work = [&](int64_t first, int64_t stride, int t) {
    k::AttendQuery* queries = attend_queries_.data() + t * per_call;
    float* scratch = attend_scratch_.data() + t * scratch_floats;
    for (int64_t item = first; item < items; item += stride) {
      const int64_t tile = item / (d.n_kv_heads * parts);
      const int64_t kvh = item / parts % d.n_kv_heads;
      const int64_t part = item % parts;
      // The shard's query heads that share kv head kvh (GQA), and this part of them.
      const int64_t h_lo = std::max<int64_t>(0, (d.kv_head_begin + kvh) * group - d.head_begin);
      const int64_t h_hi =
          std::min<int64_t>(d.n_heads, (d.kv_head_begin + kvh + 1) * group - d.head_begin);
      const int64_t h0 = h_lo + (h_hi - h_lo) * part / parts;
      const int64_t h1 = h_lo + (h_hi - h_lo) * (part + 1) / parts;
      if (h0 >= h1) continue;
      int64_t nq = 0;
      for (int64_t i = tile_begin_[tile]; i < tile_begin_[tile + 1]; ++i) {
        for (int64_t h = h0; h < h1; ++h) {
          queries[nq++] = {q_.data() + i * q_dim + h * hd, batch.positions[i] + 1,
                           att_.data() + i * q_dim + h * hd};
        }
      }
      const int64_t slot = batch.slots[tile_begin_[tile]];
      k::AttendMany(queries, nq, cache_.KeyRows(layer, slot, kvh * hd),
                    cache_.ValueRows(layer, slot, kvh * hd), hd, scale, scratch);
    }
  };
  if (threads == 1 || items == 1) {
    work(0, 1, 0);
    return;
  }
  // Items are dealt round-robin: later tiles of a prompt attend to more positions, so contiguous
  // ranges would leave one thread with most of the work.
  pool_.Run([&](int t) { work(t, threads, t); });
}

Status Transformer::Logits(std::span<const int32_t> rows, float* logits) {
  const int64_t dim = w_.hp.dim;
  const int64_t m = static_cast<int64_t>(rows.size());
  if (m == 0) return OkStatus();
  if (!w_.local.head) return FailedPreconditionError("logits: this shard holds no output head");
  // Normalize the wanted rows into xb_ (contiguous) and project them onto the vocabulary.
  for (int64_t j = 0; j < m; ++j) {
    k::RmsNorm(x_.data() + rows[j] * dim, w_.output_norm, dim, w_.hp.rms_eps, xb_.data() + j * dim);
  }
  k::MatMul(w_.output, xb_.data(), m, logits, ws_, pool_);
  return OkStatus();
}

}  // namespace loom::model
