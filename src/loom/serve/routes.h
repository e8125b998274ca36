// The route groups of `loom serve`, one per file, and what they share.
//   routes_completions.cc  POST /v1/completions
//   routes_chat.cc         POST /v1/chat/completions
//   routes_models.cc       GET /v1/models, GET /v1/models/{id}
//   routes_health.cc       GET /health, GET /metrics
//   routes_static.cc       GET / and the chat page's assets
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "loom/engine/batch_engine.h"
#include "loom/model/model_file.h"
#include "loom/net/http_server.h"
#include "loom/serve/metrics.h"
#include "loom/serve/router.h"
#include "loom/serve/wake_queue.h"
#include "loom/text/tokenizer.h"

namespace loom::serve {

// What handlers need; everything here outlives the HTTP server.  Nothing in it changes after the
// server starts (handlers and pumps run on the io thread; the id counter is atomic all the same).
struct ServeContext {
  engine::BatchEngine* engine = nullptr;
  const text::Tokenizer* tokenizer = nullptr;
  const model::TokenizerSpec* tokenizer_spec = nullptr;  // chat template, special token texts
  std::string model_id;                                  // the name clients use
  int64_t created = 0;                                   // unix seconds, for /v1/models
  Metrics* metrics = nullptr;
  const net::HttpServer* http = nullptr;  // for /metrics; set once the server exists
  // Brings a completion's new output from the engine's thread to the io thread.
  std::shared_ptr<WakeQueue> wakes;
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
