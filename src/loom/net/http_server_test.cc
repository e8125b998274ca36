// The HTTP server and client against each other and against raw sockets, on 127.0.0.1.
#include "loom/net/http_server.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <boost/asio/steady_timer.hpp>

#include "loom/net/http_client.h"
#include "loom/net/net_testing.h"
#include "loom/net/request_reader.h"

namespace loom::net {
namespace {

using testing::LoopThread;
using testing::RawClient;
using testing::Shared;
using testing::BodyOf;
using testing::Unchunk;

// Answers "METHOD path query x-test body" as text.
void Echo(Request request, std::shared_ptr<Responder> responder) {
  std::string text = request.method + " " + request.path + " " + request.query + " " +
                     std::string(request.Header("x-test")) + " " + request.body;
  responder->Respond(200, "text/plain", std::move(text), {{"X-Remote", request.remote}});
}

class HttpTest : public testing::ServerTest {
 protected:
  std::string Base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  ClientRequest Get(const std::string& path) {
    ClientRequest r;
    r.url = *ParseUrl(Base() + path);
    r.timeout_s = 10;
    return r;
  }
};

TEST_F(HttpTest, FetchGetAndPost) {
  StartServer({}, Echo);
  auto get = Get("/hello?a=1");
  get.headers = {{"X-Test", "yes"}};
  auto r1 = Fetch(get, nullptr);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(r1->status, 200);
  EXPECT_EQ(r1->body, "GET /hello a=1 yes ");
  bool found = false;
  for (const auto& [name, value] : r1->headers) {
    if (name == "x-remote") found = value.rfind("127.0.0.1:", 0) == 0;
  }
  EXPECT_TRUE(found);

  auto post = Get("/p");
  post.method = "POST";
  post.body = std::string(100000, 'z');
  auto r2 = Fetch(post, nullptr);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->body, "POST /p   " + post.body);
}

TEST_F(HttpTest, KeepAliveServesTwoRequestsOnOneConnection) {
  auto remotes = std::make_shared<Shared<std::vector<std::string>>>();
  StartServer({}, [remotes](Request request, std::shared_ptr<Responder> responder) {
    remotes->Update([&](auto& v) { v.push_back(request.remote); });
    Echo(std::move(request), std::move(responder));
  });
  RawClient client(port_);
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("GET /a?x=1 HTTP/1.1\r\nHost: t\r\nX-Test: one\r\n\r\n"));
  const std::string first = client.ReadResponse();
  EXPECT_EQ(first.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << first;
  EXPECT_NE(first.find("\r\n\r\nGET /a x=1 one "), std::string::npos) << first;
  EXPECT_EQ(first.find("Connection: close"), std::string::npos);
  ASSERT_TRUE(client.Send("POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"));
  const std::string second = client.ReadResponse();
  EXPECT_NE(second.find("\r\n\r\nPOST /b   hello"), std::string::npos) << second;
  const auto seen = remotes->Get();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], seen[1]);
}

