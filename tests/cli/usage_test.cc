// A mistyped command or flag is named, with the nearest known word and the list of commands
// (issue 19); the bare `loom` prints its help; values that look like flags (negative numbers, a
// prompt after -p) are not mistaken for flags; `loom info` escapes what it prints from a file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../cli_util.h"
#include "loom/base/testing.h"

namespace loom {
namespace {

using testing::kLoom;
using testing::RunShell;

void ExpectIn(const std::string& text, const std::string& want) {
  EXPECT_NE(text.find(want), std::string::npos) << "'" << want << "' not in:\n" << text;
}

TEST(UsageTest, UnknownCommandIsNamedWithTheNearestAndTheList) {
  const auto r = RunShell(kLoom + " rnu -m model.gguf -p hi");
  EXPECT_EQ(r.exit_code, 2);
  ExpectIn(r.err, "unknown command 'rnu'");
  ExpectIn(r.err, "did you mean 'run'?");
  for (const char* command : {"run", "serve", "convert", "bench", "tokenize", "info", "pull"}) {
    ExpectIn(r.err, command);
  }
  const auto far = RunShell(kLoom + " frobnicate");
  EXPECT_EQ(far.exit_code, 2);
  ExpectIn(far.err, "unknown command 'frobnicate'");
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
  ExpectIn(far.err, "commands: run, ");
}

TEST(UsageTest, UnknownNestedCommandAndFlagsAreNamed) {
  const auto nested = RunShell(kLoom + " hub acount create");
  EXPECT_EQ(nested.exit_code, 2);
  ExpectIn(nested.err, "loom hub: unknown command 'acount'; did you mean 'account'?");
  const auto flag = RunShell(kLoom + " run --modle x.gguf -p hi");
  EXPECT_EQ(flag.exit_code, 2);
  ExpectIn(flag.err, "loom run: unknown option '--modle'; did you mean '--model'?");
  const auto with_value = RunShell(kLoom + " convert --too=hf -m a -o b");
  EXPECT_EQ(with_value.exit_code, 2);
  ExpectIn(with_value.err, "unknown option '--too'; did you mean '--to'?");
  const auto short_flag = RunShell(kLoom + " info -x");
  EXPECT_EQ(short_flag.exit_code, 2);
  ExpectIn(short_flag.err, "unknown option '-x'");
}

TEST(UsageTest, BareLoomPrintsItsCommands) {
  const auto r = RunShell(kLoom);
  EXPECT_EQ(r.exit_code, 2);
  for (const char* command : {"run", "serve", "convert", "bench"}) ExpectIn(r.err, command);
}

TEST(UsageTest, ValuesThatLookLikeFlagsAreValues) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string model = shared + "/models/stories260K/stories260K.gguf";
  const auto r = RunShell(kLoom + " run -m " + model + " -p '-hello' -n 2 --temp 0 --seed -1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto t = RunShell(kLoom + " tokenize -m " + model + " --json -- -5");
  EXPECT_EQ(t.exit_code, 0) << t.err;
}

// Valid UTF-8 without C0/C1 controls (what a terminal can show as text).
bool PrintableUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if (b < 0x20 && b != '\n') return false;
      if (b == 0x7F) return false;
      ++i;
      continue;
    }
    const size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    if (len == 2 && b == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;  // C1
    i += len;
  }
  return true;
}

TEST(UsageTest, InfoEscapesCorruptedMetadata) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  std::ifstream in(shared + "/models/stories260K/stories260K.gguf", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // general.name = "llama": corrupt the key (a right-to-left override) and the value (an invalid
  // byte and a terminal escape sequence), keeping their lengths.
  const std::string key = "general.name";
  const size_t k = bytes.find(key);
  ASSERT_NE(k, std::string::npos);
  bytes.replace(k, key.size(),
                "general.\xE2\x80\xAE"
                "e");
  const size_t v = bytes.find("llama", k);
  ASSERT_NE(v, std::string::npos);
  bytes.replace(v, 5, "\xFF\x1B[31");
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("loom_corrupt_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(file, std::ios::binary) << bytes;
  const auto r = RunShell(kLoom + " info -m " + file.string());
  std::filesystem::remove(file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(PrintableUtf8(r.out)) << r.out;
  ExpectIn(r.out, "general.\\u{202E}e = \"\\xFF\\x1b[31\"");
}

}  // namespace
}  // namespace loom
