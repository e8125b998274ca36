#include "loom/parallel/step_wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace loom::parallel {
namespace {

Step MakeStep() {
  Step s;
  s.op = StepOp::kForward;
  s.seq = 7;
  s.tokens = {1, 403, 407};
  s.positions = {0, 1, 2};
  s.slots = {0, 0, 1};
  s.logit_rows = {2};
  return s;
}

TEST(StepWireTest, RoundTrips) {
  std::vector<std::byte> wire;
  EncodeStep(MakeStep(), &wire);
  EXPECT_EQ(static_cast<int64_t>(wire.size()), kInlineBytes);
  Step out;
  ASSERT_TRUE(DecodeStep(wire, 7, 16, 512, 64, 2, &out).ok());
  EXPECT_EQ(out.tokens, MakeStep().tokens);
  EXPECT_EQ(out.positions, MakeStep().positions);
  EXPECT_EQ(out.slots, MakeStep().slots);
  EXPECT_EQ(out.logit_rows, MakeStep().logit_rows);
}

// Regression (fuzz/corpus/step_wire_fuzz/empty-logit-rows): a prompt chunk that wants no logits
// encodes its empty logit-row list without touching the vector's (null) data.
TEST(StepWireTest, StepsWithoutLogitRowsRoundTrip) {
  Step s = MakeStep();
  s.logit_rows.clear();
  std::vector<std::byte> wire;
  EncodeStep(s, &wire);
  Step out;
  ASSERT_TRUE(DecodeStep(wire, 7, 16, 512, 64, 2, &out).ok());
  EXPECT_EQ(out.tokens, s.tokens);
  EXPECT_TRUE(out.logit_rows.empty());
  std::vector<std::byte> again;
  EncodeStep(out, &again);
  EXPECT_EQ(again, wire);
}

TEST(StepWireTest, LongStepsExceedTheInlinePart) {
  Step s = MakeStep();
  s.tokens.assign(40, 5);
  s.positions.assign(40, 3);
  s.slots.assign(40, 0);
  std::vector<std::byte> wire;
  EncodeStep(s, &wire);
  EXPECT_EQ(static_cast<int64_t>(wire.size()), StepBytes(40, 1));
  Step out;
  EXPECT_TRUE(DecodeStep(wire, 7, 64, 512, 64, 1, &out).ok());
}

TEST(StepWireTest, RejectsCorruptOrUnexpectedSteps) {
  std::vector<std::byte> wire;
  EncodeStep(MakeStep(), &wire);
  Step out;
  EXPECT_EQ(DecodeStep(wire, 8, 16, 512, 64, 2, &out).code(), StatusCode::kDataLoss);  // seq gap
  EXPECT_EQ(DecodeStep(wire, 7, 2, 512, 64, 2, &out).code(), StatusCode::kDataLoss);   // > batch
  EXPECT_EQ(DecodeStep(wire, 7, 16, 400, 64, 2, &out).code(), StatusCode::kDataLoss);  // token
  EXPECT_EQ(DecodeStep(wire, 7, 16, 512, 2, 2, &out).code(), StatusCode::kDataLoss);   // position
  EXPECT_EQ(DecodeStep(wire, 7, 16, 512, 64, 1, &out).code(), StatusCode::kDataLoss);  // slot
  std::vector<std::byte> bad = wire;
  bad[0] = std::byte{0};
  EXPECT_NE(DecodeStep(bad, 7, 16, 512, 64, 2, &out).message().find("magic"), std::string::npos);
  bad = wire;
  bad[4] = std::byte{9};  // version
  EXPECT_NE(DecodeStep(bad, 7, 16, 512, 64, 2, &out).message().find("version"), std::string::npos);
  // Truncated payload.
  Step big = MakeStep();
  big.tokens.assign(40, 5);
  big.positions.assign(40, 3);
  big.slots.assign(40, 0);
  EncodeStep(big, &bad);
  bad.resize(100);
  EXPECT_EQ(DecodeStep(bad, 7, 64, 512, 64, 1, &out).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace loom::parallel
