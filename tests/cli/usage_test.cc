// A mistyped command or flag is named, with the nearest known word and the list of commands
// (issue 19); the bare `loom` prints its help; values that look like flags (negative numbers, a
// prompt after -p) are not mistaken for flags.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace loom
