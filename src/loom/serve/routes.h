// The route groups of `loom serve`, one per file, and what they share.
//   routes_completions.cc  POST /v1/completions
//   routes_chat.cc         POST /v1/chat/completions
//   routes_models.cc       GET /v1/models, GET /v1/models/{id}
//   routes_health.cc       GET /health, GET /metrics
//   routes_static.cc       GET / and the chat page's assets
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/engine/batch_engine.h"
#include "loom/model/model_file.h"
#include "loom/serve/metrics.h"
#include "loom/serve/router.h"
#include "loom/text/tokenizer.h"

namespace loom::serve {

// What handlers need; everything here outlives the HTTP server.  Handlers read it concurrently:
// nothing in it changes after the server starts (counters are atomic).
struct ServeContext {
  engine::BatchEngine* engine = nullptr;
  const text::Tokenizer* tokenizer = nullptr;
  const model::TokenizerSpec* tokenizer_spec = nullptr;  // chat template, special token texts
  std::string model_id;                                  // the name clients use
  int64_t created = 0;                                   // unix seconds, for /v1/models
  Metrics* metrics = nullptr;
  const HttpServer* http = nullptr;  // for /metrics; set once the server exists
  std::atomic<uint64_t> next_id{1};

  // "chatcmpl-<hex>" style response ids, unique within this server run.
  std::string NewId(std::string_view prefix);
};

void AddCompletionRoutes(Router& router, ServeContext& ctx);
void AddChatRoutes(Router& router, ServeContext& ctx);
void AddModelRoutes(Router& router, ServeContext& ctx);
void AddHealthRoutes(Router& router, ServeContext& ctx);
void AddStaticRoutes(Router& router);

}  // namespace loom::serve
