#include "loom/fetch/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "loom/fetch/fake_hub.h"

namespace loom::fetch {
namespace {

using testing::FakeFile;
using testing::ClosedLoopbackPort;
using testing::FakeHub;
using testing::FakeRepo;

const std::string kCommit = "1111111111111111111111111111111111111111";

// Collects a 2xx body.
class StringSink : public BodySink {
 public:
  Status Begin(const HttpHead& head) override {
    status = head.status;
    ++begins;
    return OkStatus();
  }
  Status Write(std::span<const std::byte> data) override {
    text.append(reinterpret_cast<const char*>(data.data()), data.size());
    return OkStatus();
  }
  int status = 0;
  int begins = 0;
  std::string text;
};


class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The fake hub is on loopback: a proxy from the environment must not be asked.
    ::unsetenv("http_proxy");
    ::unsetenv("HTTP_PROXY");
    ::unsetenv("all_proxy");
    ::unsetenv("ALL_PROXY");
    StatusOr<std::unique_ptr<FakeHub>> hub = FakeHub::Start();
    ASSERT_TRUE(hub.ok()) << hub.status().ToString();
    hub_ = std::move(hub).value();
    FakeRepo repo{"org/m", kCommit, {}, "", ""};
    repo.files.push_back({"config.json", "{\"dim\": 4}", false, false});
    repo.files.push_back({"big.bin", std::string(100000, 'x'), true, false});
    hub_->AddRepo(repo);
    StatusOr<HttpClient> client = HttpClient::Create(options_);
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
  }

  HttpOptions options_;
  std::unique_ptr<FakeHub> hub_;
  HttpClient client_;
};

TEST_F(HttpClientTest, KeepsASmallBodyWithoutASink) {
  StatusOr<HttpResult> r =
      client_.Get({hub_->endpoint() + "/org/m/resolve/main/config.json", "", -1}, nullptr, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status(), 200);
  EXPECT_EQ(r->body, "{\"dim\": 4}");
  EXPECT_EQ(r->final_head().Header("x-repo-commit"), kCommit);
}

TEST_F(HttpClientTest, FollowsRedirectsAndReportsEveryHop) {
  StringSink sink;
  StatusOr<HttpResult> r =
      client_.Get({hub_->endpoint() + "/org/m/resolve/main/big.bin", "", -1}, &sink, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->hops.size(), 2u);
  EXPECT_EQ(r->hops[0].status, 302);
  EXPECT_EQ(r->hops[0].Header("x-linked-etag"),
            "\"" + FakeHub::Sha256Hex(std::string(100000, 'x')) + "\"");
  EXPECT_EQ(r->status(), 200);
  EXPECT_EQ(sink.begins, 1);
  EXPECT_EQ(sink.text, std::string(100000, 'x'));
}

TEST_F(HttpClientTest, BearerTokenGoesOnlyToTheFirstOrigin) {
  StringSink sink;
  StatusOr<HttpResult> r =
      client_.Get({hub_->endpoint() + "/org/m/resolve/main/big.bin", "secret", -1}, &sink, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<testing::FakeRequest> requests = hub_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].listener, "hub");
  EXPECT_EQ(requests[0].authorization, "Bearer secret");
  EXPECT_EQ(requests[1].listener, "cdn");
  EXPECT_EQ(requests[1].authorization, "");
}

TEST_F(HttpClientTest, AsksForARangeOnEveryHop) {
  StringSink sink;
  StatusOr<HttpResult> r =
      client_.Get({hub_->endpoint() + "/org/m/resolve/main/big.bin", "", 99990}, &sink, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status(), 206);
  EXPECT_EQ(r->final_head().Header("content-range"), "bytes 99990-99999/100000");
  EXPECT_EQ(sink.text, std::string(10, 'x'));
  for (const auto& req : hub_->requests()) EXPECT_EQ(req.range, "bytes=99990-");
}

TEST_F(HttpClientTest, ErrorStatusIsAResultWithItsBody) {
  StringSink sink;
  StatusOr<HttpResult> r =
      client_.Get({hub_->endpoint() + "/org/m/resolve/main/nope", "", -1}, &sink, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status(), 404);
  EXPECT_EQ(r->final_head().Header("x-error-code"), "EntryNotFound");
  EXPECT_NE(r->body.find("Entry not found"), std::string::npos);
  EXPECT_EQ(sink.begins, 0);
}

TEST_F(HttpClientTest, BodyOverTheLimitIsRefused) {
  StatusOr<HttpResult> r =
      client_.Get({hub_->endpoint() + "/org/m/resolve/main/big.bin", "", -1}, nullptr, 1000);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
}

TEST_F(HttpClientTest, ConnectionRefusedIsUnavailable) {
  const std::string url = "http://127.0.0.1:" + std::to_string(ClosedLoopbackPort()) + "/x";
  StatusOr<HttpResult> r = client_.Get({url, "", -1}, nullptr, 1000);
  ASSERT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("cannot connect"), std::string::npos);
  EXPECT_NE(r.status().message().find(url), std::string::npos);
}

TEST_F(HttpClientTest, DroppedConnectionIsUnavailableAfterTheBytesReceived) {
  hub_->DropAfter("big.bin", 30000, 1);
  StringSink sink;
  StatusOr<HttpResult> r =
      client_.Get({hub_->endpoint() + "/org/m/resolve/main/big.bin", "", -1}, &sink, 1 << 20);
  ASSERT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_EQ(sink.text.size(), 30000u);
}

TEST_F(HttpClientTest, StalledTransferTimesOutInsteadOfHanging) {
  options_.stall_timeout_ms = 1000;
  StatusOr<HttpClient> client = HttpClient::Create(options_);
  ASSERT_TRUE(client.ok());
  hub_->StallAfter("big.bin", 5000, 1);
  StringSink sink;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<HttpResult> r =
      client->Get({hub_->endpoint() + "/org/m/resolve/main/big.bin", "", -1}, &sink, 1 << 20);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_EQ(sink.text.size(), 5000u);
  EXPECT_LT(seconds, 30.0);
}

TEST(UrlTest, OriginsAndEncoding) {
  EXPECT_EQ(UrlOrigin("https://HuggingFace.co/org/m"), "https://huggingface.co:443");
  EXPECT_EQ(UrlOrigin("http://127.0.0.1:8080/x?y=1"), "http://127.0.0.1:8080");
  EXPECT_EQ(UrlOrigin("ftp://host/x"), "");
  EXPECT_EQ(UrlOrigin("not a url"), "");
  EXPECT_EQ(UrlEncode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(UrlEncode("a b/c.gguf", true), "a%20b/c.gguf");
}

}  // namespace
}  // namespace loom::fetch
