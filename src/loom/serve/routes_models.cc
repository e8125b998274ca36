// GET /v1/models and GET /v1/models/{id}: the one model this server serves.
#include <nlohmann/json.hpp>

#include "loom/net/url.h"
#include "loom/serve/api_error.h"
#include "loom/serve/routes.h"

namespace loom::serve {
namespace {

nlohmann::json ModelObject(const ServeContext& ctx) {
  return {{"id", ctx.model_id},
          {"object", "model"},
          {"created", ctx.created},
          {"owned_by", "loom"},
          {"context_length", ctx.engine->context()}};
}

}  // namespace

void AddModelRoutes(Router& router, ServeContext& ctx) {
  router.Add("GET", "/v1/models", /*needs_key=*/true, [&ctx](const std::shared_ptr<Exchange>& ex) {
    const nlohmann::json list = {{"object", "list"},
                                 {"data", nlohmann::json::array({ModelObject(ctx)})}};
    ex->Respond(200, "application/json", list.dump());
  });
  router.Add("GET", "/v1/models/*", /*needs_key=*/true,
             [&ctx](const std::shared_ptr<Exchange>& ex) {
               constexpr std::string_view kPrefix = "/v1/models/";
               const std::string id =
                   net::PercentDecode(std::string_view(ex->request().path).substr(kPrefix.size()));
               if (id != ctx.model_id) {
                 ApiError e;
                 e.status = 404;
                 e.param = "model";
                 e.code = "model_not_found";
                 e.message = "The model '" + id + "' does not exist";
                 return RespondError(*ex, e);
               }
               ex->Respond(
                   200, "application/json",
                   ModelObject(ctx).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
             });
}

}  // namespace loom::serve
