#include "loom/serve/router.h"

#include "loom/serve/api_error.h"
#include "loom/serve/auth.h"

namespace loom::serve {

void Router::Add(std::string_view method, std::string_view pattern, bool needs_key,
                 RouteHandler handler) {
  Route r;
  r.method = std::string(method);
  r.prefix = pattern.size() >= 2 && pattern.substr(pattern.size() - 2) == "/*";
  r.pattern = std::string(r.prefix ? pattern.substr(0, pattern.size() - 1) : pattern);
  r.needs_key = needs_key;
  r.handler = std::move(handler);
  routes_.push_back(std::move(r));
}

bool Router::Matches(const Route& r, std::string_view path) const {
  if (r.prefix)
    return path.size() > r.pattern.size() && path.substr(0, r.pattern.size()) == r.pattern;
  return path == r.pattern;
}

void Router::Handle(const std::shared_ptr<Exchange>& exchange) const {
  const net::Request& req = exchange->request();
  std::string_view path = req.path;
  if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const Route* found = nullptr;
  std::string allowed;
  for (const Route& r : routes_) {
    if (!Matches(r, path)) continue;
    if (r.method == req.method || (req.method == "HEAD" && r.method == "GET")) {
      found = &r;
      break;
    }
    if (allowed.find(r.method) == std::string::npos) {
      allowed += allowed.empty() ? r.method : ", " + r.method;
    }
  }
  if (found == nullptr) {
    ApiError e;
    if (allowed.empty()) {
      exchange->SetRoute("unknown");
      e.status = 404;
      e.code = "unknown_url";
      e.message = "Unknown request URL: " + req.method + " " + std::string(path);
    } else {
      exchange->SetRoute(std::string(path));
      e.status = 405;
      e.code = "method_not_allowed";
      e.message = "Method " + req.method + " is not allowed on " + std::string(path) +
                  " (allowed: " + allowed + ")";
      e.headers.push_back({"Allow", allowed});
    }
    RespondError(*exchange, e);
    return;
  }
  exchange->SetRoute(found->prefix ? found->pattern + "*" : found->pattern);
  if (found->needs_key && !BearerMatches(req.Header("authorization"), api_key_)) {
    ApiError e;
    e.status = 401;
    e.type = "invalid_request_error";
    e.code = "invalid_api_key";
    e.message = req.Header("authorization").empty()
                    ? "You didn't provide an API key: send 'Authorization: Bearer YOUR_KEY'"
                    : "Incorrect API key provided";
    e.headers.push_back({"WWW-Authenticate", "Bearer"});
    RespondError(*exchange, e);
    return;
  }
  found->handler(exchange);
}

}  // namespace loom::serve
