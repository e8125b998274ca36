// Internal to loom_net (not for users): how the HTTP server hands an upgraded connection to a
// WebSocket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "loom/net/request_reader.h"
#include "loom/net/transport.h"
#include "loom/net/websocket.h"

namespace loom::net::internal {

struct WsOptions {
  int64_t max_message_bytes = 8 << 20;
  double ping_interval_s = 5;       // idle time before a ping; twice this without data: dropped
  double handshake_timeout_s = 10;  // the opening and the closing handshake
};

using UpgradeRequest = HttpRequestMessage;

// Server side: answers `request` on `transport` (101, or Beast's 4xx for a bad handshake).  `open`
// gets the socket after a successful handshake, never on failure.  The socket is registered with
// `registry` (may be null) until it ends, so that the server can stop it.
void AcceptWebSocket(std::unique_ptr<Transport> transport, UpgradeRequest request,
                     WsOptions options, std::shared_ptr<Registry> registry,
                     std::function<void(std::shared_ptr<WebSocket>)> open);

}  // namespace loom::net::internal
