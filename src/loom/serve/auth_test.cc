#include "loom/serve/auth.h"

#include <gtest/gtest.h>

namespace loom::serve {
namespace {

TEST(AuthTest, ConstantTimeEqualsComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secrets", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("secret\0", 7), "secret"));
}

TEST(AuthTest, BearerMatchesTheConfiguredKey) {
  EXPECT_TRUE(BearerMatches("Bearer k-123", "k-123"));
  EXPECT_TRUE(BearerMatches("bearer   k-123 ", "k-123"));
  EXPECT_FALSE(BearerMatches("Bearer k-124", "k-123"));
  EXPECT_FALSE(BearerMatches("Bearer", "k-123"));
  EXPECT_FALSE(BearerMatches("Bearer ", "k-123"));
  EXPECT_FALSE(BearerMatches("Basic k-123", "k-123"));
  EXPECT_FALSE(BearerMatches("Bearerk-123", "k-123"));
  EXPECT_FALSE(BearerMatches("k-123", "k-123"));
  EXPECT_FALSE(BearerMatches("", "k-123"));
  // No key configured: everything passes.
  EXPECT_TRUE(BearerMatches("", ""));
  EXPECT_TRUE(BearerMatches("Bearer anything", ""));
}

}  // namespace
}  // namespace loom::serve
