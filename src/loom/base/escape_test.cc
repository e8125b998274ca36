#include "loom/base/escape.h"

#include <gtest/gtest.h>

namespace loom::base {
namespace {

TEST(EscapeTest, PrintableUtf8PassesThrough) {
  EXPECT_EQ(EscapeForTerminal("llama 7B caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x8E\x89"),
            "llama 7B caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x8E\x89");
  EXPECT_EQ(EscapeForTerminal(""), "");
}

TEST(EscapeTest, ControlsAndBackslashesAreSpelledOut) {
  EXPECT_EQ(EscapeForTerminal("a\nb\tc\rd\\e"), "a\\nb\\tc\\rd\\e");
  EXPECT_EQ(EscapeForTerminal("\x1B[31mred\x07"), "\\x1B[31mred\\x07");
  EXPECT_EQ(EscapeForTerminal(std::string_view("x\0y", 3)), "x\\x00y");
  EXPECT_EQ(EscapeForTerminal("\x7F"), "\\x7F");
  EXPECT_EQ(EscapeForTerminal("\xC2\x9B"
                              "2J"),
            "\\u{009B}2J");  // C1 CSI
}

TEST(EscapeTest, InvalidUtf8BecomesHexBytes) {
  EXPECT_EQ(EscapeForTerminal("\xFF\xFE"), "\\xFF\\xFE");
  EXPECT_EQ(EscapeForTerminal("ab\xE4\xB8"), "ab\\xE4\\xB8");                // truncated
  EXPECT_EQ(EscapeForTerminal("\xC0\xAF"), "\\xC0\\xAF");                    // overlong
  EXPECT_EQ(EscapeForTerminal("\xED\xA0\x80"), "\\xED\\xA0\\x80");           // surrogate
  EXPECT_EQ(EscapeForTerminal("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // > U+10FFFF
}

TEST(EscapeTest, BidiOverridesAreSpelledOut) {
  EXPECT_EQ(EscapeForTerminal("a\xE2\x80\xAE"
                              "b"),
            "a\\u{202E}b");
  EXPECT_EQ(EscapeForTerminal("\xE2\x81\xA6x\xE2\x81\xA9"), "\\u{2066}x\\u{2069}");
}

}  // namespace
}  // namespace loom::base
