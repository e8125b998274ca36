// POST /v1/chat/completions: messages rendered through the model's chat template, then generated
// like a completion.
#include <nlohmann/json.hpp>

#include "loom/serve/api_error.h"
#include "loom/serve/completion_run.h"
#include "loom/serve/openai_request.h"
#include "loom/serve/routes.h"
#include "loom/text/chat_template.h"

namespace loom::serve {
namespace {

// The prompt ids of a rendered chat.  Templates usually write the BOS token's text themselves;
// plain-text encoding never turns text into control tokens, so that text is removed and BOS is
// added as the tokenizer wants instead (never twice).
StatusOr<std::vector<int32_t>> EncodeChat(const ServeContext& ctx, std::string_view text) {
  const model::TokenizerSpec& spec = *ctx.tokenizer_spec;
  const int32_t bos = ctx.tokenizer->bos_id();
  bool add_bos = ctx.tokenizer->add_bos_default();
  if (bos >= 0 && static_cast<size_t>(bos) < spec.tokens.size()) {
    const std::string& bos_text = spec.tokens[static_cast<size_t>(bos)];
    if (!bos_text.empty() && text.substr(0, bos_text.size()) == bos_text) {
      text.remove_prefix(bos_text.size());
      add_bos = true;
    }
  }
  return ctx.tokenizer->Encode(text, add_bos);
}

}  // namespace

void AddChatRoutes(Router& router, ServeContext& ctx) {
  router.Add("POST", "/v1/chat/completions", /*needs_key=*/true,
             [&ctx](const std::shared_ptr<Exchange>& ex) {
               nlohmann::json body;
               if (auto e = ParseJsonObject(ex->request().body, &body)) {
                 return RespondError(*ex, *e);
               }
               ChatParams p;
               if (auto e = ParseChatRequest(body, &p)) return RespondError(*ex, *e);
               if (auto e = CheckModel(ctx, p.gen.model)) return RespondError(*ex, *e);
               auto rendered = text::RenderChat(*ctx.tokenizer_spec, p.messages,
                                                /*add_generation_prompt=*/true);
               if (!rendered.ok()) {
                 return RespondError(*ex, FromStatus(rendered.status(), "messages"));
               }
               auto ids = EncodeChat(ctx, *rendered);
               if (!ids.ok()) return RespondError(*ex, FromStatus(ids.status(), "messages"));
               RunCompletion(ctx, ex, ApiKind::kChat, p.gen, std::move(*ids), "messages");
             });
}

}  // namespace loom::serve
