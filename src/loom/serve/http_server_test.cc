// The transport over real loopback sockets: keep-alive and pipelining, streaming from another
// thread, disconnect detection, slow-loris and idle timeouts, size limits, the connection limit.
#include "loom/serve/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "loom/serve/http_test_util.h"

namespace loom::serve {
namespace {

using testing::BodyOf;
using testing::Get;
using testing::Post;
using testing::RawClient;
using testing::StatusOf;
using testing::Unchunk;

// A server whose handler echoes, streams or waits, depending on the path.
class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    auto s = HttpServer::Create(
        options, [this](const std::shared_ptr<Exchange>& ex) { Handle(ex); },
        [this](const Exchange&, bool completed) { (completed ? completed_ : abandoned_)++; });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    for (auto& t : threads_) t.join();
  }

  void Handle(const std::shared_ptr<Exchange>& ex) {
    const HttpRequest& req = ex->request();
    if (req.path == "/echo") {
      ex->Respond(200, "text/plain", req.method + " " + req.target + " " + req.body);
    } else if (req.path == "/stream") {
      // Streams five pieces from another thread, as the engine's notifications would.
      ex->BeginStream(200, "text/event-stream");
      std::lock_guard<std::mutex> lock(threads_mu_);
      threads_.emplace_back([ex] {
        for (int i = 0; i < 5; ++i) {
          ex->Send("data: " + std::to_string(i) + "\n\n");
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        ex->End();
      });
    } else if (req.path == "/hang") {
      // Never answers; reports when the client goes away.
      ex->SetOnClose([this] { closed_++; });
    } else if (req.path == "/pump") {
      // Answers from the loop thread through a pump woken from elsewhere.
      auto count = std::make_shared<int>(0);
      ex->SetPump([count](Exchange& e) {
        if (++*count == 1) e.BeginStream(200, "text/plain");
        e.Send("tick" + std::to_string(*count) + ";");
        if (*count == 3) e.End();
      });
      std::lock_guard<std::mutex> lock(threads_mu_);
      threads_.emplace_back([ex] {
        for (int i = 0; i < 3; ++i) {
          ex->Wake();
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      });
    } else {
      ex->Respond(404, "text/plain", "no");
    }
  }

  std::unique_ptr<HttpServer> server_;
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;
  std::atomic<int> closed_{0};
  std::atomic<int> completed_{0};
  std::atomic<int> abandoned_{0};
};

TEST_F(HttpServerTest, AnswersSeveralRequestsOnOneKeepAliveConnection) {
  Start();
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Get("/echo?a=1")));
  std::string r = c.ReadResponse();
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_EQ(BodyOf(r), "GET /echo?a=1 ");
  EXPECT_NE(r.find("Connection: keep-alive"), std::string::npos);
  ASSERT_TRUE(c.Send(Post("/echo", "hello")));
  r = c.ReadResponse();
  EXPECT_EQ(BodyOf(r), "POST /echo hello");
  // Two pipelined requests in one write are answered in order.
  ASSERT_TRUE(c.Send(Post("/echo", "one") + Post("/echo", "two")));
  EXPECT_EQ(BodyOf(c.ReadResponse()), "POST /echo one");
  EXPECT_EQ(BodyOf(c.ReadResponse()), "POST /echo two");
  // Connection: close is honoured.
  ASSERT_TRUE(c.Send("GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n"));
  r = c.ReadFor(2);
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_TRUE(c.eof());
}

TEST_F(HttpServerTest, StreamsChunksWrittenFromOtherThreadsAndPumps) {
  Start();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Get("/stream")));
  std::string r = c.ReadResponse();
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_EQ(Unchunk(BodyOf(r)), "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  ASSERT_TRUE(c.Send(Get("/pump")));
  r = c.ReadResponse();
  EXPECT_EQ(Unchunk(BodyOf(r)), "tick1;tick2;tick3;");
}

