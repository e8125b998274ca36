// What generation loops need from a model: run a batch of tokens and return logits.  A local
// Transformer is one; a distributed model (a pod of ranks, driven from rank 0) is another.
#pragma once

#include <cstdint>
#include <span>

#include "loom/base/status.h"
#include "loom/model/model_file.h"

namespace loom::model {

// Which tokens to run: token i of the batch is `tokens[i]` at position `positions[i]` of sequence
// slot `slots[i]`.  Within one call a (slot, position) pair appears at most once, and a token's
// earlier positions are either in the cache already or earlier in the same batch.
struct Batch {
  std::span<const int32_t> tokens;      // (n)
  std::span<const int32_t> positions;   // (n)
  std::span<const int32_t> slots;       // (n)
  std::span<const int32_t> logit_rows;  // batch indices whose logits are wanted, in output order
};

class ForwardPass {
 public:
  virtual ~ForwardPass() = default;
  // Runs the batch; writes logits(batch.logit_rows.size(), vocab_size).
  virtual Status Forward(const Batch& batch, float* logits) = 0;
  virtual const HParams& hparams() const = 0;
  virtual int64_t context() const = 0;    // positions per sequence
  virtual int64_t max_batch() const = 0;  // tokens per Forward call
  virtual int64_t n_slots() const = 0;    // sequences held at once
  // Called by long-lived drivers (a server) when they have had nothing to run for a while: a
  // distributed model tells its other ranks it is still alive.  An error means the model is gone.
  virtual Status KeepAlive() { return OkStatus(); }
};

}  // namespace loom::model