TEST_F(HttpTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer({}, Echo);
  RawClient client(port_);
  ASSERT_TRUE(client.Send(
      "GET /1 HTTP/1.1\r\nHost: t\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  const std::string all = client.ReadUntilClose();
  const size_t one = all.find("GET /1");
  const size_t two = all.find("GET /2");
  ASSERT_NE(one, std::string::npos) << all;
  ASSERT_NE(two, std::string::npos) << all;
  EXPECT_LT(one, two);
  EXPECT_NE(all.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(client.eof());
}

TEST_F(HttpTest, StreamedChunksArrivePieceByPiece) {
  // The server sends the next piece (after a short timer) only once the client has received the
  // previous one, so each piece must reach the client on its own.
  struct State {
    std::shared_ptr<Responder> responder;
    std::unique_ptr<boost::asio::steady_timer> timer;
    int sent = 0;
    std::string received;
    std::vector<std::string> pieces;
  };
  auto state = std::make_shared<State>();  // loop thread only
  auto piece = [](int i) { return "data: " + std::to_string(i) + "\n\n"; };
  StartServer({}, [state, piece](Request, std::shared_ptr<Responder> responder) {
    responder->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    responder->Send(piece(state->sent++));
    state->responder = responder;
  });
  Shared<std::optional<Status>> done;
  Shared<int> status;
  auto request = Get("/stream");
  loop_.Run([&] {
    StartRequest(
        loop_.io(), request, nullptr,
        [&](int code, const auto& headers) {
          status.Update([&](int& s) { s = code; });
          bool sse = false;
          for (const auto& [name, value] : headers) {
            sse = sse || (name == "content-type" && value == "text/event-stream");
          }
          EXPECT_TRUE(sse);
        },
        [&, state, piece](std::string_view data) {
          state->pieces.emplace_back(data);
          state->received.append(data);
          if (state->received.size() < static_cast<size_t>(state->sent) * piece(0).size()) return;
          state->timer = std::make_unique<boost::asio::steady_timer>(
              loop_.io(), std::chrono::milliseconds(10));
          state->timer->async_wait([state, piece](const boost::system::error_code&) {
            if (state->sent < 5) {
              state->responder->Send(piece(state->sent++));
            } else {
              state->responder->End();
            }
          });
        },
        [&](Status s) { done.Update([&](auto& d) { d = s; }); });
  });
  ASSERT_TRUE(done.WaitFor([](const auto& d) { return d.has_value(); }));
  EXPECT_TRUE(done.Get()->ok()) << done.Get()->ToString();
  EXPECT_EQ(status.Get(), 200);
  loop_.Run([&] {
    EXPECT_EQ(state->received, piece(0) + piece(1) + piece(2) + piece(3) + piece(4));
    EXPECT_GE(state->pieces.size(), 5u);
    EXPECT_EQ(state->responder->queued_bytes(), 0);
    state->responder.reset();
    state->timer.reset();
  });
}

TEST_F(HttpTest, StreamHeadIsAnnouncedBeforeItsBodyWhenItArrivesAlone) {
  // The head goes out alone and the body only later: the client's eager parser completes the head
  // and then asks for more; the head must still be announced at once, before any body piece.
  struct State {
    std::shared_ptr<Responder> responder;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  auto state = std::make_shared<State>();
  StartServer({}, [this, state](Request, std::shared_ptr<Responder> responder) {
    responder->BeginStream(200, "text/event-stream");
    state->responder = responder;
    state->timer = std::make_unique<boost::asio::steady_timer>(loop_.io(),
                                                               std::chrono::milliseconds(100));
    state->timer->async_wait([state](const boost::system::error_code&) {
      state->responder->Send("data: late\n\n");
      state->responder->End();
    });
  });
  Shared<std::optional<Status>> done;
  Shared<std::vector<std::string>> events;
  auto request = Get("/late");
  loop_.Run([&] {
    StartRequest(
        loop_.io(), request, nullptr,
        [&](int code, const auto&) {
          events.Update([&](auto& e) { e.push_back("head " + std::to_string(code)); });
        },
        [&](std::string_view data) {
          events.Update([&](auto& e) { e.push_back(std::string(data)); });
        },
        [&](Status s) { done.Update([&](auto& d) { d = s; }); });
  });
  ASSERT_TRUE(done.WaitFor([](const auto& d) { return d.has_value(); }));
  EXPECT_TRUE(done.Get()->ok()) << done.Get()->ToString();
  EXPECT_EQ(events.Get(), (std::vector<std::string>{"head 200", "data: late\n\n"}));
  loop_.Run([&] {
    state->responder.reset();
    state->timer.reset();
  });
}

TEST_F(HttpTest, ClientLeavingMidStreamFiresOnClose) {
  auto closed = std::make_shared<Shared<int>>();
  auto kept = std::make_shared<std::shared_ptr<Responder>>();  // loop thread only
  StartServer({}, [closed, kept](Request, std::shared_ptr<Responder> responder) {
    responder->BeginStream(200, "text/event-stream");
    responder->Send("first");
    responder->OnClose([closed] { closed->Update([](int& n) { ++n; }); });
    *kept = responder;
  });
  Shared<std::optional<Status>> done;
  std::shared_ptr<ClientCall> call;
  auto request = Get("/stream");
  loop_.Run([&] {
    call = StartRequest(
        loop_.io(), request, nullptr, nullptr, [&](std::string_view) { call->Cancel(); },
        [&](Status s) { done.Update([&](auto& d) { d = s; }); });
  });
  ASSERT_TRUE(done.WaitFor([](const auto& d) { return d.has_value(); }));
  EXPECT_EQ(done.Get()->code(), StatusCode::kCancelled) << done.Get()->ToString();
  ASSERT_TRUE(closed->WaitFor([](int n) { return n > 0; }));
  loop_.Run([&] {
    EXPECT_TRUE((*kept)->closed());
    (*kept)->Send("after");  // no-ops on a dead exchange
    (*kept)->End();
    (*kept)->OnClose([closed] { closed->Update([](int& n) { n += 100; }); });  // at once? no:
    kept->reset();
    call.reset();
  });
  EXPECT_EQ(closed->Get(), 101);  // OnClose set after the close runs at once (not ended)

  // The same with a raw socket that just goes away.
  RawClient raw(port_);
  ASSERT_TRUE(raw.Send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n"));
  std::string got;
  ASSERT_TRUE(raw.ReadUntil(&got, "first"));
  raw.Close();
  ASSERT_TRUE(closed->WaitFor([](int n) { return n == 102; }));
}

TEST_F(HttpTest, OversizedBodyGets413) {
  ServerOptions options;
  options.max_body_bytes = 1000;
  StartServer(options, Echo);
  // Content-Length over the limit, body sent in full by the layer's client.
  auto post = Get("/big");
  post.method = "POST";
  post.body = std::string(200000, 'b');
  auto r = Fetch(post, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("\"code\":\"request_too_large\""), std::string::npos) << r->body;

  // A huge Content-Length, refused from the head alone.
  RawClient a(port_);
  ASSERT_TRUE(a.Send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\nabc"));
  const std::string ra = a.ReadUntilClose();
  EXPECT_EQ(ra.rfind("HTTP/1.1 413", 0), 0u) << ra;
  EXPECT_NE(ra.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(a.eof());

  // Chunked, over the limit across chunks.
  RawClient b(port_);
  std::string chunked = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 5; ++i) chunked += "12c\r\n" + std::string(300, 'c') + "\r\n";
  chunked += "0\r\n\r\n";
  ASSERT_TRUE(b.Send(chunked));
  const std::string rb = b.ReadUntilClose();
  EXPECT_EQ(rb.rfind("HTTP/1.1 413", 0), 0u) << rb;
  EXPECT_TRUE(b.eof());

  // Within the limit, chunked works.
  RawClient c(port_);
  ASSERT_TRUE(c.Send("POST /ok HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  const std::string rc = c.ReadResponse();
  EXPECT_NE(rc.find("POST /ok   abcde"), std::string::npos) << rc;
}

TEST_F(HttpTest, SlowClientGets408AndSilentClientIsClosed) {
  ServerOptions options;
  options.read_timeout_s = 0.5;
  StartServer(options, Echo);
  RawClient slow(port_);
  ASSERT_TRUE(slow.Send("GET / HTTP/1.1\r\nHost: t\r\n"));  // never finishes the head
  const std::string r = slow.ReadUntilClose();
  EXPECT_EQ(r.rfind("HTTP/1.1 408", 0), 0u) << r;
  EXPECT_NE(r.find("request_timeout"), std::string::npos);
  EXPECT_TRUE(slow.eof());

  RawClient slow_body(port_);
  ASSERT_TRUE(slow_body.Send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc"));
  const std::string rb = slow_body.ReadUntilClose();
  EXPECT_EQ(rb.rfind("HTTP/1.1 408", 0), 0u) << rb;

  RawClient silent(port_);  // connects and sends nothing: closed without an answer
  EXPECT_EQ(silent.ReadUntilClose(), "");
  EXPECT_TRUE(silent.eof());
  EXPECT_EQ(server_->Stats().timed_out, 3);
  EXPECT_EQ(server_->Stats().bad_requests, 0);
}

TEST_F(HttpTest, IdleKeepAliveConnectionIsClosedSilently) {
  ServerOptions options;
  options.idle_timeout_s = 0.3;
  StartServer(options, Echo);
  RawClient client(port_);
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_NE(client.ReadResponse().find("200 OK"), std::string::npos);
  EXPECT_EQ(client.ReadUntilClose(), "");
  EXPECT_TRUE(client.eof());
}

TEST_F(HttpTest, MalformedRequestsGet400) {
  StartServer({}, Echo);
  for (const std::string& bad : {
           std::string("GARBAGE\r\n\r\n"),
           std::string("GET /\r\n\r\n"),
           std::string("GET / HTTP/1.1\r\nBad Header\r\n\r\n"),
           std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
           std::string("GET http://elsewhere/ HTTP/1.1\r\nHost: t\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
           std::string("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
           std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11),  // TLS hello
           "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;" +
               std::string(20000, 'e'),  // an endless chunk extension
           std::string("GET / HTTP/9.9\r\n\r\n"),
           std::string("GET / HTTX/1.1\r\n\r\n"),
           std::string("GET / HTTP/1.1 extra\r\n\r\n"),
           std::string("G(T / HTTP/1.1\r\n\r\n"),
           std::string("GET /a\x01 HTTP/1.1\r\n\r\n"),
           std::string("GET / HTTP/1.1\r\nNoColon\r\n\r\n"),
           std::string("GET / HTTP/1.1\r\n: x\r\n\r\n"),
           std::string("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"),
       }) {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(bad));
    const std::string r = client.ReadUntilClose();
    EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << "for " << bad << " got " << r;
    // The same OpenAI-shaped error body as every other error of the server's own.
    EXPECT_NE(r.find("Content-Type: application/json"), std::string::npos) << r;
    EXPECT_NE(r.find("\r\n\r\n{\"error\":{\"message\":\""), std::string::npos) << r;
    EXPECT_NE(r.find("\"code\":\"bad_request\"}}"), std::string::npos) << r;
    EXPECT_TRUE(client.eof());
  }
  // The server goes on, and counted them.
  RawClient good(port_);
  ASSERT_TRUE(good.Send("GET /fine HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_NE(good.ReadResponse().find("200 OK"), std::string::npos);
  EXPECT_EQ(server_->Stats().bad_requests, 21);
}

TEST_F(HttpTest, HugeHeaderGets431) {
  ServerOptions options;
  options.max_header_bytes = 4096;
  StartServer(options, Echo);
  RawClient client(port_);
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(8000, 'h') +
                          "\r\n\r\n"));
  const std::string r = client.ReadUntilClose();
  EXPECT_EQ(r.rfind("HTTP/1.1 431", 0), 0u) << r;

  RawClient endless(port_);  // a head that never ends is refused as soon as it passes the limit
  ASSERT_TRUE(endless.Send("GET / HTTP/1.1\r\n" + std::string(6000, 'x')));
  EXPECT_EQ(endless.ReadUntilClose().rfind("HTTP/1.1 431", 0), 0u);
}

TEST_F(HttpTest, ExpectContinueHttp10AndHead) {
  StartServer({}, [](Request request, std::shared_ptr<Responder> responder) {
    if (request.path == "/stream") {
      responder->BeginStream(200, "text/plain");
      responder->Send("one ");
      responder->Send("two");
      responder->End();
      return;
    }
    Echo(std::move(request), std::move(responder));
  });
  RawClient c(port_);
  ASSERT_TRUE(c.Send("POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  std::string got;
  ASSERT_TRUE(c.ReadUntil(&got, "HTTP/1.1 100 Continue\r\n\r\n"));
  ASSERT_TRUE(c.Send("xyz"));
  ASSERT_TRUE(c.ReadUntil(&got, "POST /e   xyz"));

  RawClient old(port_);  // HTTP/1.0 gets an unframed stream that ends with the connection
  ASSERT_TRUE(old.Send("GET /stream HTTP/1.0\r\n\r\n"));
  const std::string r = old.ReadUntilClose();
  EXPECT_EQ(r.find("chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\n\r\none two"), std::string::npos) << r;

  RawClient head(port_);
  ASSERT_TRUE(head.Send("HEAD /h HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  const std::string rh = head.ReadUntilClose();
  EXPECT_NE(rh.find("Content-Length: 10"), std::string::npos) << rh;
  EXPECT_EQ(rh.find("HEAD /h"), std::string::npos) << rh;
}

TEST_F(HttpTest, ConnectionsBeyondTheLimitAreRefused) {
  ServerOptions options;
  options.max_connections = 1;
  StartServer(options, Echo);
  RawClient first(port_);
  ASSERT_TRUE(first.Send("GET / HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_NE(first.ReadResponse().find("200 OK"), std::string::npos);
  RawClient second(port_);
  const std::string r = second.ReadUntilClose();
  EXPECT_EQ(r.rfind("HTTP/1.1 503", 0), 0u) << r;
  EXPECT_NE(r.find("Retry-After: 1\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\"code\":\"server_busy\""), std::string::npos) << r;
  EXPECT_TRUE(second.eof());
  EXPECT_EQ(loop_.Run([&] { return server_->open_connections(); }), 1);
  const ServerStats stats = server_->Stats();  // from this thread
  EXPECT_EQ(stats.open_connections, 1);
  EXPECT_EQ(stats.accepted, 1);
  EXPECT_EQ(stats.refused, 1);
}

TEST_F(HttpTest, ClientErrorsNameTheStage) {
  // Nobody answers: the head never comes.
  StartServer({}, [](Request, std::shared_ptr<Responder>) {});
  auto r = Get("/never");
  r.timeout_s = 0.3;
  auto timed_out = Fetch(r, nullptr);
  ASSERT_FALSE(timed_out.ok());
  EXPECT_EQ(timed_out.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(timed_out.status().message().find("read response head"), std::string::npos)
      << timed_out.status().ToString();

  // Nobody listens.
  const int closed_port = testing::UnusedPort();
  ClientRequest refused;
  refused.url = *ParseUrl("http://127.0.0.1:" + std::to_string(closed_port) + "/");
  auto failed = Fetch(refused, nullptr);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("connect to 127.0.0.1:"), std::string::npos)
      << failed.status().ToString();

  ClientRequest bad_scheme;
  bad_scheme.url = *ParseUrl("ws://127.0.0.1/");
  EXPECT_EQ(Fetch(bad_scheme, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(HttpTest, OnDoneTellsAWrittenResponseFromAnAbandonedOne) {
  auto outcomes = std::make_shared<Shared<std::vector<std::string>>>();
  auto kept = std::make_shared<std::shared_ptr<Responder>>();  // loop thread only
  StartServer({}, [outcomes, kept](Request request, std::shared_ptr<Responder> responder) {
    responder->OnDone([outcomes, path = request.path](bool completed) {
      outcomes->Update([&](auto& v) { v.push_back(path + (completed ? " written" : " left")); });
    });
    if (request.path == "/whole") {
      responder->Respond(200, "text/plain", std::string(300000, 'w'));
      return;
    }
    responder->BeginStream(200, "text/event-stream");  // never ends: the client leaves
    responder->Send("first");
    *kept = responder;
  });
  RawClient whole(port_);
  ASSERT_TRUE(whole.Send("GET /whole HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string body = whole.ReadResponse();
  EXPECT_EQ(body.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_NE(body.find("\r\n\r\n" + std::string(300000, 'w')), std::string::npos);
  ASSERT_TRUE(outcomes->WaitFor([](const auto& v) { return v.size() == 1; }));
  RawClient stream(port_);
  ASSERT_TRUE(stream.Send("GET /stream HTTP/1.1\r\nHost: t\r\n\r\n"));
  std::string got;
  ASSERT_TRUE(stream.ReadUntil(&got, "first"));
  stream.Close();
  ASSERT_TRUE(outcomes->WaitFor([](const auto& v) { return v.size() == 2; }));
  EXPECT_EQ(outcomes->Get(), (std::vector<std::string>{"/whole written", "/stream left"}));
  loop_.Run([&] {
    // Set once it is over: runs at once with the outcome.
    (*kept)->OnDone([outcomes](bool completed) {
      outcomes->Update([&](auto& v) { v.push_back(completed ? "late written" : "late left"); });
    });
    kept->reset();
  });
  EXPECT_EQ(outcomes->Get().back(), "late left");
}

TEST_F(HttpTest, AClientThatDoesNotReadIsDroppedOnceItsOutputPilesUp) {
  // The handler streams 256 KiB pieces every millisecond to a client that never reads: once
  // the socket buffers are full, the queue grows past max_queued_bytes and the connection goes.
  struct State {
    std::shared_ptr<Responder> responder;
    std::unique_ptr<boost::asio::steady_timer> timer;
    int64_t sent = 0;
  };
  auto state = std::make_shared<State>();  // loop thread only
  auto closed = std::make_shared<Shared<int64_t>>();
  ServerOptions options;
  options.max_queued_bytes = 1 << 20;
  options.write_timeout_s = 60;  // not what ends it
  StartServer(options, [this, state, closed](Request, std::shared_ptr<Responder> responder) {
    responder->BeginStream(200, "application/octet-stream");
    responder->OnClose([state, closed] {
      closed->Update([&](int64_t& n) { n = state->sent; });
    });
    state->responder = responder;
    state->timer = std::make_unique<boost::asio::steady_timer>(loop_.io());
    auto tick = std::make_shared<std::function<void()>>();
    *tick = [state, tick] {
      if (!state->responder || state->responder->closed()) return;  // closed, or test over
      state->responder->Send(std::string(256 << 10, 'x'));
      state->sent += 256 << 10;
      state->timer->expires_after(std::chrono::milliseconds(1));
      state->timer->async_wait([tick](const boost::system::error_code& ec) {
        if (!ec) (*tick)();
      });
    };
    (*tick)();
  });
  RawClient idle(port_);
  ASSERT_TRUE(idle.Send("GET / HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(closed->WaitFor([](int64_t n) { return n > 0; }, 20));
  // Dropped after the socket buffers filled, long before the write timeout, far below 1 GiB.
  EXPECT_LT(closed->Get(), int64_t{1} << 30);
  loop_.Run([&] {
    EXPECT_TRUE(state->responder->closed());
    state->timer->cancel();
    state->responder.reset();
  });
  loop_.Run([&] { state->timer.reset(); });
}

// Sends "piece;" every 100 ms, 15 times, then ends the response.
struct SlowStream {
  std::shared_ptr<Responder> responder;
  std::unique_ptr<boost::asio::steady_timer> timer;
  int sent = 0;
  static void Tick(const std::shared_ptr<SlowStream>& s) {
    if (++s->sent > 15) {
      s->responder->End();
      return;
    }
    s->responder->Send("piece;");
    s->timer->expires_after(std::chrono::milliseconds(100));
    s->timer->async_wait([s](const boost::system::error_code& ec) {
      if (!ec) Tick(s);
    });
  }
};

TEST_F(HttpTest, WriteTimeoutDropsAStalledClientButNotASlowStream) {
  ServerOptions options;
  options.write_timeout_s = 0.5;
  options.max_queued_bytes = 0;  // only the timeout ends it
  auto stream = std::make_shared<SlowStream>();  // loop thread only
  auto done = std::make_shared<Shared<std::vector<std::string>>>();
  StartServer(options, [this, stream, done](Request request, std::shared_ptr<Responder> responder) {
    responder->OnDone([done, path = request.path](bool completed) {
      done->Update([&](auto& v) { v.push_back(path + (completed ? " written" : " dropped")); });
    });
    if (request.path == "/big") {  // far more than the socket buffers take
      responder->Respond(200, "application/octet-stream", std::string(64 << 20, 'b'));
      return;
    }
    // Each write is quick; the whole stream outlasts the write timeout three times.
    responder->BeginStream(200, "text/plain");
    stream->responder = responder;
    stream->timer = std::make_unique<boost::asio::steady_timer>(loop_.io());
    SlowStream::Tick(stream);
  });
  RawClient stalled(port_);
  ASSERT_TRUE(stalled.Send("GET /big HTTP/1.1\r\nHost: t\r\n\r\n"));  // never reads
  RawClient reader(port_);
  ASSERT_TRUE(reader.Send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string r = reader.ReadResponse(10);
  std::string want;
  for (int i = 0; i < 15; ++i) want += "piece;";
  EXPECT_EQ(Unchunk(BodyOf(r)), want) << r;
  ASSERT_TRUE(done->WaitFor([](const auto& v) { return v.size() == 2; }, 10));
  auto outcomes = done->Get();
  std::sort(outcomes.begin(), outcomes.end());
  EXPECT_EQ(outcomes, (std::vector<std::string>{"/big dropped", "/slow written"}));
  EXPECT_EQ(server_->Stats().timed_out, 1);
  loop_.Run([&] {
    stream->responder.reset();
    stream->timer.reset();
  });
}

// The parsing path on its own, fed one byte at a time.
TEST(RequestReaderTest, ParsesAcrossArbitrarySplits) {
  internal::RequestReader reader({4096, 1000});
  const std::string bytes =
      "POST /p?q=1 HTTP/1.1\r\nHost: t\r\nX-A: b\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\nGET /next HTTP/1.1\r\n\r\n";
  std::string pending;
  size_t i = 0;
  int headers_seen = 0;
  while (reader.state() != internal::RequestReader::State::kComplete && i < bytes.size()) {
    pending.push_back(bytes[i++]);
    for (;;) {
      pending.erase(0, reader.Feed(pending));
      if (reader.state() != internal::RequestReader::State::kHeader) break;
      ++headers_seen;
    }
    ASSERT_NE(reader.state(), internal::RequestReader::State::kError) << reader.error_message();
  }
  ASSERT_EQ(reader.state(), internal::RequestReader::State::kComplete);
  EXPECT_EQ(headers_seen, 1);
  const Request r = reader.TakeRequest("1.2.3.4:5", 7);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/p");
  EXPECT_EQ(r.query, "q=1");
  EXPECT_EQ(r.Header("x-a"), "b");
  EXPECT_EQ(r.body, "abc");
  EXPECT_EQ(r.remote, "1.2.3.4:5");
  EXPECT_TRUE(reader.keep_alive());
  EXPECT_TRUE(pending.empty());
  EXPECT_EQ(bytes.substr(i), "GET /next HTTP/1.1\r\n\r\n");
}

}  // namespace
}  // namespace loom::net
