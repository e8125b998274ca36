#include "loom/text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "loom/text/jinja_lexer.h"

namespace loom::text::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;
constexpr int kMaxNesting = 128;  // recursion of the parser (blocks, parentheses, ...)
constexpr int kMaxHeight = 256;   // height of one expression tree (chains of filters, operators)

ExprPtr MakeExpr(ExprKind kind, int64_t pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  Parser(std::string_view src, std::vector<Token> tokens) : src_(src), toks_(std::move(tokens)) {}

  StatusOr<Body> Run() {
    Body body;
    LOOM_ASSIGN_OR_RETURN(const std::string end, ParseBody(&body, {}));
    (void)end;  // with no end keywords, only the end of input stops the body
    return body;
  }

 private:
  // Counts nesting on the way down; refuses templates that nest absurdly deep.
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };

  const Token& Cur() const { return toks_[i_]; }
  const Token& Next() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void Advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsOp(std::string_view op) const { return Cur().kind == Tok::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const {
    return Cur().kind == Tok::kName && Cur().text == name;
  }

  Status SyntaxError(int64_t pos, std::string_view what) const {
    return InvalidArgumentError("template syntax error at ", Where(src_, pos), ": ", what);
  }
  Status Unsupported(int64_t pos, std::string_view what) const {
    return UnimplementedError("template uses ", what, " at ", Where(src_, pos),
                              ", which this Jinja interpreter does not support");
  }
  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case Tok::kText:
        return "text";
      case Tok::kExprOpen:
        return "'{{'";
      case Tok::kExprClose:
        return "'}}'";
      case Tok::kStmtOpen:
        return "'{%'";
      case Tok::kStmtClose:
        return "'%}'";
      case Tok::kName:
        return "'" + t.text + "'";
      case Tok::kString:
        return "a string";
      case Tok::kInt:
      case Tok::kFloat:
        return "a number";
      case Tok::kOp:
        return "'" + t.text + "'";
      case Tok::kEnd:
        return "the end of the template";
    }
    return "?";
  }
  Status Expect(Tok kind, std::string_view op, std::string_view what) {
    if (Cur().kind != kind || (kind == Tok::kOp && Cur().text != op)) {
      return SyntaxError(Cur().pos, StrCat("expected ", what, ", found ", Describe(Cur())));
    }
    Advance();
    return OkStatus();
  }
  // Records e's height and refuses trees so tall that evaluating (or freeing) them would recurse
  // too deeply.  Called on every composite node as it is completed.
  Status Seal(Expr* e) const {
    int h = 0;
    for (const auto& a : e->args) {
      if (a != nullptr) h = std::max(h, a->height);
    }
    for (const auto& kv : e->kwargs) h = std::max(h, kv.second->height);
    e->height = h + 1;
    if (e->height > kMaxHeight) {
      return InvalidArgumentError("template expression nests deeper than ", kMaxHeight,
                                  " levels at ", Where(src_, e->pos));
    }
    return OkStatus();
  }
  Status CheckDepth() const {
    if (depth_ > kMaxNesting) {
      return InvalidArgumentError("template nests deeper than ", kMaxNesting, " levels at ",
                                  Where(src_, Cur().pos));
    }
    return OkStatus();
  }
  StatusOr<std::string> ExpectName(std::string_view what) {
    if (Cur().kind != Tok::kName) {
      return SyntaxError(Cur().pos, StrCat("expected ", what, ", found ", Describe(Cur())));
    }
    std::string name = Cur().text;
    Advance();
    return name;
  }

  // Parses nodes until a {% kw %} with kw in `ends` (returns kw; the cursor is after it) or the
  // end of input (returns "", an error when `ends` is not empty).
  StatusOr<std::string> ParseBody(Body* body, std::initializer_list<std::string_view> ends) {
    DepthGuard guard(&depth_);
    LOOM_RETURN_IF_ERROR(CheckDepth());
    const int64_t start = Cur().pos;
    for (;;) {
      const Token& t = Cur();
      switch (t.kind) {
        case Tok::kEnd:
          if (ends.size() > 0) {
            return SyntaxError(
                start, StrCat("block is never closed (expected {% ", *ends.begin(), " %})"));
          }
          return std::string();
        case Tok::kText: {
          auto node = std::make_unique<Node>();
          node->kind = NodeKind::kText;
          node->pos = t.pos;
          node->text = t.text;
          body->push_back(std::move(node));
          Advance();
          break;
        }
        case Tok::kExprOpen: {
          auto node = std::make_unique<Node>();
          node->kind = NodeKind::kOutput;
          node->pos = t.pos;
          Advance();
          LOOM_ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
          LOOM_RETURN_IF_ERROR(Expect(Tok::kExprClose, "", "'}}'"));
          body->push_back(std::move(node));
          break;
        }
        case Tok::kStmtOpen: {
          Advance();
          const Token& kw = Cur();
          if (kw.kind != Tok::kName) {
            return SyntaxError(kw.pos, StrCat("expected a statement, found ", Describe(kw)));
          }
          for (std::string_view end : ends) {
            if (kw.text == end) {
              std::string found = kw.text;
              Advance();
              return found;
            }
          }
          LOOM_RETURN_IF_ERROR(ParseStatement(body));
          break;
        }
        default:
          return SyntaxError(t.pos, StrCat("unexpected ", Describe(t)));
      }
    }
  }

  Status ParseStatement(Body* body) {
    const Token& kw = Cur();
    const int64_t pos = kw.pos;
    auto node = std::make_unique<Node>();
    node->pos = pos;
    const std::string word = kw.text;
    Advance();
    if (word == "if") {
      node->kind = NodeKind::kIf;
      LOOM_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression(true));
      node->conds.push_back(std::move(cond));
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      for (;;) {
        Body branch;
        LOOM_ASSIGN_OR_RETURN(const std::string end, ParseBody(&branch, {"elif", "else", "endif"}));
        node->bodies.push_back(std::move(branch));
        if (end == "elif") {
          LOOM_ASSIGN_OR_RETURN(ExprPtr c, ParseExpression(true));
          node->conds.push_back(std::move(c));
          LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
          continue;
        }
        LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
        if (end == "else") {
          Body else_branch;
          LOOM_ASSIGN_OR_RETURN(const std::string e2, ParseBody(&else_branch, {"endif"}));
          (void)e2;
          node->bodies.push_back(std::move(else_branch));
          LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
        }
        break;
      }
    } else if (word == "for") {
      node->kind = NodeKind::kFor;
      LOOM_ASSIGN_OR_RETURN(node->names, ParseTargets());
      if (!IsName("in")) return SyntaxError(Cur().pos, "expected 'in' in a for loop");
      Advance();
      LOOM_ASSIGN_OR_RETURN(node->expr, ParseTuple(false));
      if (IsName("if")) {
        Advance();
        LOOM_ASSIGN_OR_RETURN(node->filter, ParseExpression(true));
      }
      if (IsName("recursive")) return Unsupported(Cur().pos, "recursive for loops");
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      Body loop_body;
      LOOM_ASSIGN_OR_RETURN(const std::string end, ParseBody(&loop_body, {"else", "endfor"}));
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      node->bodies.push_back(std::move(loop_body));
      if (end == "else") {
        Body else_body;
        LOOM_ASSIGN_OR_RETURN(const std::string e2, ParseBody(&else_body, {"endfor"}));
        (void)e2;
        LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
        node->bodies.push_back(std::move(else_body));
      }
    } else if (word == "set") {
      LOOM_ASSIGN_OR_RETURN(std::string first, ExpectName("a variable name after 'set'"));
      if (IsOp(".")) {
        Advance();
        LOOM_ASSIGN_OR_RETURN(node->attr, ExpectName("an attribute name"));
        node->names.push_back(std::move(first));
      } else {
        node->names.push_back(std::move(first));
        while (IsOp(",")) {
          Advance();
          LOOM_ASSIGN_OR_RETURN(std::string more, ExpectName("a variable name"));
          node->names.push_back(std::move(more));
        }
      }
      if (IsOp("=")) {
        Advance();
        node->kind = NodeKind::kSet;
        LOOM_ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
        LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      } else {
        if (!node->attr.empty() || node->names.size() != 1) {
          return SyntaxError(Cur().pos, "expected '=' in a set statement");
        }
        if (IsOp("|")) return Unsupported(Cur().pos, "filtered set blocks");
        LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'=' or '%}'"));
        node->kind = NodeKind::kSetBlock;
        Body block;
        LOOM_ASSIGN_OR_RETURN(const std::string end, ParseBody(&block, {"endset"}));
        (void)end;
        LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
        node->bodies.push_back(std::move(block));
      }
    } else if (word == "macro") {
      node->kind = NodeKind::kMacro;
      LOOM_ASSIGN_OR_RETURN(node->name, ExpectName("a macro name"));
      LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, "(", "'('"));
      while (!IsOp(")")) {
        LOOM_ASSIGN_OR_RETURN(std::string param, ExpectName("a parameter name"));
        node->names.push_back(std::move(param));
        ExprPtr fallback;
        if (IsOp("=")) {
          Advance();
          LOOM_ASSIGN_OR_RETURN(fallback, ParseExpression(true));
        }
        node->conds.push_back(std::move(fallback));
        if (!IsOp(",")) break;
        Advance();
      }
      LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, ")", "')'"));
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      Body macro_body;
      LOOM_ASSIGN_OR_RETURN(const std::string end, ParseBody(&macro_body, {"endmacro"}));
      (void)end;
      if (Cur().kind == Tok::kName) Advance();  // {% endmacro name %}
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      node->bodies.push_back(std::move(macro_body));
    } else if (word == "break" || word == "continue") {
      node->kind = word == "break" ? NodeKind::kBreak : NodeKind::kContinue;
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
    } else if (word == "generation") {
      // Hugging Face's marker for assistant tokens (return_assistant_tokens_mask): no output.
      node->kind = NodeKind::kBlock;
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      Body block;
      LOOM_ASSIGN_OR_RETURN(const std::string end, ParseBody(&block, {"endgeneration"}));
      (void)end;
      LOOM_RETURN_IF_ERROR(Expect(Tok::kStmtClose, "", "'%}'"));
      node->bodies.push_back(std::move(block));
    } else if (word == "elif" || word == "else" || word.rfind("end", 0) == 0) {
      return SyntaxError(pos, StrCat("unexpected {% ", word, " %}"));
    } else {
      return Unsupported(pos, StrCat("the statement {% ", word, " %}"));
    }
    body->push_back(std::move(node));
    return OkStatus();
  }

  // Loop / assignment targets: a name or names separated by commas (optionally parenthesized).
  StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> names;
    const bool paren = IsOp("(");
    if (paren) Advance();
    for (;;) {
      LOOM_ASSIGN_OR_RETURN(std::string name, ExpectName("a loop variable"));
      names.push_back(std::move(name));
      if (!IsOp(",")) break;
      Advance();
    }
    if (paren) LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, ")", "')'"));
    return names;
  }

  // expr (, expr)* -> a tuple when there is a comma.
  StatusOr<ExprPtr> ParseTuple(bool with_condexpr) {
    const int64_t pos = Cur().pos;
    LOOM_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
    if (!IsOp(",")) return first;
    ExprPtr tuple = MakeExpr(ExprKind::kTuple, pos);
    tuple->args.push_back(std::move(first));
    while (IsOp(",")) {
      Advance();
      if (Cur().kind == Tok::kExprClose || Cur().kind == Tok::kStmtClose || IsOp(")")) break;
      LOOM_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
      tuple->args.push_back(std::move(e));
    }
    LOOM_RETURN_IF_ERROR(Seal(tuple.get()));
    return tuple;
  }

  StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthGuard guard(&depth_);
    LOOM_RETURN_IF_ERROR(CheckDepth());
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    if (!with_condexpr) return e;
    while (IsName("if")) {
      const int64_t pos = Cur().pos;
      Advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        Advance();
        LOOM_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      ExprPtr c = MakeExpr(ExprKind::kCond, pos);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(otherwise));
      LOOM_RETURN_IF_ERROR(Seal(c.get()));
      e = std::move(c);
    }
    return e;
  }

  StatusOr<ExprPtr> ParseOr() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int64_t pos = Cur().pos;
      Advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      ExprPtr e = MakeExpr(ExprKind::kOr, pos);
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      LOOM_RETURN_IF_ERROR(Seal(e.get()));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseAnd() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int64_t pos = Cur().pos;
      Advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      ExprPtr e = MakeExpr(ExprKind::kAnd, pos);
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      LOOM_RETURN_IF_ERROR(Seal(e.get()));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      LOOM_RETURN_IF_ERROR(CheckDepth());
      const int64_t pos = Cur().pos;
      Advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      ExprPtr e = MakeExpr(ExprKind::kNot, pos);
      e->args.push_back(std::move(operand));
      LOOM_RETURN_IF_ERROR(Seal(e.get()));
      return e;
    }
    return ParseCompare();
  }

  StatusOr<ExprPtr> ParseCompare() {
    const int64_t pos = Cur().pos;
    LOOM_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (Cur().kind == Tok::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Advance();
      } else if (IsName("in")) {
        op = "in";
        Advance();
      } else if (IsName("not") && Next().kind == Tok::kName && Next().text == "in") {
        op = "notin";
        Advance();
        Advance();
      } else {
        break;
      }
      if (cmp == nullptr) {
        cmp = MakeExpr(ExprKind::kCompare, pos);
        cmp->args.push_back(std::move(first));
      }
      LOOM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      cmp->ops.push_back(std::move(op));
      cmp->args.push_back(std::move(right));
      LOOM_RETURN_IF_ERROR(Seal(cmp.get()));
    }
    return cmp != nullptr ? std::move(cmp) : std::move(first);
  }

  // Left-associative binary levels: + -, then ~, then * / // %, then **.
  StatusOr<ExprPtr> ParseBinary(int level) {
    static const std::vector<std::vector<std::string_view>> kLevels = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level >= static_cast<int>(kLevels.size())) return ParseUnary(true);
    LOOM_ASSIGN_OR_RETURN(ExprPtr left, ParseBinary(level + 1));
    for (;;) {
      bool found = false;
      for (std::string_view op : kLevels[static_cast<size_t>(level)]) {
        if (IsOp(op)) found = true;
      }
      if (!found) break;
      const int64_t pos = Cur().pos;
      std::string op = Cur().text;
      Advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr right, ParseBinary(level + 1));
      ExprPtr e = MakeExpr(ExprKind::kBinary, pos);
      e->name = std::move(op);
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      LOOM_RETURN_IF_ERROR(Seal(e.get()));
      left = std::move(e);
    }
    return left;
  }
  StatusOr<ExprPtr> ParseMath1() { return ParseBinary(0); }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&depth_);
    LOOM_RETURN_IF_ERROR(CheckDepth());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const int64_t pos = Cur().pos;
      const bool neg = IsOp("-");
      Advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = MakeExpr(neg ? ExprKind::kNeg : ExprKind::kPos, pos);
      node->args.push_back(std::move(operand));
      LOOM_RETURN_IF_ERROR(Seal(node.get()));
    } else {
      LOOM_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    LOOM_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      LOOM_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  StatusOr<ExprPtr> ParsePrimary() {
    DepthGuard guard(&depth_);
    LOOM_RETURN_IF_ERROR(CheckDepth());
    const Token& t = Cur();
    const int64_t pos = t.pos;
    switch (t.kind) {
      case Tok::kName: {
        ExprPtr e = MakeExpr(ExprKind::kLiteral, pos);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        Advance();
        return e;
      }
      case Tok::kString: {
        std::string s = t.text;
        Advance();
        while (Cur().kind == Tok::kString) {  // adjacent literals concatenate
          s += Cur().text;
          Advance();
        }
        ExprPtr e = MakeExpr(ExprKind::kLiteral, pos);
        e->literal = Value::String(std::move(s));
        return e;
      }
      case Tok::kInt: {
        ExprPtr e = MakeExpr(ExprKind::kLiteral, pos);
        e->literal = Value::Int(t.int_value);
        Advance();
        return e;
      }
      case Tok::kFloat: {
        ExprPtr e = MakeExpr(ExprKind::kLiteral, pos);
        e->literal = Value::Float(t.float_value);
        Advance();
        return e;
      }
      case Tok::kOp:
        if (t.text == "(") {
          Advance();
          if (IsOp(")")) {  // the empty tuple
            Advance();
            return MakeExpr(ExprKind::kTuple, pos);
          }
          LOOM_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true));
          LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, ")", "')'"));
          return e;
        }
        if (t.text == "[") {
          Advance();
          ExprPtr list = MakeExpr(ExprKind::kList, pos);
          while (!IsOp("]")) {
            LOOM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
            list->args.push_back(std::move(item));
            if (!IsOp(",")) break;
            Advance();
          }
          LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, "]", "']'"));
          LOOM_RETURN_IF_ERROR(Seal(list.get()));
          return list;
        }
        if (t.text == "{") {
          Advance();
          ExprPtr dict = MakeExpr(ExprKind::kDict, pos);
          while (!IsOp("}")) {
            LOOM_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
            LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, ":", "':' in a dict literal"));
            LOOM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            dict->args.push_back(std::move(key));
            dict->args.push_back(std::move(value));
            if (!IsOp(",")) break;
            Advance();
          }
          LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, "}", "'}'"));
          LOOM_RETURN_IF_ERROR(Seal(dict.get()));
          return dict;
        }
        break;
      default:
        break;
    }
    return SyntaxError(pos, StrCat("expected an expression, found ", Describe(t)));
  }

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    for (;;) {
      const int64_t pos = Cur().pos;
      if (IsOp(".")) {
        Advance();
        if (Cur().kind == Tok::kInt) {  // x.0 is x[0]
          ExprPtr index = MakeExpr(ExprKind::kLiteral, Cur().pos);
          index->literal = Value::Int(Cur().int_value);
          Advance();
          ExprPtr e = MakeExpr(ExprKind::kIndex, pos);
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(index));
          LOOM_RETURN_IF_ERROR(Seal(e.get()));
          node = std::move(e);
          continue;
        }
        LOOM_ASSIGN_OR_RETURN(std::string attr, ExpectName("an attribute name after '.'"));
        ExprPtr e = MakeExpr(ExprKind::kAttr, pos);
        e->name = std::move(attr);
        e->args.push_back(std::move(node));
        LOOM_RETURN_IF_ERROR(Seal(e.get()));
        node = std::move(e);
      } else if (IsOp("[")) {
        Advance();
        LOOM_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), pos));
      } else if (IsOp("(")) {
        LOOM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), ExprKind::kCall));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> ParseSubscript(ExprPtr object, int64_t pos) {
    ExprPtr parts[3];
    int colons = 0;
    for (;;) {
      if (IsOp("]")) break;
      if (IsOp(":")) {
        if (++colons > 2) return SyntaxError(Cur().pos, "too many ':' in a slice");
        Advance();
        continue;
      }
      if (parts[colons] != nullptr) return SyntaxError(Cur().pos, "expected ':' or ']'");
      LOOM_ASSIGN_OR_RETURN(parts[colons], ParseExpression(true));
    }
    LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, "]", "']'"));
    if (colons == 0) {
      if (parts[0] == nullptr) return SyntaxError(pos, "empty subscript");
      ExprPtr e = MakeExpr(ExprKind::kIndex, pos);
      e->args.push_back(std::move(object));
      e->args.push_back(std::move(parts[0]));
      LOOM_RETURN_IF_ERROR(Seal(e.get()));
      return e;
    }
    ExprPtr e = MakeExpr(ExprKind::kSlice, pos);
    e->args.push_back(std::move(object));
    for (ExprPtr& part : parts) e->args.push_back(std::move(part));
    LOOM_RETURN_IF_ERROR(Seal(e.get()));
    return e;
  }

  // ( args ) after a callee, or after a filter/test name (kind tells which node to make: for a
  // call the callee is args[0]; for filters and tests `node` already holds operand and name).
  StatusOr<ExprPtr> ParseCall(ExprPtr node, ExprKind kind) {
    const int64_t pos = Cur().pos;
    LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, "(", "'('"));
    ExprPtr call;
    if (kind == ExprKind::kCall) {
      call = MakeExpr(ExprKind::kCall, pos);
      call->args.push_back(std::move(node));
    } else {
      call = std::move(node);
    }
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) return Unsupported(Cur().pos, "*args / **kwargs in a call");
      if (Cur().kind == Tok::kName && Next().kind == Tok::kOp && Next().text == "=") {
        std::string key = Cur().text;
        Advance();
        Advance();
        LOOM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call->kwargs.empty()) {
          return SyntaxError(Cur().pos, "positional argument after a keyword argument");
        }
        LOOM_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression(true));
        call->args.push_back(std::move(arg));
      }
      if (!IsOp(",")) break;
      Advance();
    }
    LOOM_RETURN_IF_ERROR(Expect(Tok::kOp, ")", "')'"));
    LOOM_RETURN_IF_ERROR(Seal(call.get()));
    return call;
  }

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    for (;;) {
      if (IsOp("|")) {
        const int64_t pos = Cur().pos;
        Advance();
        LOOM_ASSIGN_OR_RETURN(std::string name, ExpectName("a filter name"));
        while (IsOp(".")) {
          Advance();
          LOOM_ASSIGN_OR_RETURN(std::string part, ExpectName("a filter name"));
          name += "." + part;
        }
        ExprPtr f = MakeExpr(ExprKind::kFilter, pos);
        f->name = std::move(name);
        f->args.push_back(std::move(node));
        if (IsOp("(")) {
          LOOM_ASSIGN_OR_RETURN(f, ParseCall(std::move(f), ExprKind::kFilter));
        }
        LOOM_RETURN_IF_ERROR(Seal(f.get()));
        node = std::move(f);
      } else if (IsName("is")) {
        const int64_t pos = Cur().pos;
        Advance();
        ExprPtr test = MakeExpr(ExprKind::kTest, pos);
        if (IsName("not")) {
          test->negated = true;
          Advance();
        }
        // Tests named like literals: "is none", "is true", "is false".
        std::string name;
        if (Cur().kind == Tok::kName) {
          name = Cur().text;
          Advance();
        } else {
          return SyntaxError(Cur().pos, StrCat("expected a test name, found ", Describe(Cur())));
        }
        test->name = name;
        test->args.push_back(std::move(node));
        if (IsOp("(")) {
          LOOM_ASSIGN_OR_RETURN(test, ParseCall(std::move(test), ExprKind::kTest));
        } else if ((Cur().kind == Tok::kString || Cur().kind == Tok::kInt ||
                    Cur().kind == Tok::kFloat || IsOp("[") || IsOp("{") ||
                    (Cur().kind == Tok::kName && Cur().text != "else" && Cur().text != "or" &&
                     Cur().text != "and" && Cur().text != "if" && Cur().text != "is" &&
                     Cur().text != "in" && Cur().text != "not"))) {
          // One argument without parentheses: "is divisibleby 3", "is equalto 'x'".
          LOOM_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          LOOM_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          test->args.push_back(std::move(arg));
        }
        LOOM_RETURN_IF_ERROR(Seal(test.get()));
        node = std::move(test);
      } else if (IsOp("(")) {
        LOOM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), ExprKind::kCall));
      } else {
        return node;
      }
    }
  }

  std::string_view src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<Body> ParseTemplate(std::string_view source) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  return Parser(source, std::move(tokens)).Run();
}

}  // namespace loom::text::jinja
