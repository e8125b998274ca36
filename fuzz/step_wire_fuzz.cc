// Fuzzes the pod step decoder (bytes a follower rank receives from its peers): any input either
// decodes into a step whose ids are all within the limits given, or fails with a Status.  A decoded
// step must re-encode to the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "loom/parallel/step_wire.h"

using namespace loom::parallel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kMaxBatch = 64, kVocab = 512, kContext = 256, kSlots = 4;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  Step step;
  if (!DecodeStep(in, /*expected_seq=*/1, kMaxBatch, kVocab, kContext, kSlots, &step).ok()) {
    return 0;
  }
  if (step.tokens.size() > kMaxBatch || step.logit_rows.size() > step.tokens.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < step.tokens.size(); ++i) {
    if (step.tokens[i] < 0 || step.tokens[i] >= kVocab || step.positions[i] < 0 ||
        step.positions[i] >= kContext || step.slots[i] < 0 || step.slots[i] >= kSlots) {
      __builtin_trap();
    }
  }
  std::vector<std::byte> out;
  EncodeStep(step, &out);
  const size_t used = static_cast<size_t>(StepBytes(static_cast<int64_t>(step.tokens.size()),
                                                    static_cast<int64_t>(step.logit_rows.size())));
  if (used > size || std::memcmp(out.data(), data, used) != 0) __builtin_trap();
  return 0;
}
