// Validation of OpenAI request bodies (/v1/completions, /v1/chat/completions).  Every field we
// know is type-checked and range-checked; an error names the field (`param`) as OpenAI does.
// `null` counts as absent.  Unknown fields are ignored (clients send vendor extensions).
// Features we do not implement (n > 1, tools, penalties other than repetition, logit_bias, echo,
// JSON response formats) are refused with 400 rather than silently ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/serve/api_error.h"
#include "loom/text/chat_template.h"
#include "loom/text/sampler.h"

namespace loom::serve {

inline constexpr int kMaxJsonDepth = 64;

// Fields shared by both endpoints.
struct GenerationParams {
  std::string model;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<int64_t> max_tokens;  // max_completion_tokens, else max_tokens; >= 1
  text::SamplerConfig sampling;       // OpenAI defaults: temperature 1, top_p 1, no top-k/min-p
  bool seed_given = false;
  std::vector<std::string> stop;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // 0..20 (chat), 0..5 (completions)
  bool ignore_eos = false;   // extension (as llama.cpp): generate past end-of-text
  // Extension (as vLLM): the prompt's token ids and every chunk's generated ids in the response,
  // so a caller (the network's node agent) can continue a generation exactly elsewhere.
  bool return_token_ids = false;
  // Extension (completions only, needs `logprobs`): score these tokens as the continuation of the
  // prompt instead of generating (teacher forcing).  The response streams exactly these tokens,
  // each with its log-probability under the model and the `logprobs` most likely alternatives;
  // max_tokens, stop and end-of-text do not apply.  The network hub verifies a node's output so.
  std::vector<int32_t> score_token_ids;
};

struct ChatParams {
  GenerationParams gen;
  std::vector<text::ChatMessage> messages;
};

struct CompletionParams {
  GenerationParams gen;
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;  // when prompt_is_ids (used exactly; no BOS added)
};

// Parses a JSON object body: 400 for malformed JSON, nesting deeper than kMaxJsonDepth, or a
// value that is not an object.
std::optional<ApiError> ParseJsonObject(std::string_view body, nlohmann::json* out);

std::optional<ApiError> ParseChatRequest(const nlohmann::json& body, ChatParams* out);
std::optional<ApiError> ParseCompletionRequest(const nlohmann::json& body, CompletionParams* out);

}  // namespace loom::serve
