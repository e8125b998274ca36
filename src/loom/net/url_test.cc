#include "loom/net/url.h"

#include <gtest/gtest.h>

namespace loom::net {
namespace {

TEST(ParseUrlTest, DefaultPortsAndTargets) {
  auto a = ParseUrl("http://Example.COM");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->scheme, "http");
  EXPECT_EQ(a->host, "example.com");
  EXPECT_EQ(a->port, 80);
  EXPECT_EQ(a->target, "/");
  EXPECT_FALSE(a->tls());

  auto b = ParseUrl("WSS://hub.example:8443/v1/nodes?token=x#frag");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->scheme, "wss");
  EXPECT_EQ(b->port, 8443);
  EXPECT_EQ(b->target, "/v1/nodes?token=x");
  EXPECT_TRUE(b->tls());
  EXPECT_TRUE(b->websocket());
  EXPECT_EQ(b->HostPort(), "hub.example:8443");

  auto c = ParseUrl("https://h?q=1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->port, 443);
  EXPECT_EQ(c->target, "/?q=1");
}

TEST(ParseUrlTest, Ipv6Literals) {
  auto a = ParseUrl("http://[::1]:8080/x");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 8080);
  EXPECT_EQ(a->HostPort(), "[::1]:8080");
  EXPECT_EQ(a->ToString(), "http://[::1]:8080/x");
  auto b = ParseUrl("ws://[fe80::1]");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, 80);
}

TEST(ParseUrlTest, RefusesMalformed) {
  for (const char* bad :
       {"", "localhost:80", "ftp://x/", "http://", "http://:80/", "http://h:0/", "http://h:65536",
        "http://h:8x/", "http://h:/", "http://user@h/", "http://[::1/", "http://[::1]x/",
        "http://[]/", "http://h/a b", "http://h/\x01", "http://h\\x/", "http://h h/"}) {
    EXPECT_FALSE(ParseUrl(bad).ok()) << bad;
  }
  const auto status = ParseUrl("gopher://h/").status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("gopher"), std::string::npos);
}

TEST(PercentDecodeTest, DecodesEscapesAndKeepsMalformedOnes) {
  EXPECT_EQ(PercentDecode("a%20b%2Fc"), "a b/c");
  EXPECT_EQ(PercentDecode("%41%62"), "Ab");
  EXPECT_EQ(PercentDecode("100%"), "100%");
  EXPECT_EQ(PercentDecode("%zz%4"), "%zz%4");
  EXPECT_EQ(PercentDecode("a+b"), "a+b");
}

}  // namespace
}  // namespace loom::net
