// The chat page's files (src/loom/serve/web/), embedded into the binary at build time by
// embed_web.cmake, which writes web_assets_data.cc: the page works offline, with no CDN.
#pragma once

#include <span>
#include <string_view>

namespace loom::serve {

struct WebAsset {
  std::string_view name;          // file name in web/, e.g. "index.html"
  std::string_view content_type;  // from the extension
  std::string_view data;
};

std::span<const WebAsset> WebAssets();

}  // namespace loom::serve
