// Keys and values of past positions, per layer and per sequence slot.  Allocated once for a session
// (n_slots sequences of up to ctx positions); the decode loop writes into it without allocating.
// Multi-head latent attention (mla.h) keeps one row of kv_dim values per position (the latent and
// the rope key) and no value rows: v_dim 0.
#pragma once

#include <cstdint>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"

namespace loom::model {

class KvCache {
 public:
  KvCache() = default;
  // Fails with ResourceExhausted (with the numbers) when the memory is not available.
  // v_dim < 0: the same as kv_dim.
  static StatusOr<KvCache> Create(int64_t n_layers, int64_t n_slots, int64_t ctx, int64_t kv_dim,
                                  int64_t v_dim = -1);

  int64_t n_layers() const { return n_layers_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t ctx() const { return ctx_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t v_dim() const { return v_dim_; }
  int64_t bytes() const { return (k_.size() + v_.size()) * static_cast<int64_t>(sizeof(float)); }

  // The (ctx, kv_dim) key / value rows of one layer and slot.
  float* K(int64_t layer, int64_t slot) { return k_.data() + Offset(layer, slot); }
  float* V(int64_t layer, int64_t slot) { return v_.data() + VOffset(layer, slot); }
  const float* K(int64_t layer, int64_t slot) const { return k_.data() + Offset(layer, slot); }
  const float* V(int64_t layer, int64_t slot) const { return v_.data() + VOffset(layer, slot); }

 private:
  int64_t Offset(int64_t layer, int64_t slot) const {
    return (layer * n_slots_ + slot) * ctx_ * kv_dim_;
  }
  int64_t VOffset(int64_t layer, int64_t slot) const {
    return (layer * n_slots_ + slot) * ctx_ * v_dim_;
  }

  int64_t n_layers_ = 0;
  int64_t n_slots_ = 0;
  int64_t ctx_ = 0;
  int64_t kv_dim_ = 0;
  int64_t v_dim_ = 0;
  base::AlignedBuffer<float> k_;  // (layer, slot, ctx, kv_dim)
  base::AlignedBuffer<float> v_;  // (layer, slot, ctx, v_dim)
};

}  // namespace loom::model
