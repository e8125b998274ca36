// Text from files and sockets made safe to print on a terminal: valid, printable UTF-8 passes
// through; everything else is spelled out so that it can neither corrupt the output nor drive the
// terminal (escape sequences) nor reorder what is shown (bidirectional overrides).  For display,
// not a reversible encoding: a backslash stays a backslash.
#pragma once

#include <string>
#include <string_view>

namespace loom::base {

// "\n" "\t" "\r" -> "\\n" "\\t" "\\r"; other C0 controls, DEL and bytes that are
// not part of valid UTF-8 -> "\\xNN"; C1 controls (U+0080..U+009F) and the bidirectional
// embedding, override and isolate characters (U+202A..U+202E, U+2066..U+2069) -> "\\u{NNNN}".
std::string EscapeForTerminal(std::string_view text);

}  // namespace loom::base
