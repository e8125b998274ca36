// TLS: HTTPS and wss:// against a self-signed certificate made with the openssl CLI.
#include "loom/net/tls.h"

#include <gtest/gtest.h>

#include <fstream>

#include "loom/net/http_client.h"
#include "loom/net/http_server.h"
#include "loom/net/net_testing.h"
#include "loom/net/ws_testing.h"

namespace loom::net {
namespace {

using testing::RawClient;
using testing::ServerEvents;
using testing::Shared;
using testing::TempDir;
using testing::WsProbe;

void Hello(Request request, std::shared_ptr<Responder> responder) {
  responder->Respond(200, "text/plain", "secure " + request.path);
}

class TlsTest : public testing::ServerTest {
 protected:
  void SetUp() override {
    cert_ = dir_.File("cert.pem");
    key_ = dir_.File("key.pem");
    ASSERT_TRUE(testing::MakeSelfSignedCert(cert_, key_)) << "the openssl CLI failed";
  }
  void StartTls(ServerOptions options = {}) {
    auto tls = MakeServerTls(cert_, key_);
    ASSERT_TRUE(tls.ok()) << tls.status().ToString();
    options.tls = *tls;
    StartServer(options, Hello, testing::EchoUpgrade(events_));
  }
  std::shared_ptr<boost::asio::ssl::context> TrustingOurCert() {
    auto tls = MakeClientTls(cert_);
    EXPECT_TRUE(tls.ok()) << tls.status().ToString();
    return tls.ok() ? *tls : nullptr;
  }
  StatusOr<ClientResponse> Get(const std::string& url,
                               std::shared_ptr<boost::asio::ssl::context> tls) {
    ClientRequest r;
    r.url = *ParseUrl(url);
    r.timeout_s = 10;
    return Fetch(r, std::move(tls));
  }

