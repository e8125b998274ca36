// The message that tells every rank of a pod what to run next.  Rank 0 (the driver) writes it; it
// travels through the stage-0 tensor-parallel broadcast and then stage to stage with the hidden
// states.  Fixed-width, versioned, validated field by field on receipt.
//
// Layout (little-endian): a StepHeader, then int32 arrays tokens[n], positions[n], slots[n],
// logit_rows[n_logits].  The first kInlineBytes of a step always travel as one message (so a decode
// step is a single message); a longer payload follows as a second message of exactly the
// remaining size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "loom/base/status.h"

namespace loom::parallel {

inline constexpr uint32_t kStepMagic = 0x54534D4C;  // "LMST"
inline constexpr uint16_t kStepVersion = 1;
inline constexpr int64_t kInlineBytes = 256;

enum class StepOp : uint16_t {
  kForward = 1,   // run the batch
  kShutdown = 2,  // leave the follower loop
  kPing = 3,      // nothing to run (keeps idle followers inside their deadline)
};

struct StepHeader {
  uint32_t magic = kStepMagic;
  uint16_t version = kStepVersion;
  uint16_t op = 0;
  uint32_t seq = 0;       // step number, checked for gaps and reordering
  int32_t n_tokens = 0;   // batch size
  int32_t n_logits = 0;   // rows whose logits rank 0 wants
  int32_t reserved = 0;
};
static_assert(sizeof(StepHeader) == 24);

// A decoded step (buffers reused between steps).
struct Step {
  StepOp op = StepOp::kPing;
  uint32_t seq = 0;
  std::vector<int32_t> tokens, positions, slots, logit_rows;
};

// Total bytes of a step with these counts.
int64_t StepBytes(int64_t n_tokens, int64_t n_logits);

// Writes `step` into `out` (resized to StepBytes, at least kInlineBytes).
void EncodeStep(const Step& step, std::vector<std::byte>* out);

// Checks a header: magic, version, op, expected sequence number, counts within [0, max_batch]
// and n_logits <= n_tokens.
Status ValidateStepHeader(const StepHeader& header, uint32_t expected_seq, int64_t max_batch);

// Decodes a whole step (header + payload) into `step`, validating the header and every id range:
// positions in [0, context), slots in [0, n_slots), logit rows in [0, n_tokens), tokens in
// [0, vocab).  `bytes` is at least StepBytes of the header's counts.
Status DecodeStep(std::span<const std::byte> bytes, uint32_t expected_seq, int64_t max_batch,
                  int64_t vocab, int64_t context, int64_t n_slots, Step* step);

}  // namespace loom::parallel
