#include "loom/fetch/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace loom::fetch {
namespace {

TEST(ProgressTest, FormatsBytesAndDurations) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 30), "5.00 GiB");
  EXPECT_EQ(FormatDuration(7), "0:07");
  EXPECT_EQ(FormatDuration(62.4), "1:02");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(ProgressTest, LineShowsPercentAmountRateAndEta) {
  const int64_t gib = int64_t{1} << 30;
  const std::string line =
      FormatProgressLine("model.safetensors", gib, 4 * gib, 100.0 * (1 << 20), 100);
  EXPECT_EQ(line,
            "model.safetensors   25% [#####               ] 1.00/4.00 GiB  100.00 MiB/s  ETA 0:31");
}

TEST(ProgressTest, LineFitsTheWidthByShorteningTheName) {
  const std::string name(100, 'n');
  const std::string line = FormatProgressLine(name, 10, 100, 5, 80);
  EXPECT_LE(line.size(), 80u);
  EXPECT_EQ(line.substr(0, 28), std::string(11, 'n') + "..." + std::string(11, 'n') + "   ");
  EXPECT_NE(line.find("10/100 B"), std::string::npos);
  // Without room for a name, the numbers remain.
  const std::string narrow = FormatProgressLine(name, 10, 100, 5, 50);
  EXPECT_LE(narrow.size(), 50u);
  EXPECT_EQ(narrow.find('n'), std::string::npos);
}

TEST(ProgressTest, UnknownTotalShowsBytesOnly) {
  EXPECT_EQ(FormatProgressLine("f", 2048, -1, 0, 80), "f  2.00 KiB");
}

// Without a terminal: one line per file, nothing while it downloads.
TEST(ProgressTest, NonInteractivePrintsALinePerFile) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = ::open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  double now = 100;
  {
    TransferProgress p(out, /*interactive=*/false, [&] { return now; });
    p.Begin("a.safetensors", 4 << 20, 0);
    p.Update(1 << 20);
    now += 2;
    p.Update(4 << 20);
    p.End(true);
    p.Cached("config.json", 651);
    p.Begin("b.gguf", 1000, 400);
    p.Update(500);
    p.End(false);
  }
  std::fclose(out);
  const std::string s(text, size);
  std::free(text);
  EXPECT_EQ(s,
            "a.safetensors  4.00 MiB in 0:02 (2.00 MiB/s)\n"
            "config.json  651 B, already in the cache\n"
            "b.gguf  500 B of 1000 B, incomplete\n");
}

}  // namespace
}  // namespace loom::fetch
