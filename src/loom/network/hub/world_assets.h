// The world page's files (src/loom/network/hub/web/, and the land outlines of the world-atlas npm
// package when it was installed: land-110m.json), embedded into the binary at build time by
// serve/embed_web.cmake: the page works offline, with no CDN.
#pragma once

#include <span>

#include "loom/serve/web_assets.h"

namespace loom::network::hub {

std::span<const serve::WebAsset> WorldAssets();

}  // namespace loom::network::hub
