#include "loom/serve/http_message.h"

#include <gtest/gtest.h>

#include <string>

namespace loom::serve {
namespace {

HeadParse Parse(std::string_view text, HttpRequest* req, HttpLimits limits = {}) {
  return ParseRequestHead(text, limits, req);
}

TEST(HttpMessageTest, ParsesAGetRequest) {
  HttpRequest req;
  const std::string text = "GET /v1/models?x=1&y HTTP/1.1\r\nHost: a\r\nX-Thing:  v  \r\n\r\nrest";
  const HeadParse r = Parse(text, &req);
  ASSERT_EQ(r.kind, HeadParse::kComplete) << r.message;
  EXPECT_EQ(r.head_bytes, text.size() - 4);
  EXPECT_EQ(req.method, "GET");
  EXPECT_EQ(req.target, "/v1/models?x=1&y");
  EXPECT_EQ(req.path, "/v1/models");
  EXPECT_EQ(req.query, "x=1&y");
  EXPECT_EQ(req.version_minor, 1);
  EXPECT_TRUE(req.keep_alive);
  EXPECT_EQ(req.Header("x-thing"), "v");
  EXPECT_EQ(req.Header("host"), "a");
  EXPECT_EQ(req.Header("missing"), "");
  EXPECT_EQ(req.content_length, 0);
}

TEST(HttpMessageTest, ReadsContentLengthConnectionAndExpect) {
  HttpRequest req;
  ASSERT_EQ(Parse("POST /a HTTP/1.1\r\nContent-Length: 12\r\nConnection: Close\r\n"
                  "Expect: 100-Continue\r\n\r\n",
                  &req)
                .kind,
            HeadParse::kComplete);
  EXPECT_EQ(req.content_length, 12);
  EXPECT_FALSE(req.keep_alive);
  EXPECT_TRUE(req.expect_continue);

  ASSERT_EQ(Parse("GET / HTTP/1.0\r\n\r\n", &req).kind, HeadParse::kComplete);
  EXPECT_FALSE(req.keep_alive);
  EXPECT_EQ(req.version_minor, 0);
  ASSERT_EQ(Parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &req).kind,
            HeadParse::kComplete);
  EXPECT_TRUE(req.keep_alive);
}

TEST(HttpMessageTest, AcceptsBareLineFeedsAndLeadingEmptyLines) {
  HttpRequest req;
  const HeadParse r = Parse("\r\n\r\nGET /x HTTP/1.1\nHost: a\n\n", &req);
  ASSERT_EQ(r.kind, HeadParse::kComplete) << r.message;
  EXPECT_EQ(req.path, "/x");
  EXPECT_EQ(req.Header("host"), "a");
}

TEST(HttpMessageTest, WaitsForMoreBytesUntilTheHeadIsComplete) {
  HttpRequest req;
  EXPECT_EQ(Parse("", &req).kind, HeadParse::kIncomplete);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: a\r\n", &req).kind, HeadParse::kIncomplete);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: a\r\n\r", &req).kind, HeadParse::kIncomplete);
}

TEST(HttpMessageTest, RefusesOversizedHeadsAndBodies) {
  HttpRequest req;
  HttpLimits limits;
  limits.max_head_bytes = 64;
  limits.max_body_bytes = 100;
  HeadParse r = Parse("GET / HTTP/1.1\r\nX: " + std::string(100, 'a'), &req, limits);
  EXPECT_EQ(r.kind, HeadParse::kError);
  EXPECT_EQ(r.status, 431);
  r = Parse("GET / HTTP/1.1\r\nX: " + std::string(100, 'a') + "\r\n\r\n", &req, limits);
  EXPECT_EQ(r.status, 431);
  r = Parse("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", &req, limits);
  EXPECT_EQ(r.kind, HeadParse::kError);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.message.find("101"), std::string::npos);
  limits.max_head_bytes = 1 << 20;
  limits.max_headers = 3;
  r = Parse("GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\n\r\n", &req, limits);
  EXPECT_EQ(r.status, 431);
}

TEST(HttpMessageTest, RefusesMalformedRequestsWithTheRightStatus) {
  struct Case {
    const char* text;
    int status;
  };
  const Case cases[] = {
      {"GET /\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1 extra\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET http://x/ HTTP/1.1\r\n\r\n", 400},
      {"GET /a\x01 HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTX/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411},
      {"POST / HTTP/1.1\r\nExpect: something\r\n\r\n", 417},
  };
  for (const Case& c : cases) {
    HttpRequest req;
    const HeadParse r = Parse(c.text, &req);
    EXPECT_EQ(r.kind, HeadParse::kError) << c.text;
    EXPECT_EQ(r.status, c.status) << c.text;
    EXPECT_FALSE(r.message.empty());
  }
  // Repeating the same length is allowed.
  HttpRequest req;
  EXPECT_EQ(Parse("POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n", &req).kind,
            HeadParse::kComplete);
}

TEST(HttpMessageTest, WritesResponseHeadsAndChunks) {
  EXPECT_EQ(ResponseHead(200, "application/json", {{"X-A", "b"}}, 5, true),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
            "Connection: keep-alive\r\nX-A: b\r\n\r\n");
  EXPECT_EQ(ResponseHead(503, "text/event-stream", {}, -1, false),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  std::string out;
  AppendChunk("hello, world!!!!!", &out);
  AppendChunk("", &out);
  EXPECT_EQ(out, "11\r\nhello, world!!!!!\r\n");
  EXPECT_EQ(ReasonPhrase(404), "Not Found");
  EXPECT_EQ(ReasonPhrase(299), "Unknown");
}

TEST(HttpMessageTest, PercentDecodesPaths) {
  EXPECT_EQ(PercentDecode("a%20b%2Fc"), "a b/c");
  EXPECT_EQ(PercentDecode("100%"), "100%");
  EXPECT_EQ(PercentDecode("%zz%4"), "%zz%4");
  EXPECT_EQ(PercentDecode("a+b"), "a+b");
}

}  // namespace
}  // namespace loom::serve
