#include "loom/model/kv_cache.h"

#include <new>

namespace loom::model {

StatusOr<KvCache> KvCache::Create(int64_t n_layers, int64_t n_slots, int64_t ctx, int64_t kv_dim,
                                  int64_t v_dim) {
  if (v_dim < 0) v_dim = kv_dim;
  if (n_layers <= 0 || n_slots <= 0 || ctx <= 0 || kv_dim <= 0) {
    return InvalidArgumentError("kv cache: bad shape (layers ", n_layers, ", slots ", n_slots,
                                ", ctx ", ctx, ", kv_dim ", kv_dim, ")");
  }
  const int64_t elems = n_layers * n_slots * ctx * kv_dim;
  const int64_t v_elems = n_layers * n_slots * ctx * v_dim;
  KvCache cache;
  cache.n_layers_ = n_layers;
  cache.n_slots_ = n_slots;
  cache.ctx_ = ctx;
  cache.kv_dim_ = kv_dim;
  cache.v_dim_ = v_dim;
  try {
    cache.k_ = base::AlignedBuffer<float>(elems);
    if (v_elems > 0) cache.v_ = base::AlignedBuffer<float>(v_elems);
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("kv cache: cannot allocate ", (elems + v_elems) * 4 / (1 << 20),
                                  " MiB for ", n_slots, " sequence(s) of ", ctx,
                                  " positions; lower the context length");
  }
  return cache;
}

}  // namespace loom::model
