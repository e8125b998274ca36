// The operator account page's files (src/loom/network/hub/account_web/), embedded into the binary
// at build time by serve/embed_web.cmake: the page works offline, with no CDN.
#pragma once

#include <span>

#include "loom/serve/web_assets.h"

namespace loom::network::hub {

std::span<const serve::WebAsset> AccountAssets();

}  // namespace loom::network::hub
