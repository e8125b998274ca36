#include "loom/serve/api_error.h"

#include <nlohmann/json.hpp>

#include "loom/serve/exchange.h"

namespace loom::serve {

ApiError BadParam(std::string param, std::string message, std::string code) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

ApiError FromStatus(const Status& status, std::string param) {
  ApiError e;
  e.message = status.message();
  e.param = std::move(param);
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.status = 400;
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      break;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "server_error";
      e.code = status.code() == StatusCode::kResourceExhausted ? "server_busy" : "unavailable";
      e.headers.push_back({"Retry-After", "1"});
      break;
    case StatusCode::kPermissionDenied:
      e.status = 401;
      e.type = "authentication_error";
      break;
    case StatusCode::kUnimplemented:
      e.status = 501;
      e.type = "server_error";
      e.code = "unsupported";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

std::string ErrorBody(const ApiError& error) {
  nlohmann::json j;
  j["error"]["message"] = error.message;
  j["error"]["type"] = error.type;
  j["error"]["param"] = error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param);
  j["error"]["code"] = error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void RespondError(Exchange& exchange, const ApiError& error) {
  exchange.Respond(error.status, "application/json", ErrorBody(error), error.headers);
}

}  // namespace loom::serve
