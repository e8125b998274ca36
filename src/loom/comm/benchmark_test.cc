#include "loom/comm/benchmark.h"

#include <gtest/gtest.h>

#include "loom/comm/config.h"

namespace loom::comm {
namespace {

TEST(BenchmarkTest, ChecksEveryOpOnAOneRankGroup) {
  auto g = CreateGroup(GroupConfig{});
  ASSERT_TRUE(g.ok());
  BenchOptions o;
  o.min_bytes = 64;
  o.max_bytes = 4096;
  o.iters = 3;
  o.warmup = 1;
  o.check = true;
  int rows_seen = 0;
  auto rows = RunCommBenchmark(**g, o, [&](const BenchRow&) { ++rows_seen; });
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  // allreduce, allgather, broadcast: 64, 256, 1024, 4096; barrier: one row; no sendrecv.
  EXPECT_EQ(rows->size(), 13u);
  EXPECT_EQ(rows_seen, 13);
  for (const BenchRow& r : *rows) {
    EXPECT_TRUE(r.checked);
    EXPECT_EQ(r.errors, 0) << r.op << " " << r.bytes;
    EXPECT_EQ(r.iters, 3);
  }
  const std::string line = BenchTableRow(rows->front());
  EXPECT_NE(line.find("allreduce"), std::string::npos);
  EXPECT_NE(line.find("ok"), std::string::npos);
  EXPECT_NE(BenchTableHeader().find("busbw_GB/s"), std::string::npos);
}

TEST(BenchmarkTest, ParsesOpListsAndTypes) {
  std::vector<std::string> ops;
  ASSERT_TRUE(ParseBenchOps("allreduce,sendrecv", &ops).ok());
  EXPECT_EQ(ops, (std::vector<std::string>{"allreduce", "sendrecv"}));
  EXPECT_FALSE(ParseBenchOps("allreduce,telepathy", &ops).ok());
  EXPECT_EQ(*ParseElementType("bf16"), ElementType::kBF16);
  EXPECT_FALSE(ParseElementType("f64").ok());
}

}  // namespace
}  // namespace loom::comm