TEST_F(HttpServerTest, NoticesAClientThatLeavesWhileItsResponseIsPending) {
  Start();
  {
    RawClient c(server_->port());
    ASSERT_TRUE(c.Send(Get("/hang")));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // closes the socket
  for (int i = 0; i < 100 && closed_.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(closed_.load(), 1);
  EXPECT_EQ(abandoned_.load(), 1);
}

TEST_F(HttpServerTest, SlowLorisClientsTimeOutWhileOthersAreServed) {
  HttpServerOptions o;
  o.read_timeout_s = 0.5;
  o.idle_timeout_s = 0.5;
  Start(o);
  RawClient slow(server_->port());
  RawClient idle(server_->port());
  ASSERT_TRUE(slow.Send("POST /echo HTTP/1.1\r\nHost: x\r\n"));
  const auto t0 = std::chrono::steady_clock::now();
  // Others are served while the slow client dribbles.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(slow.Send("X-Slow: 1\r\n"));
    RawClient fast(server_->port());
    ASSERT_TRUE(fast.Send(Get("/echo")));
    EXPECT_EQ(StatusOf(fast.ReadResponse(2)), 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string r = slow.ReadFor(3);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(StatusOf(r), 408) << r;
  EXPECT_NE(r.find("request_timeout"), std::string::npos);
  EXPECT_TRUE(slow.eof());
  EXPECT_LT(waited, 2.5);
  // A connection that never sends anything is closed without a response.
  EXPECT_EQ(idle.ReadFor(2), "");
  EXPECT_TRUE(idle.eof());
  EXPECT_GE(server_->Stats().timed_out, 2);
}

TEST_F(HttpServerTest, RefusesOversizedBodiesBeforeReadingThem) {
  HttpServerOptions o;
  o.limits.max_body_bytes = 1000;
  Start(o);
  RawClient c(server_->port());
  ASSERT_TRUE(
      c.Send("POST /echo HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" + std::string(500, 'x')));
  const std::string r = c.ReadFor(2);
  EXPECT_EQ(StatusOf(r), 413);
  EXPECT_NE(r.find("\"code\":\"request_too_large\""), std::string::npos);
  EXPECT_NE(r.find("Connection: close"), std::string::npos);
  // Expect: 100-continue gets the go-ahead only for bodies within the limit.
  RawClient d(server_->port());
  ASSERT_TRUE(d.Send("POST /echo HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(StatusOf(d.ReadUntil("\r\n\r\n", 2)), 100);
  ASSERT_TRUE(d.Send("abc"));
  EXPECT_EQ(BodyOf(d.ReadResponse()), "POST /echo abc");
}

TEST_F(HttpServerTest, MalformedRequestsGetAnErrorAndTheServerGoesOn) {
  Start();
  for (const std::string& bad :
       {std::string("GARBAGE\r\n\r\n"),
        std::string("\x16\x03\x01\x02", 4) + std::string("\r\n\r\n"),
        std::string("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")}) {
    RawClient c(server_->port());
    ASSERT_TRUE(c.Send(bad));
    const std::string r = c.ReadFor(2);
    EXPECT_GE(StatusOf(r), 400) << r;
    EXPECT_NE(r.find("{\"error\":{"), std::string::npos);
  }
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Get("/echo")));
  EXPECT_EQ(StatusOf(c.ReadResponse()), 200);
  EXPECT_GE(server_->Stats().bad_requests, 3);
}

TEST_F(HttpServerTest, RefusesConnectionsOverTheLimit) {
  HttpServerOptions o;
  o.max_connections = 2;
  Start(o);
  RawClient a(server_->port());
  RawClient b(server_->port());
  ASSERT_TRUE(a.Send(Get("/echo")));
  ASSERT_TRUE(b.Send(Get("/echo")));
  EXPECT_EQ(StatusOf(a.ReadResponse()), 200);
  EXPECT_EQ(StatusOf(b.ReadResponse()), 200);
  RawClient c(server_->port());
  const std::string r = c.ReadFor(2);
  EXPECT_EQ(StatusOf(r), 503);
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos);
  EXPECT_EQ(server_->Stats().refused, 1);
}

TEST_F(HttpServerTest, StopClosesPendingExchanges) {
  Start();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Get("/hang")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server_->Stop();
  EXPECT_EQ(closed_.load(), 1);
  c.ReadFor(1);
  EXPECT_TRUE(c.eof());
}

}  // namespace
}  // namespace loom::serve
