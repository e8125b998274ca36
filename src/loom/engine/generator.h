// Generation for one sequence: prompt processing in batches, then token-by-token decoding with a
// sampler, streaming text as it becomes complete UTF-8.  The `loom run` and `loom bench` commands
// are thin wrappers around this.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"
#include "loom/model/forward_pass.h"
#include "loom/text/detokenizer.h"
#include "loom/text/sampler.h"
#include "loom/text/tokenizer.h"

namespace loom::engine {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  text::SamplerConfig sampling;
  bool stop_at_eog = true;  // end at the tokenizer's end-of-generation tokens
  text::DetokenizerOptions detokenizer;
};

enum class FinishReason { kLength, kEndOfText, kContextFull, kStopped };
std::string_view FinishReasonName(FinishReason reason);  // "length", "stop", "context", "stopped"

struct GenerationTimings {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;      // prompt processing, up to the first sampled token
  int64_t decode_steps = 0;       // forward passes after the prompt (generated tokens - 1, or so)
  double decode_seconds = 0;      // those passes plus sampling and detokenizing
  double PromptTokensPerSecond() const {
    return prompt_seconds > 0 ? static_cast<double>(prompt_tokens) / prompt_seconds : 0;
  }
  double DecodeTokensPerSecond() const {
    return decode_seconds > 0 ? static_cast<double>(decode_steps) / decode_seconds : 0;
  }
};

struct GenerationResult {
  std::vector<int32_t> generated;  // sampled ids, without the end-of-generation token
  std::string text;                // the completion's text
  FinishReason finish = FinishReason::kLength;
  GenerationTimings timings;
};

// Receives each generated token and the text it completes; returns false to stop generating.
// A final call with id -1 carries text still held back at the end (an incomplete UTF-8 tail).
using TokenCallback = std::function<bool(int32_t id, std::string_view text)>;

class Generator {
 public:
  // Uses KV-cache slot `slot` of `model`; both arguments must outlive the generator.
  Generator(model::ForwardPass& model, const text::Tokenizer& tokenizer, int32_t slot = 0);

  // Runs `prompt` (token ids, BOS included when wanted) and generates up to
  // options.max_new_tokens tokens.  The sequence starts at position 0 (earlier cache contents of
  // the slot are overwritten).
  StatusOr<GenerationResult> Generate(std::span<const int32_t> prompt,
                                      const GenerateOptions& options,
                                      const TokenCallback& on_token = nullptr);

 private:
  // Runs tokens [begin, end) of `ids` at positions begin.. and leaves the logits of the last one
  // in logits_.
  Status Run(std::span<const int32_t> ids, int64_t first_position);

  model::ForwardPass& model_;
  const text::Tokenizer& tokenizer_;
  int32_t slot_;
  base::AlignedBuffer<float> logits_;     // (vocab)
  std::vector<int32_t> positions_;        // (max_batch) scratch
  std::vector<int32_t> slots_;            // (max_batch) all `slot_`
};

}  // namespace loom::engine