  TempDir dir_;
  std::string cert_, key_;
  std::shared_ptr<Shared<ServerEvents>> events_ = std::make_shared<Shared<ServerEvents>>();
};

TEST_F(TlsTest, HttpsVerifiesAgainstTheGivenCaOnly) {
  StartTls();
  auto by_ip = Get(Address("https", "/a"), TrustingOurCert());
  ASSERT_TRUE(by_ip.ok()) << by_ip.status().ToString();
  EXPECT_EQ(by_ip->status, 200);
  EXPECT_EQ(by_ip->body, "secure /a");
  auto by_name = Get("https://localhost:" + std::to_string(port_) + "/b", TrustingOurCert());
  ASSERT_TRUE(by_name.ok()) << by_name.status().ToString();
  EXPECT_EQ(by_name->body, "secure /b");

  auto system = MakeClientTls("");
  ASSERT_TRUE(system.ok()) << system.status().ToString();
  for (auto tls : {*system, std::shared_ptr<boost::asio::ssl::context>()}) {
    auto refused = Get(Address("https", "/a"), tls);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(refused.status().message().find("tls handshake with 127.0.0.1:"), std::string::npos)
        << refused.status().ToString();
    EXPECT_NE(refused.status().message().find("certificate verify failed"), std::string::npos)
        << refused.status().ToString();
  }
}

TEST_F(TlsTest, CertificateForAnotherNameIsRefused) {
  cert_ = dir_.File("other.pem");
  key_ = dir_.File("other.key");
  ASSERT_TRUE(testing::MakeSelfSignedCert(cert_, key_, "DNS:other.example"));
  StartTls();
  auto refused = Get(Address("https", "/"), TrustingOurCert());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("mismatch"), std::string::npos)
      << refused.status().ToString();
}

TEST_F(TlsTest, WssEcho) {
  StartTls();
  auto probe = WsProbe::Dial(loop_, Address("wss", "/ws"), TrustingOurCert(),
                             {{"Authorization", "Bearer s"}});
  ASSERT_TRUE(probe->WaitMessage("hello Bearer s"));
  loop_.Run([&] { probe->ws->Send("over tls"); });
  EXPECT_TRUE(probe->WaitMessage("echo: over tls"));
  loop_.Run([&] { probe->ws->Close("done"); });
  ASSERT_TRUE(probe->WaitClosed());
  EXPECT_EQ(*probe->state.Get().closed, "done");
  ASSERT_TRUE(events_->WaitFor([](const ServerEvents& e) { return e.closes.size() == 1; }));
  EXPECT_EQ(events_->Get().closes[0], "closed by the peer (code 1000: done)");
  loop_.Run([&] { probe->ws.reset(); });

  auto system = MakeClientTls("");
  ASSERT_TRUE(system.ok());
  auto refused = WsProbe::Dial(loop_, Address("wss", "/ws"), *system);
  ASSERT_TRUE(refused->WaitOpenOrError());
  ASSERT_TRUE(refused->state.Get().error.has_value());
  EXPECT_NE(refused->state.Get().error->message().find("certificate verify failed"),
            std::string::npos)
      << refused->state.Get().error->ToString();

  auto no_context = WsProbe::Dial(loop_, Address("wss", "/ws"), nullptr);
  ASSERT_TRUE(no_context->WaitOpenOrError());
  EXPECT_EQ(no_context->state.Get().error->code(), StatusCode::kInvalidArgument);
}

TEST_F(TlsTest, WrongProtocolOnEitherSideFailsCleanly) {
  ServerOptions options;
  options.read_timeout_s = 0.5;
  StartTls(options);
  ClientRequest plain;  // plain HTTP to the TLS port
  plain.url = *ParseUrl(Address("http", "/"));
  plain.timeout_s = 5;
  auto r = Fetch(plain, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();

  RawClient silent(port_);  // no ClientHello at all: closed after read_timeout_s
  EXPECT_EQ(silent.ReadUntilClose(), "");
  EXPECT_TRUE(silent.eof());

  // TLS to a plain port.
  testing::LoopThread other_loop;
  auto plain_server = other_loop.Run([&] {
    return std::move(HttpServer::Start(other_loop.io(), {}, Hello, nullptr)).value();
  });
  auto tls_to_plain =
      Get("https://127.0.0.1:" + std::to_string(plain_server->port()) + "/", TrustingOurCert());
  ASSERT_FALSE(tls_to_plain.ok());
  EXPECT_NE(tls_to_plain.status().message().find("tls handshake"), std::string::npos)
      << tls_to_plain.status().ToString();
  other_loop.Run([&] { plain_server.reset(); });
}

TEST(TlsContextTest, ErrorsNameTheFile) {
  TempDir dir;
  const std::string cert = dir.File("c.pem"), key = dir.File("k.pem");
  const std::string cert2 = dir.File("c2.pem"), key2 = dir.File("k2.pem");
  ASSERT_TRUE(testing::MakeSelfSignedCert(cert, key));
  ASSERT_TRUE(testing::MakeSelfSignedCert(cert2, key2));
  EXPECT_TRUE(MakeServerTls(cert, key).ok());

  auto missing = MakeServerTls(dir.File("nope.pem"), key);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.pem"), std::string::npos);

  const std::string junk = dir.File("junk.pem");
  std::ofstream(junk) << "not a certificate\n";
  auto bad = MakeServerTls(junk, key);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("junk.pem"), std::string::npos)
      << bad.status().ToString();
  auto bad_key = MakeServerTls(cert, junk);
  EXPECT_NE(bad_key.status().message().find("private key"), std::string::npos)
      << bad_key.status().ToString();

  auto mismatch = MakeServerTls(cert, key2);
  EXPECT_NE(mismatch.status().message().find("does not match"), std::string::npos)
      << mismatch.status().ToString();

  EXPECT_EQ(MakeClientTls(dir.File("nope.pem")).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(MakeClientTls(junk).ok());
}

}  // namespace
}  // namespace loom::net
