// Keys and values of past positions, per layer and per sequence slot.  Allocated once for a session
// (n_slots sequences of up to ctx positions); the decode loop writes into it without allocating.
// Rows are f32, or Q8_0 (int8 values with an f32 scale per block of kernels::KvBlock(head_dim)
// values within each head: 3.6x smaller at head_dim 64 and up), which attention reads directly.
// Multi-head latent attention (mla.h) keeps one row of kv_dim floats per position (the latent and
// the rope key) and no value rows: v_dim 0.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"
#include "loom/kernels/attention.h"

namespace loom::model {

using kernels::KvType;

class KvCache {
 public:
  KvCache() = default;
  // Fails with ResourceExhausted (with the numbers) when the memory is not available, and with
  // InvalidArgument when kQ8_0 cannot hold rows of heads of head_dim (kernels::KvQ8Supports).
  // v_dim < 0: the same as kv_dim.  head_dim matters for kQ8_0 only (its blocks lie in heads).
  static StatusOr<KvCache> Create(int64_t n_layers, int64_t n_slots, int64_t ctx, int64_t kv_dim,
                                  int64_t v_dim = -1, KvType type = KvType::kF32,
                                  int64_t head_dim = 0);

  int64_t n_layers() const { return n_layers_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t ctx() const { return ctx_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t v_dim() const { return v_dim_; }
  KvType type() const { return type_; }
  int64_t bytes() const {
    return (k_.size() + v_.size() + kd_.size() + vd_.size()) * static_cast<int64_t>(sizeof(float)) +
           kq_.size() + vq_.size();
  }
  // Bytes of one position's key and value rows in one layer (what attention reads per position).
  int64_t bytes_per_position() const;

  // The (ctx, kv_dim) key / value rows of one layer and slot, for kF32 caches with rows (null for
  // Q8_0; K() is null for tiled keys, i.e. whenever v_dim > 0).
  float* K(int64_t layer, int64_t slot) { return tiled_ ? nullptr : Ptr(k_, layer, slot, kv_dim_); }
  float* V(int64_t layer, int64_t slot) { return Ptr(v_, layer, slot, v_dim_); }
  const float* K(int64_t layer, int64_t slot) const {
    return tiled_ ? nullptr : Ptr(k_, layer, slot, kv_dim_);
  }
  const float* V(int64_t layer, int64_t slot) const { return Ptr(v_, layer, slot, v_dim_); }

  // Writes position pos's key(kv_dim) and value(v_dim) rows, quantizing them for kQ8_0.
  void Store(int64_t layer, int64_t slot, int64_t pos, const float* key, const float* value);

  // The rows of one head (values [first, first + head_dim) of every position), for attention.
  kernels::KvHeadRows KeyRows(int64_t layer, int64_t slot, int64_t first) const;
  kernels::KvHeadRows ValueRows(int64_t layer, int64_t slot, int64_t first) const;

 private:
  float* Ptr(base::AlignedBuffer<float>& b, int64_t layer, int64_t slot, int64_t width) {
    return b.size() == 0 ? nullptr : b.data() + (layer * n_slots_ + slot) * ctx_ * width;
  }
  const float* Ptr(const base::AlignedBuffer<float>& b, int64_t layer, int64_t slot,
                   int64_t width) const {
    return b.size() == 0 ? nullptr : b.data() + (layer * n_slots_ + slot) * ctx_ * width;
  }
  kernels::KvHeadRows Rows(const base::AlignedBuffer<float>& f,
                           const base::AlignedBuffer<int8_t>& q,
                           const base::AlignedBuffer<float>& d, int64_t width, int64_t layer,
                           int64_t slot, int64_t first) const;

  int64_t n_layers_ = 0;
  int64_t n_slots_ = 0;
  int64_t ctx_ = 0;
  int64_t kv_dim_ = 0;
  int64_t v_dim_ = 0;
  KvType type_ = KvType::kF32;
  int64_t block_ = 0;          // kQ8_0: values per scale
  bool tiled_ = false;         // keys in transposed tiles (every cache with values)
  int64_t tiles_ = 0;          // tiled: ceil(ctx / kAttendKeyBlock) tiles per sequence
  std::vector<int8_t> row_q_;  // kQ8_0: (kv_dim) one key row quantized, for Store
  std::vector<float> row_d_;   // kQ8_0: (kv_dim / block) its scales
  // Keys: rows (layer, slot, ctx, kv_dim) or, tiled, (layer, slot, tile, kv_dim, kAttendKeyBlock)
  // with Q8_0 scales (layer, slot, tile, kv_dim / block, kAttendKeyBlock).  Values: rows.
  base::AlignedBuffer<float> k_;    // kF32 keys
  base::AlignedBuffer<float> v_;    // kF32: (layer, slot, ctx, v_dim)
  base::AlignedBuffer<int8_t> kq_;  // kQ8_0 keys (tiled)
  base::AlignedBuffer<int8_t> vq_;  // kQ8_0: (layer, slot, ctx, v_dim)
  base::AlignedBuffer<float> kd_;   // kQ8_0 key scales (tiled)
  base::AlignedBuffer<float> vd_;   // kQ8_0: (layer, slot, ctx, v_dim / block)
};

}  // namespace loom::model
