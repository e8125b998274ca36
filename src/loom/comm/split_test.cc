#include "loom/comm/split.h"

#include <gtest/gtest.h>

namespace loom::comm {
namespace {

TEST(SplitTest, GroupsByColorAndOrdersByKeyThenRank) {
  // Four ranks: colors 0,1,0,1; keys reverse the order inside color 0.
  const SplitEntry e[4] = {{0, 5, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}, {1, 0, 0, 0}};
  auto r0 = ComputeSplit(e, 0);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->members, (std::vector<int>{2, 0}));
  EXPECT_EQ(r0->new_rank, 1);
  auto r3 = ComputeSplit(e, 3);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->members, (std::vector<int>{1, 3}));  // equal keys: parent rank order
  EXPECT_EQ(r3->new_rank, 1);
}

TEST(SplitTest, NoColorGivesNoGroupAndNegativeColorsAreRejected) {
  const SplitEntry e[2] = {{kNoColor, 0, 0, 0}, {0, 0, 0, 0}};
  auto r = ComputeSplit(e, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->new_rank, -1);
  EXPECT_TRUE(r->members.empty());
  const SplitEntry bad[2] = {{-7, 0, 0, 0}, {0, 0, 0, 0}};
  EXPECT_FALSE(ComputeSplit(bad, 1).ok());
  EXPECT_NE(SubGroupId("g", 1, 0), SubGroupId("g", 1, 1));
  EXPECT_NE(SubGroupId("g", 1, 0), SubGroupId("g", 2, 0));
}

}  // namespace
}  // namespace loom::comm
