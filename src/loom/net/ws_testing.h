// Test-only: a WebSocket echo service and a probe that dials and records what happens.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/net/http_server.h"
#include "loom/net/net_testing.h"
#include "loom/net/websocket.h"

namespace loom::net::testing {

struct ServerEvents {
  int opened = 0;
  std::vector<std::string> closes;  // reasons
};

// Accepts /ws (greets with "hello <authorization>", echoes "echo: <m>", answers "big" with 500
// bytes, closes with a policy reason on "kick"); refuses /private with 401, others with 404.
inline UpgradeHandler EchoUpgrade(std::shared_ptr<Shared<ServerEvents>> events) {
  return [events](const Request& request, std::shared_ptr<Responder> refuse,
                  std::function<void(std::shared_ptr<WebSocket>)>* accept) {
    if (request.path == "/private") {
      refuse->Respond(401, "application/json", "{\"error\":\"who are you\"}");
      return;
    }
    if (request.path != "/ws") {
      refuse->Respond(404, "text/plain", "no such socket");
      return;
    }
    const std::string token(request.Header("authorization"));
    *accept = [events, token](std::shared_ptr<WebSocket> ws) {
      std::weak_ptr<WebSocket> weak = ws;
      ws->OnMessage([weak](std::string_view m) {
        auto s = weak.lock();
        if (!s) return;
        if (m == "big") {
          s->Send(std::string(500, 'B'));
        } else if (m == "kick") {
          s->Close("policy: kicked");
        } else {
          s->Send("echo: " + std::string(m));
        }
      });
      ws->OnClose([events](std::string_view reason) {
        events->Update([&](ServerEvents& e) { e.closes.emplace_back(reason); });
      });
      ws->Start();
      ws->Send("hello " + token);
      events->Update([](ServerEvents& e) { ++e.opened; });
    };
  };
}

struct ProbeState {
  bool open = false;
  std::optional<Status> error;  // the dial failed
  std::vector<std::string> messages;
  std::optional<std::string> closed;  // OnClose's reason
};

// Dials a WebSocket and records what happens.  The callbacks hold the probe weakly.
class WsProbe : public std::enable_shared_from_this<WsProbe> {
 public:
  static std::shared_ptr<WsProbe> Dial(LoopThread& loop, const std::string& url,
                                       std::shared_ptr<boost::asio::ssl::context> tls,
                                       std::vector<std::pair<std::string, std::string>> headers =
                                           {},
                                       int64_t max_message_bytes = 1 << 20) {
    auto probe = std::make_shared<WsProbe>();
    auto parsed = ParseUrl(url);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    std::weak_ptr<WsProbe> weak = probe;  // the probe holds the socket, not the other way
    loop.Run([&] {
      DialWebSocket(loop.io(), *parsed, tls, headers, 5, max_message_bytes,
                    [weak](StatusOr<std::shared_ptr<WebSocket>> result) {
                      auto probe = weak.lock();
                      if (!probe) return;
                      if (!result.ok()) {
                        probe->state.Update([&](ProbeState& s) { s.error = result.status(); });
                        return;
                      }
                      auto ws = *result;
                      probe->ws = ws;
                      ws->OnMessage([weak](std::string_view m) {
                        if (auto p = weak.lock()) {
                          p->state.Update([&](ProbeState& s) { s.messages.emplace_back(m); });
                        }
                      });
                      ws->OnClose([weak](std::string_view reason) {
                        if (auto p = weak.lock()) {
                          p->state.Update([&](ProbeState& s) { s.closed = std::string(reason); });
                        }
                      });
                      ws->Start();
                      probe->state.Update([](ProbeState& s) { s.open = true; });
                    });
    });
    return probe;
  }

  bool WaitOpenOrError() {
    return state.WaitFor([](const ProbeState& s) { return s.open || s.error.has_value(); });
  }
  bool WaitMessage(const std::string& m) {
    return state.WaitFor([&](const ProbeState& s) {
      for (const auto& got : s.messages) {
        if (got == m) return true;
      }
      return false;
    });
  }
  bool WaitClosed() {
    return state.WaitFor([](const ProbeState& s) { return s.closed.has_value(); });
  }

  Shared<ProbeState> state;
  std::shared_ptr<WebSocket> ws;  // loop thread only
};

}  // namespace loom::net::testing
