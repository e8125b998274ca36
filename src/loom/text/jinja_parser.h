// The Jinja parser: tokens (jinja_lexer.h) -> syntax tree (jinja_ast.h), for the subset of Jinja
// that chat templates use.  Statements: if/elif/else, for (with else, "if" filters, tuple
// targets), set (names, tuples, namespace attributes, set blocks), macro, break, continue, raw,
// generation.  Expressions: literals, names, attributes, subscripts, slices, calls with keyword
// arguments, filters, tests, and Python's operators with Jinja's precedence.  Anything else fails
// with Unimplemented naming the construct and its line and column.
#pragma once

#include <string_view>

#include "loom/base/status.h"
#include "loom/text/jinja_ast.h"

namespace loom::text::jinja {

// Parses a template.  Nesting deeper than a few hundred levels is refused (no stack overflow).
StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace loom::text::jinja
