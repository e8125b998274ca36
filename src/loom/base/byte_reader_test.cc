#include "loom/base/byte_reader.h"

#include <gtest/gtest.h>

#include <vector>

namespace loom::base {
namespace {

TEST(ByteReaderTest, ReadsLittleEndianValuesAndStopsAtTheEnd) {
  std::vector<std::byte> bytes = {std::byte{1}, std::byte{0}, std::byte{0}, std::byte{0},
                                  std::byte{'h'}, std::byte{'i'}};
  ByteReader r(bytes);
  uint32_t v = 0;
  ASSERT_TRUE(r.Read(&v).ok());
  EXPECT_EQ(v, 1u);
  std::string s;
  ASSERT_TRUE(r.ReadString(2, &s).ok());
  EXPECT_EQ(s, "hi");
  uint8_t b;
  Status st = r.Read(&b);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("offset 6"), std::string::npos) << st.message();
}

TEST(ByteReaderTest, RejectsNegativeAndHugeLengths) {
  std::vector<std::byte> bytes(16);
  ByteReader r(bytes);
  std::span<const std::byte> out;
  EXPECT_FALSE(r.ReadSpan(-1, &out).ok());
  EXPECT_FALSE(r.ReadSpan(INT64_MAX, &out).ok());
  EXPECT_FALSE(r.Skip(17).ok());
  EXPECT_TRUE(r.Skip(16).ok());
  EXPECT_FALSE(r.Seek(17).ok());
}

}  // namespace
}  // namespace loom::base
