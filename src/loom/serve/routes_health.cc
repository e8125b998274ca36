// GET /health (no key needed: load balancers and the chat page poll it) and GET /metrics
// (Prometheus text format; needs the key when one is set).
#include <nlohmann/json.hpp>

#include "loom/serve/routes.h"

namespace loom::serve {

void AddHealthRoutes(Router& router, ServeContext& ctx) {
  router.Add("GET", "/health", /*needs_key=*/false, [&ctx](const std::shared_ptr<Exchange>& ex) {
    const engine::EngineStats st = ctx.engine->Stats();
    const nlohmann::json j = {{"status", "ok"},
                              {"model", ctx.model_id},
                              {"context_length", ctx.engine->context()},
                              {"slots", st.slots},
                              {"slots_busy", st.active},
                              {"queue", st.queued},
                              {"queue_limit", st.max_queue}};
    ex->Respond(200, "application/json",
                j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  });
  router.Add("GET", "/metrics", /*needs_key=*/true, [&ctx](const std::shared_ptr<Exchange>& ex) {
    const net::ServerStats http = ctx.http != nullptr ? ctx.http->Stats() : net::ServerStats{};
    ex->Respond(200, "text/plain; version=0.0.4; charset=utf-8",
                ctx.metrics->Render(ctx.engine->Stats(), http));
  });
}

}  // namespace loom::serve
