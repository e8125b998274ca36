#include "loom/parallel/step_wire.h"

#include <algorithm>
#include <cstring>

#include "loom/base/byte_reader.h"

namespace loom::parallel {

int64_t StepBytes(int64_t n_tokens, int64_t n_logits) {
  return static_cast<int64_t>(sizeof(StepHeader)) + 4 * (3 * n_tokens + n_logits);
}

void EncodeStep(const Step& step, std::vector<std::byte>* out) {
  StepHeader h;
  h.op = static_cast<uint16_t>(step.op);
  h.seq = step.seq;
  h.n_tokens = static_cast<int32_t>(step.tokens.size());
  h.n_logits = static_cast<int32_t>(step.logit_rows.size());
  const int64_t bytes = StepBytes(h.n_tokens, h.n_logits);
  out->assign(static_cast<size_t>(std::max(bytes, kInlineBytes)), std::byte{0});
  std::byte* p = out->data();
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  for (const auto* v : {&step.tokens, &step.positions, &step.slots, &step.logit_rows}) {
    if (v->empty()) continue;  // (memcpy from an empty vector's null data() is undefined)
    std::memcpy(p, v->data(), v->size() * 4);
    p += v->size() * 4;
  }
}

Status ValidateStepHeader(const StepHeader& h, uint32_t expected_seq, int64_t max_batch) {
  if (h.magic != kStepMagic) {
    return DataLossError("pod step: bad magic 0x", std::hex, h.magic, " (not a loom step)");
  }
  if (h.version != kStepVersion) {
    return DataLossError("pod step: version ", h.version, ", this build speaks ", kStepVersion);
  }
  if (h.op < 1 || h.op > 3) return DataLossError("pod step: unknown op ", h.op);
  if (h.reserved != 0) return DataLossError("pod step: reserved field is ", h.reserved, ", not 0");
  if (h.seq != expected_seq) {
    return DataLossError("pod step: sequence number ", h.seq, ", expected ", expected_seq);
  }
  if (h.n_tokens < 0 || h.n_tokens > max_batch || h.n_logits < 0 || h.n_logits > h.n_tokens) {
    return DataLossError("pod step: ", h.n_tokens, " tokens and ", h.n_logits,
                         " logit rows (max batch ", max_batch, ")");
  }
  if (static_cast<StepOp>(h.op) == StepOp::kForward && h.n_tokens == 0) {
    return DataLossError("pod step: forward of an empty batch");
  }
  return OkStatus();
}

Status DecodeStep(std::span<const std::byte> bytes, uint32_t expected_seq, int64_t max_batch,
                  int64_t vocab, int64_t context, int64_t n_slots, Step* step) {
  base::ByteReader r(bytes);
  StepHeader h;
  LOOM_RETURN_IF_ERROR(r.Read(&h));
  LOOM_RETURN_IF_ERROR(ValidateStepHeader(h, expected_seq, max_batch));
  step->op = static_cast<StepOp>(h.op);
  step->seq = h.seq;
  struct Field {
    std::vector<int32_t>* out;
    int64_t count, limit;
    const char* name;
  };
  const Field fields[] = {{&step->tokens, h.n_tokens, vocab, "token"},
                          {&step->positions, h.n_tokens, context, "position"},
                          {&step->slots, h.n_tokens, n_slots, "slot"},
                          {&step->logit_rows, h.n_logits, h.n_tokens, "logit row"}};
  for (const Field& f : fields) {
    f.out->resize(static_cast<size_t>(f.count));
    for (int64_t i = 0; i < f.count; ++i) {
      int32_t v;
      LOOM_RETURN_IF_ERROR(r.Read(&v).WithContext("pod step"));
      if (v < 0 || v >= f.limit) {
        return DataLossError("pod step: ", f.name, " ", v, " outside [0, ", f.limit, ")");
      }
      (*f.out)[static_cast<size_t>(i)] = v;
    }
  }
  return OkStatus();
}

}  // namespace loom::parallel
