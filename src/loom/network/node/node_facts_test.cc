#include "loom/network/node/node_facts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/base/testing.h"

namespace loom::network::node {
namespace {

TEST(ScheduleTest, RangesIncludingOnesAcrossMidnight) {
  auto s = ParseSchedule("22:00-07:30,12:00-13:00");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->Allows(23 * 60));
  EXPECT_TRUE(s->Allows(3 * 60));
  EXPECT_FALSE(s->Allows(7 * 60 + 30));
  EXPECT_TRUE(s->Allows(12 * 60 + 59));
  EXPECT_FALSE(s->Allows(13 * 60));
  EXPECT_FALSE(s->Allows(18 * 60));
  auto always = ParseSchedule("");
  ASSERT_TRUE(always.ok());
  EXPECT_TRUE(always->Allows(0));
}

TEST(ScheduleTest, MalformedRangesAreRefusedWithAnExample) {
  for (const char* bad : {"22-07", "25:00-01:00", "10:61-11:00", "10:00", "a:b-c:d"}) {
    auto s = ParseSchedule(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("HH:MM-HH:MM"), std::string::npos);
  }
}

TEST(ParseBytesTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseBytes("8G"), int64_t{8000000000});
  EXPECT_EQ(*ParseBytes("512M"), int64_t{512000000});
  EXPECT_EQ(*ParseBytes("1.5GiB"), int64_t{1610612736});
  EXPECT_EQ(*ParseBytes("1000"), 1000);
  EXPECT_FALSE(ParseBytes("lots").ok());
  EXPECT_FALSE(ParseBytes("-1G").ok());
  EXPECT_FALSE(ParseBytes("3X").ok());
}

TEST(ChipTest, ModelNameFromCpuinfo) {
  EXPECT_EQ(ChipFromCpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                            "model name\t:   AMD EPYC 7763   64-Core Processor  \n"
                            "processor\t: 1\nmodel name\t: other\n"),
            "AMD EPYC 7763 64-Core Processor");
  EXPECT_EQ(ChipFromCpuinfo("processor\t: 0\nBogoMIPS\t: 48.00\n"), "");  // (some ARM boards)
  EXPECT_EQ(ChipFromCpuinfo("model name\t: " + std::string(300, 'x')).size(), 128u);
  // On this machine: whatever it is, a valid frame label.
  const std::string chip = ChipName();
  EXPECT_LE(chip.size(), 128u);
  for (char c : chip) EXPECT_GE(static_cast<unsigned char>(c), 0x20);
}

TEST(LocationTest, ParsesAndRefuses) {
  auto l = ParseLocation("52.52,13.405");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_DOUBLE_EQ(l->lat, 52.52);
  EXPECT_DOUBLE_EQ(l->lon, 13.405);
  l = ParseLocation("-33.9, -151");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_DOUBLE_EQ(l->lon, -151);
  EXPECT_TRUE(ParseLocation("90,180").ok());
  for (const char* bad : {"", "52", "91,0", "0,180.5", "nan,0", "1e1,0", "0x1,2", "1,2,3",
                          "a,b", ",", "inf,0"}) {
    EXPECT_FALSE(ParseLocation(bad).ok()) << bad;
  }
  EXPECT_THAT(ParseLocation("91,0").status().message(),
              ::testing::HasSubstr("latitude in [-90, 90]"));
}

TEST(DescribeModelTest, ShapeAndHashOfARealModelAndACachedHash) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string model = shared + "/models/stories260K/stories260K.gguf";
  const std::string cache = ::testing::TempDir() + "/loom_hashes.json";
  std::filesystem::remove(cache);
  auto m = DescribeModel(model, 256, cache);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->name, "stories260K");
  EXPECT_EQ(m->info.weight_bytes, static_cast<int64_t>(std::filesystem::file_size(model)));
  EXPECT_EQ(m->info.context, 256);
  EXPECT_GT(m->info.kv_bytes_per_token, 0);
  EXPECT_EQ(m->info.sha256.size(), 64u);
  // The second description reads the hash from the cache and gives the same.
  auto again = DescribeModel(model, 256, cache);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->info.sha256, m->info.sha256);
  EXPECT_TRUE(std::filesystem::exists(cache));
  EXPECT_FALSE(DescribeModel("/no/such/model.gguf", 256, "").ok());
}

}  // namespace
}  // namespace loom::network::node
