// Runs one completion for an exchange: checks the prompt against the context, submits it to the
// batch engine and answers, either with one JSON body when the completion is done or as
// server-sent events (one `data: {chunk}` per batch of new text, a final chunk with
// finish_reason, the usage chunk when asked for, then `data: [DONE]`).  The answer is written by a
// pump on the io thread that drains the completion's queue each time the engine's thread, having
// posted to it, wakes the pump through the server's WakeQueue; a client that disconnects cancels
// the completion, which frees its slot at the engine's next step.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "loom/serve/exchange.h"
#include "loom/serve/openai_request.h"
#include "loom/serve/routes.h"

namespace loom::serve {

enum class ApiKind { kCompletion, kChat };

// `prompt_param` names the request field the prompt came from ("prompt" or "messages") in errors.
void RunCompletion(ServeContext& ctx, const std::shared_ptr<Exchange>& exchange, ApiKind kind,
                   const GenerationParams& gen, std::vector<int32_t> prompt,
                   std::string_view prompt_param);

// 404 model_not_found unless `model` is the served model's id.
std::optional<ApiError> CheckModel(const ServeContext& ctx, const std::string& model);

}  // namespace loom::serve
