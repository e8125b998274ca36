// WebSockets between the layer's server and client (plain), and against a raw silent peer.
#include "loom/net/websocket.h"

#include <gtest/gtest.h>

#include "loom/net/http_client.h"
#include "loom/net/http_server.h"
#include "loom/net/net_testing.h"
#include "loom/net/ws_testing.h"

namespace loom::net {
namespace {

using testing::RawClient;
using testing::ServerEvents;
using testing::Shared;
using testing::WsProbe;

class WebSocketTest : public testing::ServerTest {
 protected:
  void Start(ServerOptions options = {}) {
    StartServer(options, nullptr, testing::EchoUpgrade(events_));
  }
  std::shared_ptr<WsProbe> Dial(const std::string& path, int64_t max = 1 << 20) {
    return WsProbe::Dial(loop_, Address("ws", path), nullptr, {{"Authorization", "Bearer t"}},
                         max);
  }
  std::shared_ptr<Shared<ServerEvents>> events_ = std::make_shared<Shared<ServerEvents>>();
};

TEST_F(WebSocketTest, EchoBothWaysThenCloseHandshake) {
  Start();
  auto probe = Dial("/ws");
  ASSERT_TRUE(probe->WaitOpenOrError());
  ASSERT_FALSE(probe->state.Get().error.has_value()) << probe->state.Get().error->ToString();
  EXPECT_TRUE(probe->WaitMessage("hello Bearer t"));
  loop_.Run([&] {
    EXPECT_TRUE(probe->ws->open());
    EXPECT_EQ(probe->ws->remote(), "127.0.0.1:" + std::to_string(port_));
    probe->ws->Send("one");
    probe->ws->Send(std::string(100000, 'x'));
    probe->ws->Send("three");
  });
  EXPECT_TRUE(probe->WaitMessage("echo: one"));
  EXPECT_TRUE(probe->WaitMessage("echo: " + std::string(100000, 'x')));
  EXPECT_TRUE(probe->WaitMessage("echo: three"));
  const auto messages = probe->state.Get().messages;
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1], "echo: one");  // in order
  EXPECT_EQ(messages[3], "echo: three");

  loop_.Run([&] { probe->ws->Close("bye"); });
  ASSERT_TRUE(probe->WaitClosed());
  EXPECT_EQ(*probe->state.Get().closed, "bye");
  ASSERT_TRUE(events_->WaitFor([](const ServerEvents& e) { return e.closes.size() == 1; }));
  EXPECT_EQ(events_->Get().closes[0], "closed by the peer (code 1000: bye)");
  loop_.Run([&] {
    EXPECT_FALSE(probe->ws->open());
    probe->ws->Send("ignored");  // safe after the end
    probe->ws->Close("again");
    probe->ws.reset();
  });
}

TEST_F(WebSocketTest, RefusedUpgradeReportsTheStatus) {
  Start();
  auto denied = Dial("/private");
  ASSERT_TRUE(denied->WaitOpenOrError());
  const auto error = denied->state.Get().error;
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), StatusCode::kPermissionDenied) << error->ToString();
  EXPECT_NE(error->message().find("HTTP 401"), std::string::npos) << error->ToString();

  auto missing = Dial("/nowhere");
  ASSERT_TRUE(missing->WaitOpenOrError());
  ASSERT_TRUE(missing->state.Get().error.has_value());
  EXPECT_EQ(missing->state.Get().error->code(), StatusCode::kUnavailable);

  // A plain request to a server with only an upgrade handler.
  ClientRequest get;
  get.url = *ParseUrl(Address("http", "/ws"));
  auto r = Fetch(get, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 404);
}

TEST_F(WebSocketTest, OversizedMessageClosesOnlyThatConnection) {
  ServerOptions options;
  options.max_ws_message_bytes = 1000;
  Start(options);
  auto big = Dial("/ws");
  auto other = Dial("/ws");
  ASSERT_TRUE(big->WaitMessage("hello Bearer t"));
  ASSERT_TRUE(other->WaitMessage("hello Bearer t"));
  loop_.Run([&] { big->ws->Send(std::string(5000, 'y')); });
  ASSERT_TRUE(big->WaitClosed());
  EXPECT_NE(big->state.Get().closed->find("code 1009"), std::string::npos)
      << *big->state.Get().closed;
  ASSERT_TRUE(events_->WaitFor([](const ServerEvents& e) { return e.closes.size() == 1; }));
  EXPECT_EQ(events_->Get().closes[0], "message too big (limit 1000 bytes)");

  loop_.Run([&] { other->ws->Send("still here"); });
  EXPECT_TRUE(other->WaitMessage("echo: still here"));
  auto later = Dial("/ws");
  EXPECT_TRUE(later->WaitMessage("hello Bearer t"));

  // The client's own limit.
  auto small = Dial("/ws", 100);
  ASSERT_TRUE(small->WaitMessage("hello Bearer t"));
  loop_.Run([&] { small->ws->Send("big"); });
  ASSERT_TRUE(small->WaitClosed());
  EXPECT_EQ(*small->state.Get().closed, "message too big (limit 100 bytes)");

  // A policy close from the server.
  loop_.Run([&] { other->ws->Send("kick"); });
  ASSERT_TRUE(other->WaitClosed());
  EXPECT_EQ(*other->state.Get().closed, "closed by the peer (code 1008: policy: kicked)");
}

