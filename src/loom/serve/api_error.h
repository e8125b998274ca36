// OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} with the HTTP status a
// client expects (400 bad request, 401 bad key, 404 unknown model or route, 405, 413, 503 busy...).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"

namespace loom::serve {

class Exchange;

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // or "server_error", "authentication_error"...
  std::string param;                           // the offending request field; "" = null
  std::string code;                            // machine-readable; "" = null
  std::vector<std::pair<std::string, std::string>> headers;  // (net::Headers) e.g. Retry-After
};

// 400 invalid_request_error naming `param`.
ApiError BadParam(std::string param, std::string message, std::string code = "");

// Maps an engine/tokenizer Status: InvalidArgument/OutOfRange -> 400, NotFound -> 404,
// ResourceExhausted/Unavailable -> 503 with Retry-After, PermissionDenied -> 401,
// Unimplemented -> 501, others -> 500.
ApiError FromStatus(const Status& status, std::string param = "");

std::string ErrorBody(const ApiError& error);
void RespondError(Exchange& exchange, const ApiError& error);

}  // namespace loom::serve
