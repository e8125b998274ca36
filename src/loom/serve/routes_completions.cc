// POST /v1/completions: a text prompt (or token ids) continued by the model.
#include <nlohmann/json.hpp>

#include "loom/serve/api_error.h"
#include "loom/serve/completion_run.h"
#include "loom/serve/openai_request.h"
#include "loom/serve/routes.h"

namespace loom::serve {

void AddCompletionRoutes(Router& router, ServeContext& ctx) {
  router.Add(
      "POST", "/v1/completions", /*needs_key=*/true, [&ctx](const std::shared_ptr<Exchange>& ex) {
        nlohmann::json body;
        if (auto e = ParseJsonObject(ex->request().body, &body)) {
          return RespondError(*ex, *e);
        }
        CompletionParams p;
        if (auto e = ParseCompletionRequest(body, &p)) return RespondError(*ex, *e);
        if (auto e = CheckModel(ctx, p.gen.model)) return RespondError(*ex, *e);
        std::vector<int32_t> ids;
        if (p.prompt_is_ids) {
          ids = std::move(p.prompt_ids);  // exactly as given (the engine checks the range)
        } else {
          auto encoded = ctx.tokenizer->Encode(p.prompt_text, ctx.tokenizer->add_bos_default());
          if (!encoded.ok()) return RespondError(*ex, FromStatus(encoded.status(), "prompt"));
          ids = std::move(*encoded);
        }
        RunCompletion(ctx, ex, ApiKind::kCompletion, p.gen, std::move(ids), "prompt");
      });
}

}  // namespace loom::serve
