// GET / (the chat page) and its assets, served from the copies embedded in the binary.
#include <string>

#include "loom/serve/routes.h"
#include "loom/serve/web_assets.h"

namespace loom::serve {

void AddStaticRoutes(Router& router) {
  for (const WebAsset& asset : WebAssets()) {
    std::string path = "/";
    if (asset.name != "index.html") path.append(asset.name);
    router.Add("GET", path, /*needs_key=*/false, [&asset](const std::shared_ptr<Exchange>& ex) {
      ex->Respond(200, asset.content_type, std::string(asset.data),
                  {{"Cache-Control", "no-cache"},
                   {"X-Content-Type-Options", "nosniff"},
                   {"Content-Security-Policy",
                    "default-src 'self'; style-src 'self'; script-src 'self'; "
                    "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"}});
    });
  }
}

}  // namespace loom::serve
