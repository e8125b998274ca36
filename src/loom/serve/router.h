// Routes requests by method and path to handlers: 404 for unknown paths, 405 (with Allow) for a
// known path with another method, 401 when a route needs the API key and the request lacks it.
// Sets the exchange's route label (the pattern) for metrics.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/serve/exchange.h"

namespace loom::serve {

using RouteHandler = std::function<void(const std::shared_ptr<Exchange>&)>;

class Router {
 public:
  // `api_key` empty: no route needs a key.
  explicit Router(std::string api_key) : api_key_(std::move(api_key)) {}

  // `pattern` is an exact path ("/v1/models") or a prefix ending in "/*" ("/v1/models/*").
  // `needs_key`: the route answers 401 without the API key.
  void Add(std::string_view method, std::string_view pattern, bool needs_key, RouteHandler handler);

  void Handle(const std::shared_ptr<Exchange>& exchange) const;

 private:
  struct Route {
    std::string method;
    std::string pattern;
    bool prefix = false;
    bool needs_key = true;
    RouteHandler handler;
  };
  bool Matches(const Route& r, std::string_view path) const;

  std::string api_key_;
  std::vector<Route> routes_;
};

}  // namespace loom::serve
