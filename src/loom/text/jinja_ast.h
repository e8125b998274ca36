// The syntax tree of a parsed Jinja template (jinja_parser.cc builds it, jinja.cc runs it).
// Every node keeps the byte offset it came from, for error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/text/jinja_value.h"

namespace loom::text::jinja {

enum class ExprKind : uint8_t {
  kLiteral,  // literal
  kName,     // name
  kList,     // args: items
  kTuple,    // args: items
  kDict,     // args: key0, value0, key1, value1, ...
  kAttr,     // args[0].name
  kIndex,    // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]], absent parts null
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs)
  kTest,     // args[0] is [not] name(args[1..])
  kNot,      // not args[0]
  kNeg,      // -args[0]
  kPos,      // +args[0]
  kBinary,   // args[0] name args[1]; name: + - * / // % ** ~
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...; ops: == != < <= > >= in notin
  kAnd,      // args[0] and args[1]
  kOr,       // args[0] or args[1]
  kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int64_t pos = 0;  // byte offset in the template source
  Value literal;
  std::string name;
  std::vector<std::string> ops;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  bool negated = false;  // kTest: "is not"
  int height = 1;        // levels of the tree below and including this node (bounded by the parser)
};

enum class NodeKind : uint8_t {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // conds[i] -> bodies[i]; bodies[conds.size()] is the else branch when present
  kFor,       // for names in expr [if filter]: bodies[0], else bodies[1] when present
  kSet,       // set names = expr; set names[0].attr = expr
  kSetBlock,  // set names[0] %} bodies[0] {% endset
  kMacro,     // macro name(names with defaults conds[i], null when none): bodies[0]
  kBreak,
  kContinue,
  kBlock,  // a transparent block ({% generation %}): bodies[0]
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  NodeKind kind = NodeKind::kText;
  int64_t pos = 0;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> filter;
  std::vector<std::unique_ptr<Expr>> conds;
  std::vector<Body> bodies;
  std::vector<std::string> names;
  std::string attr;
  std::string name;
};

// "line L col C" for byte offset `pos` of `source`.
std::string Where(std::string_view source, int64_t pos);

}  // namespace loom::text::jinja
