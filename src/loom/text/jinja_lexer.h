// The Jinja lexer: template source -> text and tag tokens, with the whitespace rules Hugging Face
// renders chat templates with: trim_blocks (the newline after a block or comment tag is dropped),
// lstrip_blocks (spaces and tabs before a block or comment tag at the start of a line are
// dropped), "-" on a tag side strips all whitespace on that side, "+" turns lstrip_blocks off for
// a tag, and one trailing newline of the template is dropped (keep_trailing_newline false).
// {% raw %}...{% endraw %} becomes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::text::jinja {

enum class Tok : uint8_t {
  kText,       // text: the literal text
  kExprOpen,   // {{
  kExprClose,  // }}
  kStmtOpen,   // {%
  kStmtClose,  // %}
  kName,       // text: identifier (keywords included)
  kString,     // text: the string's value, escapes resolved
  kInt,        // int_value
  kFloat,      // float_value
  kOp,         // text: ( ) [ ] { } , . : | = == != < <= > >= + - * / // % ** ~
  kEnd,        // end of input
};

struct Token {
  Tok kind = Tok::kEnd;
  int64_t pos = 0;  // byte offset in the source
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

// Tokenizes `source`; errors (an unclosed tag or string, a stray character) name line and column.
// The result always ends with a kEnd token.
StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace loom::text::jinja
