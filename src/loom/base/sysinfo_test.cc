#include "loom/base/sysinfo.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>

#include "loom/base/aligned_buffer.h"

namespace loom::base {
namespace {

bool HaveSmaps() { return std::ifstream("/proc/self/smaps").good(); }

TEST(HugePageBytesTest, CountsOnlyWithinTheRangeAndNeverMoreThanIt) {
  if (!HaveSmaps()) GTEST_SKIP() << "no /proc/self/smaps: HugePageBytes says -1";
  constexpr int64_t kBytes = int64_t{64} << 20;
  auto buf = AlignedBuffer<std::byte>::WithHugePages(kBytes);  // zeroed: faulted in
  const int64_t all = HugePageBytes(buf.data(), kBytes);
  const int64_t half = HugePageBytes(buf.data(), kBytes / 2);
  EXPECT_GE(all, 0);  // the OS may give none (THP off, fragmented memory)
  EXPECT_LE(all, kBytes);
  EXPECT_GE(half, 0);
  EXPECT_LE(half, all);
  EXPECT_LE(half, kBytes / 2 + (int64_t{2} << 20));
  // A range no mapping covers holds no huge pages.
  EXPECT_EQ(HugePageBytes(nullptr, 4096), 0);
  EXPECT_EQ(HugePageBytes(buf.data(), 0), 0);
}

TEST(MeasureReadBandwidthTest, ReadsAGivenRegion) {
  AlignedBuffer<std::byte> buf(int64_t{16} << 20);
  EXPECT_GT(MeasureReadBandwidth(std::span<const std::byte>(buf.span()), 2, 1), 0);
  // Nothing to read: no whole 64-byte line.
  EXPECT_EQ(MeasureReadBandwidth(std::span<const std::byte>(buf.data() + 1, 63), 2, 1), 0);
  EXPECT_EQ(MeasureReadBandwidth(std::span<const std::byte>(), 1, 1), 0);
}

}  // namespace
}  // namespace loom::base
