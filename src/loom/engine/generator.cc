#include "loom/engine/generator.h"

#include <algorithm>

#include "loom/base/clock.h"

namespace loom::engine {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kEndOfText: return "stop";
    case FinishReason::kContextFull: return "context";
    case FinishReason::kStopped: return "stopped";
  }
  return "unknown";
}

Generator::Generator(model::ForwardPass& model, const text::Tokenizer& tokenizer, int32_t slot)
    : model_(model),
      tokenizer_(tokenizer),
      slot_(slot),
      logits_(model.hparams().vocab_size),
      positions_(static_cast<size_t>(model.max_batch())),
      slots_(static_cast<size_t>(model.max_batch()), slot) {}

Status Generator::Run(std::span<const int32_t> ids, int64_t first_position) {
  const int64_t chunk = model_.max_batch();
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    for (int64_t i = 0; i < count; ++i) {
      positions_[static_cast<size_t>(i)] = static_cast<int32_t>(first_position + begin + i);
    }
    const bool last = begin + count == n;
    const int32_t last_row = static_cast<int32_t>(count - 1);
    model::Batch batch{ids.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)),
                       std::span<const int32_t>(positions_.data(), static_cast<size_t>(count)),
                       std::span<const int32_t>(slots_.data(), static_cast<size_t>(count)),
                       last ? std::span<const int32_t>(&last_row, 1) : std::span<const int32_t>()};
    LOOM_RETURN_IF_ERROR(model_.Forward(batch, logits_.data()));
  }
  return OkStatus();
}

StatusOr<GenerationResult> Generator::Generate(std::span<const int32_t> prompt,
                                               const GenerateOptions& options,
                                               const TokenCallback& on_token) {
  if (prompt.empty()) {
    return InvalidArgumentError("generate: the prompt is empty (it needs at least a BOS token)");
  }
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  if (prompt_len >= model_.context()) {
    return OutOfRangeError("generate: the prompt has ", prompt_len,
                           " tokens but the context holds ", model_.context());
  }
  if (options.max_new_tokens < 0) {
    return InvalidArgumentError("generate: max_new_tokens must be >= 0");
  }
  LOOM_ASSIGN_OR_RETURN(text::Sampler sampler,
                        text::Sampler::Create(model_.hparams().vocab_size, options.sampling));
  text::StreamingDetokenizer detok(tokenizer_, options.detokenizer);
  for (int32_t id : prompt) {
    sampler.Accept(id);
    detok.Push(id);  // primes the detokenizer (leading-space and UTF-8 state); text discarded
  }

  GenerationResult result;
  result.generated.reserve(static_cast<size_t>(options.max_new_tokens));
  result.timings.prompt_tokens = prompt_len;
  base::Stopwatch watch;
  if (options.max_new_tokens == 0) return result;
  LOOM_RETURN_IF_ERROR(Run(prompt, 0));
  result.timings.prompt_seconds = watch.Seconds();
  watch.Reset();

  int64_t pos = prompt_len;  // position of the next token to run
  for (;;) {
    LOOM_ASSIGN_OR_RETURN(int32_t next, sampler.Sample(logits_.span()));
    if (options.stop_at_eog && tokenizer_.IsEog(next)) {
      result.finish = FinishReason::kEndOfText;
      break;
    }
    sampler.Accept(next);
    result.generated.push_back(next);
    const std::string_view piece = detok.Push(next);
    result.text.append(piece);
    if (on_token && !on_token(next, piece)) {
      result.finish = FinishReason::kStopped;
      break;
    }
    if (static_cast<int64_t>(result.generated.size()) >= options.max_new_tokens) {
      result.finish = FinishReason::kLength;
      break;
    }
    if (pos >= model_.context()) {
      result.finish = FinishReason::kContextFull;
      break;
    }
    const int32_t token = next;
    LOOM_RETURN_IF_ERROR(Run(std::span<const int32_t>(&token, 1), pos));
    ++pos;
    ++result.timings.decode_steps;
  }
  const std::string_view tail = detok.Finish();
  result.text.append(tail);
  if (on_token && !tail.empty()) on_token(-1, tail);
  result.timings.decode_seconds = watch.Seconds();
  return result;
}

}  // namespace loom::engine
