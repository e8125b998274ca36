#include "loom/model/kv_cache.h"

#include <algorithm>
#include <new>

namespace loom::model {

StatusOr<KvCache> KvCache::Create(int64_t n_layers, int64_t n_slots, int64_t ctx, int64_t kv_dim,
                                  int64_t v_dim, KvType type, int64_t head_dim) {
  if (v_dim < 0) v_dim = kv_dim;
  if (n_layers <= 0 || n_slots <= 0 || ctx <= 0 || kv_dim <= 0) {
    return InvalidArgumentError("kv cache: bad shape (layers ", n_layers, ", slots ", n_slots,
                                ", ctx ", ctx, ", kv_dim ", kv_dim, ")");
  }
  KvCache cache;
  cache.n_layers_ = n_layers;
  cache.n_slots_ = n_slots;
  cache.ctx_ = ctx;
  cache.kv_dim_ = kv_dim;
  cache.v_dim_ = v_dim;
  cache.type_ = type;
  if (type == KvType::kQ8_0) {
    if (v_dim == 0) {
      return InvalidArgumentError(
          "kv cache: q8_0 is for caches of keys and values; a latent "
          "attention cache (no value rows) stays f32");
    }
    if (!kernels::KvQ8Supports(head_dim) || kv_dim % head_dim != 0 || v_dim % head_dim != 0) {
      return InvalidArgumentError(
          "kv cache: q8_0 needs heads of under 32 or a multiple of 32 "
          "values (head_dim ",
          head_dim, ", kv_dim ", kv_dim, "); use --kv-type f32");
    }
    cache.block_ = kernels::KvBlock(head_dim);
  }
  constexpr int64_t kB = kernels::kAttendKeyBlock;
  cache.tiled_ = v_dim > 0;
  cache.tiles_ = (ctx + kB - 1) / kB;
  const int64_t key_positions = cache.tiled_ ? cache.tiles_ * kB : ctx;
  const int64_t elems = n_layers * n_slots * key_positions * kv_dim;
  const int64_t v_elems = n_layers * n_slots * ctx * v_dim;
  try {
    if (type == KvType::kF32) {
      cache.k_ = base::AlignedBuffer<float>(elems);
      if (v_elems > 0) cache.v_ = base::AlignedBuffer<float>(v_elems);
    } else {
      cache.kq_ = base::AlignedBuffer<int8_t>(elems);
      cache.kd_ = base::AlignedBuffer<float>(elems / cache.block_);
      cache.row_q_.resize(static_cast<size_t>(kv_dim));
      cache.row_d_.resize(static_cast<size_t>(kv_dim / cache.block_));
      if (v_elems > 0) {
        cache.vq_ = base::AlignedBuffer<int8_t>(v_elems);
        cache.vd_ = base::AlignedBuffer<float>(v_elems / cache.block_);
      }
    }
  } catch (const std::bad_alloc&) {
    const int64_t per = type == KvType::kF32 ? 4 : 1;
    return ResourceExhaustedError("kv cache: cannot allocate ", (elems + v_elems) * per / (1 << 20),
                                  " MiB (", kernels::KvTypeName(type), ") for ", n_slots,
                                  " sequence(s) of ", ctx,
                                  " positions; lower the context length or use --kv-type q8_0");
  }
  return cache;
}

int64_t KvCache::bytes_per_position() const {
  if (type_ == KvType::kF32) return (kv_dim_ + v_dim_) * static_cast<int64_t>(sizeof(float));
  return (kv_dim_ + v_dim_) + (kv_dim_ + v_dim_) / block_ * static_cast<int64_t>(sizeof(float));
}

void KvCache::Store(int64_t layer, int64_t slot, int64_t pos, const float* key,
                    const float* value) {
  constexpr int64_t kB = kernels::kAttendKeyBlock;
  const int64_t seq = layer * n_slots_ + slot;
  const int64_t row = seq * ctx_ + pos;
  // Tiled keys: value e of position pos at tile (seq, pos / kB), row e, column pos % kB.
  const int64_t tile = seq * tiles_ + pos / kB, col = pos % kB;
  if (type_ == KvType::kF32) {
    if (tiled_) {
      float* t = k_.data() + tile * kv_dim_ * kB + col;
      for (int64_t e = 0; e < kv_dim_; ++e) t[e * kB] = key[e];
    } else {
      std::copy_n(key, kv_dim_, k_.data() + row * kv_dim_);
    }
    if (v_dim_ > 0) std::copy_n(value, v_dim_, v_.data() + row * v_dim_);
    return;
  }
  const int64_t n_scales = kv_dim_ / block_;
  kernels::QuantizeKvRow(key, kv_dim_, block_, row_q_.data(), row_d_.data());
  int8_t* tq = kq_.data() + tile * kv_dim_ * kB + col;
  float* td = kd_.data() + tile * n_scales * kB + col;
  for (int64_t e = 0; e < kv_dim_; ++e) tq[e * kB] = row_q_[static_cast<size_t>(e)];
  for (int64_t b = 0; b < n_scales; ++b) td[b * kB] = row_d_[static_cast<size_t>(b)];
  kernels::QuantizeKvRow(value, v_dim_, block_, vq_.data() + row * v_dim_,
                         vd_.data() + row * (v_dim_ / block_));
}

kernels::KvHeadRows KvCache::Rows(const base::AlignedBuffer<float>& f,
                                  const base::AlignedBuffer<int8_t>& q,
                                  const base::AlignedBuffer<float>& d, int64_t width, int64_t layer,
                                  int64_t slot, int64_t first) const {
  kernels::KvHeadRows r;
  r.type = type_;
  r.stride = width;
  const int64_t base = (layer * n_slots_ + slot) * ctx_;
  if (type_ == KvType::kF32) {
    r.f32 = f.data() + base * width + first;
  } else {
    r.block = block_;
    r.d_stride = width / block_;
    r.q = q.data() + base * width + first;
    r.d = d.data() + base * r.d_stride + first / block_;
  }
  return r;
}

kernels::KvHeadRows KvCache::KeyRows(int64_t layer, int64_t slot, int64_t first) const {
  if (!tiled_) return Rows(k_, kq_, kd_, kv_dim_, layer, slot, first);
  constexpr int64_t kB = kernels::kAttendKeyBlock;
  kernels::KvHeadRows r;
  r.type = type_;
  r.tiled = true;
  r.stride = kv_dim_ * kB;
  const int64_t tile0 = (layer * n_slots_ + slot) * tiles_;
  if (type_ == KvType::kF32) {
    r.f32 = k_.data() + tile0 * r.stride + first * kB;
  } else {
    r.block = block_;
    r.d_stride = kv_dim_ / block_ * kB;
    r.q = kq_.data() + tile0 * r.stride + first * kB;
    r.d = kd_.data() + tile0 * r.d_stride + first / block_ * kB;
  }
  return r;
}

kernels::KvHeadRows KvCache::ValueRows(int64_t layer, int64_t slot, int64_t first) const {
  return Rows(v_, vq_, vd_, v_dim_, layer, slot, first);
}

}  // namespace loom::model
