#include "loom/base/status.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd value ", x);
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  LOOM_ASSIGN_OR_RETURN(int h, Half(x));
  LOOM_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = DataLossError("gguf: truncated at ", 42);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.ToString(), "DATA_LOSS: gguf: truncated at 42");
  EXPECT_EQ(s.WithContext("model.gguf").message(), "model.gguf: gguf: truncated at 42");
}

TEST(StatusTest, AssignOrReturnPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  StatusOr<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd value 3");
}

TEST(StatusTest, StatusOrFromOkStatusIsInternalError) {
  StatusOr<int> r = OkStatus();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace loom