TEST_F(WebSocketTest, PingsKeepALivePeerAndDropASilentOne) {
  ServerOptions options;
  options.ws_ping_interval_s = 0.25;
  Start(options);
  auto live = Dial("/ws");
  ASSERT_TRUE(live->WaitMessage("hello Bearer t"));

  // A peer that does the handshake and then never answers the pings.
  RawClient raw(port_);
  ASSERT_TRUE(raw.Send("GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"));
  std::string got;
  ASSERT_TRUE(raw.ReadUntil(&got, "\r\n\r\n"));
  EXPECT_EQ(got.rfind("HTTP/1.1 101", 0), 0u) << got;
  ASSERT_TRUE(events_->WaitFor([](const ServerEvents& e) {
    for (const auto& reason : e.closes) {
      if (reason.rfind("timeout", 0) == 0) return true;
    }
    return false;
  }));
  const std::string rest = raw.ReadUntilClose();
  EXPECT_NE(rest.find('\x89'), std::string::npos);  // a ping frame came first
  EXPECT_TRUE(raw.eof());

  // The live peer answered every ping meanwhile (the silent one took over 2 intervals to drop).
  loop_.Run([&] { live->ws->Send("after pings"); });
  EXPECT_TRUE(live->WaitMessage("echo: after pings"));
  EXPECT_FALSE(live->state.Get().closed.has_value());
}

TEST_F(WebSocketTest, BinaryMessageIsClosedAsPolicy) {
  Start();
  RawClient raw(port_);
  ASSERT_TRUE(raw.Send("GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"));
  std::string got;
  ASSERT_TRUE(raw.ReadUntil(&got, "hello "));  // the 101 and the greeting
  // A masked binary frame "ab" (mask 0).
  ASSERT_TRUE(raw.Send(std::string("\x82\x82\x00\x00\x00\x00" "ab", 8)));
  ASSERT_TRUE(raw.ReadUntil(&got, std::string("\x88", 1)));
  ASSERT_TRUE(raw.ReadUntil(&got, std::string("\x03\xf0", 2)));  // close code 1008
  ASSERT_TRUE(raw.Send(std::string("\x88\x80\x00\x00\x00\x00", 6)));  // our close reply
  raw.ReadUntilClose();  // the server closes the TCP connection first (RFC 6455 7.1.1)
  EXPECT_TRUE(raw.eof());
  raw.Close();
  ASSERT_TRUE(events_->WaitFor([](const ServerEvents& e) { return e.closes.size() == 1; }));
  EXPECT_EQ(events_->Get().closes[0], "policy: binary messages are not accepted");
}

TEST_F(WebSocketTest, DialTimesOutAgainstASilentServer) {
  testing::SilentListener silent;
  Shared<std::optional<Status>> result;
  loop_.Run([&] {
    DialWebSocket(loop_.io(), *ParseUrl("ws://127.0.0.1:" + std::to_string(silent.port()) + "/"),
                  nullptr, {}, 0.3, 1 << 20, [&](StatusOr<std::shared_ptr<WebSocket>> r) {
                    result.Update([&](auto& s) { s = r.status(); });
                  });
  });
  ASSERT_TRUE(result.WaitFor([](const auto& s) { return s.has_value(); }));
  EXPECT_EQ(result.Get()->code(), StatusCode::kDeadlineExceeded) << result.Get()->ToString();
}

TEST_F(WebSocketTest, StopClosesEveryConnectionAndLeavesNoWork) {
  auto stream_closed = std::make_shared<Shared<int>>();
  auto kept = std::make_shared<std::shared_ptr<Responder>>();  // loop thread only
  StartServer(
      {},
      [stream_closed, kept](Request, std::shared_ptr<Responder> responder) {
        responder->BeginStream(200, "text/event-stream");
        responder->Send("data: 1\n\n");
        responder->OnClose([stream_closed] { stream_closed->Update([](int& n) { ++n; }); });
        *kept = responder;
      },
      testing::EchoUpgrade(events_));
  auto probe = Dial("/ws");
  ASSERT_TRUE(probe->WaitMessage("hello Bearer t"));
  Shared<std::optional<Status>> stream_done;
  Shared<int> stream_data;
  ClientRequest get;
  get.url = *ParseUrl(Address("http", "/events"));
  loop_.Run([&] {
    StartRequest(
        loop_.io(), get, nullptr, nullptr,
        [&](std::string_view) { stream_data.Update([](int& n) { ++n; }); },
        [&](Status s) { stream_done.Update([&](auto& d) { d = s; }); });
  });
  ASSERT_TRUE(stream_data.WaitFor([](int n) { return n > 0; }));
  RawClient idle(port_);  // an idle connection too
  ASSERT_TRUE(idle.connected());
  const double deadline = base::NowSeconds() + 10;
  while (loop_.Run([&] { return server_->open_connections(); }) < 3 &&
         base::NowSeconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(loop_.Run([&] { return server_->open_connections(); }), 3);

  loop_.Run([&] {
    server_->Stop();
    // The server's callbacks ran inside Stop().
    EXPECT_EQ(stream_closed->Get(), 1);
    EXPECT_EQ(events_->Get().closes, std::vector<std::string>{"server stopping"});
    EXPECT_EQ(server_->open_connections(), 0);
    EXPECT_TRUE((*kept)->closed());
    kept->reset();
  });
  ASSERT_TRUE(probe->WaitClosed());
  ASSERT_TRUE(stream_done.WaitFor([](const auto& d) { return d.has_value(); }));
  EXPECT_FALSE(stream_done.Get()->ok());
  EXPECT_EQ(idle.ReadUntilClose(), "");
  loop_.Run([&] { probe->ws.reset(); });
  // With the client sides done too, nothing is left: io.run() returns by itself.
  EXPECT_TRUE(loop_.ReleaseAndJoin(10));
  server_.reset();
}

}  // namespace
}  // namespace loom::net
