#include "loom/text/jinja.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

#include "loom/text/jinja_builtins.h"
#include "loom/text/jinja_parser.h"

namespace loom::text::jinja {
namespace {

enum class Flow : uint8_t { kNormal, kBreak, kContinue };

// Nested evaluations and statements at once (expressions, blocks, macro calls): bounds the native
// stack the interpreter uses whatever the template does.
constexpr int kMaxRecursion = 600;

class Interpreter {
 public:
  Interpreter(std::string_view source, const RenderOptions& options)
      : source_(source), options_(options) {
    ctx_.now_unix_seconds = options.now_unix_seconds;
    ctx_.max_bytes = options.max_output_bytes;
  }

  Status Run(const Body& body, const Value& variables, std::string* out) {
    scopes_.emplace_back();
    for (std::string_view name : GlobalNames()) {
      scopes_[0][std::string(name)] = Value::Callable(std::string(name));
    }
    if (variables.is_dict()) {
      for (const auto& [k, v] : variables.dict().items) scopes_[0][k] = v;
    }
    frames_.push_back(0);
    return RenderBody(body, out);
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  Status ErrorAt(int64_t pos, const Status& s) const {
    return Status(s.code(), StrCat("chat template ", Where(source_, pos), ": ", s.message()));
  }
  template <class... Args>
  Status Fail(int64_t pos, const Args&... args) const {
    return InvalidArgumentError("chat template ", Where(source_, pos), ": ", args...);
  }

  // Counts one level of recursion for the lifetime of the guard.
  class RecursionGuard {
   public:
    explicit RecursionGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~RecursionGuard() { --*depth_; }
    RecursionGuard(const RecursionGuard&) = delete;
    RecursionGuard& operator=(const RecursionGuard&) = delete;

   private:
    int* depth_;
  };
  Status CheckRecursion(int64_t pos) const {
    if (recursion_ > kMaxRecursion) {
      return ResourceExhaustedError("chat template ", Where(source_, pos), ": nests deeper than ",
                                    kMaxRecursion, " levels while rendering");
    }
    return OkStatus();
  }

  Status Step(int64_t pos) {
    if (++steps_ > options_.max_steps) {
      return ResourceExhaustedError("chat template ", Where(source_, pos), ": more than ",
                                    options_.max_steps, " steps; giving up");
    }
    return OkStatus();
  }

  Status Append(std::string* out, std::string_view text, int64_t pos) const {
    if (static_cast<int64_t>(out->size() + text.size()) > options_.max_output_bytes) {
      return ResourceExhaustedError("chat template ", Where(source_, pos), ": output exceeds ",
                                    options_.max_output_bytes, " bytes");
    }
    out->append(text);
    return OkStatus();
  }

  // Variables: the innermost scopes of the current frame, then the globals (scope 0).
  Value Lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > frames_.back();) {
      const auto it = scopes_[i].find(name);
      if (it != scopes_[i].end()) return it->second;
    }
    if (frames_.back() > 0) {
      const auto it = scopes_[0].find(name);
      if (it != scopes_[0].end()) return it->second;
    }
    return Value();
  }

  Status RenderBody(const Body& body, std::string* out) {
    for (const auto& node : body) {
      LOOM_RETURN_IF_ERROR(RenderNode(*node, out));
      if (flow_ != Flow::kNormal) return OkStatus();
    }
    return OkStatus();
  }

  Status RenderNode(const Node& node, std::string* out) {
    RecursionGuard guard(&recursion_);
    LOOM_RETURN_IF_ERROR(CheckRecursion(node.pos));
    LOOM_RETURN_IF_ERROR(Step(node.pos));
    switch (node.kind) {
      case NodeKind::kText:
        return Append(out, node.text, node.pos);
      case NodeKind::kOutput: {
        LOOM_ASSIGN_OR_RETURN(const Value v, Eval(*node.expr));
        if (v.is_callable()) return Fail(node.pos, "cannot print a function");
        std::string text;
        AppendStr(v, &text);
        return Append(out, text, node.pos);
      }
      case NodeKind::kIf:
        for (size_t i = 0; i < node.conds.size(); ++i) {
          LOOM_ASSIGN_OR_RETURN(const Value c, Eval(*node.conds[i]));
          if (c.Truthy()) return RenderBody(node.bodies[i], out);
        }
        if (node.bodies.size() > node.conds.size()) return RenderBody(node.bodies.back(), out);
        return OkStatus();
      case NodeKind::kFor:
        return RenderFor(node, out);
      case NodeKind::kSet:
        return RenderSet(node);
      case NodeKind::kSetBlock: {
        std::string captured;
        LOOM_RETURN_IF_ERROR(RenderBody(node.bodies[0], &captured));
        scopes_.back()[node.names[0]] = Value::String(std::move(captured));
        return OkStatus();
      }
      case NodeKind::kMacro:
        scopes_.back()[node.name] = Value::Callable(node.name, &node);
        return OkStatus();
      case NodeKind::kBreak:
      case NodeKind::kContinue:
        if (loop_depth_ == 0) return Fail(node.pos, "break/continue outside a loop");
        flow_ = node.kind == NodeKind::kBreak ? Flow::kBreak : Flow::kContinue;
        return OkStatus();
      case NodeKind::kBlock:
        return RenderBody(node.bodies[0], out);
    }
    return OkStatus();
  }

  // Binds loop targets: one name takes the item, several unpack a list of that many items.
  Status Bind(const Node& node, const std::vector<std::string>& names, const Value& item,
              Scope* scope) {
    if (names.size() == 1) {
      (*scope)[names[0]] = item;
      return OkStatus();
    }
    if (!item.is_list() || item.items().size() != names.size()) {
      return Fail(node.pos, "cannot unpack ", item.TypeName(), " into ", names.size(),
                  " variables");
    }
    for (size_t i = 0; i < names.size(); ++i) (*scope)[names[i]] = item.items()[i];
    return OkStatus();
  }

  StatusOr<std::vector<Value>> Iterate(const Value& v, int64_t pos) const {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return std::vector<Value>{};
      case Value::Kind::kList:
        return v.items();
      case Value::Kind::kDict: {
        if (v.is_namespace()) return Fail(pos, "cannot iterate over a namespace");
        std::vector<Value> keys;
        for (const auto& item : v.dict().items) keys.push_back(Value::String(item.first));
        return keys;
      }
      case Value::Kind::kString: {
        std::vector<Value> chars;
        for (std::string_view c : CodePoints(v.as_string()))
          chars.push_back(Value::String(std::string(c)));
        return chars;
      }
      default:
        return Fail(pos, v.TypeName(), " is not iterable");
    }
  }

  Status RenderFor(const Node& node, std::string* out) {
    LOOM_ASSIGN_OR_RETURN(const Value iterable, Eval(*node.expr));
    LOOM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable, node.expr->pos));
    if (node.filter != nullptr) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        Status bound = Bind(node, node.names, item, &scopes_.back());
        StatusOr<Value> keep = bound.ok() ? Eval(*node.filter) : StatusOr<Value>(bound);
        scopes_.pop_back();
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (node.bodies.size() > 1) return RenderBody(node.bodies[1], out);
      return OkStatus();
    }
    const int64_t n = static_cast<int64_t>(items.size());
    ++loop_depth_;
    Status status;
    for (int64_t i = 0; i < n && status.ok(); ++i) {
      scopes_.emplace_back();
      Scope& scope = scopes_.back();
      status = Bind(node, node.names, items[static_cast<size_t>(i)], &scope);
      if (status.ok()) {
        std::vector<std::pair<std::string, Value>> loop = {
            {"index", Value::Int(i + 1)},
            {"index0", Value::Int(i)},
            {"revindex", Value::Int(n - i)},
            {"revindex0", Value::Int(n - i - 1)},
            {"first", Value::Bool(i == 0)},
            {"last", Value::Bool(i == n - 1)},
            {"length", Value::Int(n)},
            {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
            {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value()},
        };
        scope["loop"] = Value::Dict(std::move(loop));
        status = RenderBody(node.bodies[0], out);
      }
      scopes_.pop_back();
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
    --loop_depth_;
    return status;
  }

  Status RenderSet(const Node& node) {
    LOOM_ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
    if (!node.attr.empty()) {
      const Value target = Lookup(node.names[0]);
      if (!target.is_namespace()) {
        return Fail(node.pos, "'", node.names[0], "' is not a namespace (set ", node.names[0], ".",
                    node.attr, ")");
      }
      if (ContainsNamespace(v)) {
        return Fail(node.pos, "storing a namespace inside a namespace is not supported");
      }
      if (v.depth() + 1 > kMaxDepth) return Fail(node.pos, "value nests too deeply");
      target.mutable_dict().Set(node.attr, std::move(v));
      return OkStatus();
    }
    if (node.names.size() == 1) {
      scopes_.back()[node.names[0]] = std::move(v);
      return OkStatus();
    }
    return Bind(node, node.names, v, &scopes_.back());
  }

  StatusOr<Value> Eval(const Expr& e) {
    RecursionGuard guard(&recursion_);
    LOOM_RETURN_IF_ERROR(CheckRecursion(e.pos));
    LOOM_RETURN_IF_ERROR(Step(e.pos));
    LOOM_ASSIGN_OR_RETURN(Value v, EvalInner(e));
    if (v.depth() > kMaxDepth) return Fail(e.pos, "value nests deeper than ", kMaxDepth, " levels");
    return v;
  }

  StatusOr<std::vector<Value>> EvalAll(const std::vector<std::unique_ptr<Expr>>& exprs,
                                       size_t from) {
    std::vector<Value> out;
    for (size_t i = from; i < exprs.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(Value v, Eval(*exprs[i]));
      out.push_back(std::move(v));
    }
    return out;
  }

  StatusOr<Kwargs> EvalKwargs(const Expr& e) {
    Kwargs out;
    for (const auto& [k, expr] : e.kwargs) {
      LOOM_ASSIGN_OR_RETURN(Value v, Eval(*expr));
      out.emplace_back(k, std::move(v));
    }
    return out;
  }

  StatusOr<Value> EvalInner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName:
        return Lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        LOOM_ASSIGN_OR_RETURN(std::vector<Value> items, EvalAll(e.args, 0));
        return Value::List(std::move(items));
      }
      case ExprKind::kDict: {
        std::vector<std::pair<std::string, Value>> items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          LOOM_ASSIGN_OR_RETURN(const Value k, Eval(*e.args[i]));
          if (!k.is_string()) {
            return UnimplementedError("chat template ", Where(source_, e.args[i]->pos),
                                      ": dict keys other than strings are not supported");
          }
          LOOM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
          bool replaced = false;
          for (auto& item : items) {
            if (item.first == k.as_string()) {
              item.second = v;
              replaced = true;
            }
          }
          if (!replaced) items.emplace_back(k.as_string(), std::move(v));
        }
        return Value::Dict(std::move(items));
      }
      case ExprKind::kAttr: {
        LOOM_ASSIGN_OR_RETURN(const Value object, Eval(*e.args[0]));
        if (object.is_dict()) {
          const Value* found = object.dict().Find(e.name);
          return found != nullptr ? *found : Value();
        }
        return Value();  // lenient: a missing attribute is undefined
      }
      case ExprKind::kIndex: {
        LOOM_ASSIGN_OR_RETURN(const Value object, Eval(*e.args[0]));
        LOOM_ASSIGN_OR_RETURN(const Value index, Eval(*e.args[1]));
        return Index(object, index);
      }
      case ExprKind::kSlice:
        return EvalSlice(e);
      case ExprKind::kCall:
        return EvalCall(e);
      case ExprKind::kFilter: {
        LOOM_ASSIGN_OR_RETURN(const Value operand, Eval(*e.args[0]));
        LOOM_ASSIGN_OR_RETURN(const std::vector<Value> args, EvalAll(e.args, 1));
        LOOM_ASSIGN_OR_RETURN(const Kwargs kwargs, EvalKwargs(e));
        StatusOr<Value> r = ApplyFilter(e.name, operand, args, kwargs, ctx_);
        if (!r.ok()) return ErrorAt(e.pos, r.status());
        return r;
      }
      case ExprKind::kTest: {
        LOOM_ASSIGN_OR_RETURN(const Value operand, Eval(*e.args[0]));
        LOOM_ASSIGN_OR_RETURN(const std::vector<Value> args, EvalAll(e.args, 1));
        StatusOr<bool> r = ApplyTest(e.name, operand, args);
        if (!r.ok()) return ErrorAt(e.pos, r.status());
        return Value::Bool(*r != e.negated);
      }
      case ExprKind::kNot: {
        LOOM_ASSIGN_OR_RETURN(const Value v, Eval(*e.args[0]));
        return Value::Bool(!v.Truthy());
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        LOOM_ASSIGN_OR_RETURN(const Value v, Eval(*e.args[0]));
        if (!v.is_number())
          return Fail(e.pos, "bad operand for unary ", e.kind == ExprKind::kNeg ? "-" : "+", ": ",
                      v.TypeName());
        if (e.kind == ExprKind::kPos) return v;
        if (v.kind() == Value::Kind::kInt) {
          if (v.as_int() == std::numeric_limits<int64_t>::min())
            return Fail(e.pos, "integer overflow");
          return Value::Int(-v.as_int());
        }
        return Value::Float(-v.as_number());
      }
      case ExprKind::kBinary: {
        LOOM_ASSIGN_OR_RETURN(const Value a, Eval(*e.args[0]));
        LOOM_ASSIGN_OR_RETURN(const Value b, Eval(*e.args[1]));
        return Binary(e, a, b);
      }
      case ExprKind::kCompare:
        return EvalCompare(e);
      case ExprKind::kAnd: {
        LOOM_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
        if (!a.Truthy()) return a;
        return Eval(*e.args[1]);
      }
      case ExprKind::kOr: {
        LOOM_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
        if (a.Truthy()) return a;
        return Eval(*e.args[1]);
      }
      case ExprKind::kCond: {
        LOOM_ASSIGN_OR_RETURN(const Value c, Eval(*e.args[1]));
        if (c.Truthy()) return Eval(*e.args[0]);
        if (e.args[2] == nullptr) return Value();
        return Eval(*e.args[2]);
      }
    }
    return Value();
  }

  static Value Index(const Value& object, const Value& index) {
    if (object.is_list() && index.kind() == Value::Kind::kInt) {
      const int64_t n = static_cast<int64_t>(object.items().size());
      int64_t i = index.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return object.items()[static_cast<size_t>(i)];
    }
    if (object.is_dict() && index.is_string()) {
      const Value* found = object.dict().Find(index.as_string());
      return found != nullptr ? *found : Value();
    }
    if (object.is_string() && index.kind() == Value::Kind::kInt) {
      const std::vector<std::string_view> chars = CodePoints(object.as_string());
      const int64_t n = static_cast<int64_t>(chars.size());
      int64_t i = index.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return Value::String(std::string(chars[static_cast<size_t>(i)]));
    }
    return Value();
  }

  StatusOr<Value> EvalSlice(const Expr& e) {
    LOOM_ASSIGN_OR_RETURN(const Value object, Eval(*e.args[0]));
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (e.args[static_cast<size_t>(k + 1)] == nullptr) continue;
      LOOM_ASSIGN_OR_RETURN(const Value v, Eval(*e.args[static_cast<size_t>(k + 1)]));
      if (v.is_none()) continue;
      if (v.kind() != Value::Kind::kInt) return Fail(e.pos, "slice bounds must be integers");
      bounds[k] = v.as_int();
      given[k] = true;
    }
    const int64_t step = given[2] ? bounds[2] : 1;
    if (step == 0) return Fail(e.pos, "slice step cannot be zero");
    std::vector<std::string_view> chars;
    int64_t n = 0;
    if (object.is_list()) {
      n = static_cast<int64_t>(object.items().size());
    } else if (object.is_string()) {
      chars = CodePoints(object.as_string());
      n = static_cast<int64_t>(chars.size());
    } else if (object.is_undefined()) {
      return Value();
    } else {
      return Fail(e.pos, "cannot slice ", object.TypeName());
    }
    // Python's slice.indices().
    auto clamp = [&](int64_t v, bool is_given, int64_t fallback) {
      if (!is_given) return fallback;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bounds[1], given[1], step > 0 ? n : -1);
    std::vector<Value> items;
    std::string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (object.is_list()) {
        items.push_back(object.items()[static_cast<size_t>(i)]);
      } else {
        text.append(chars[static_cast<size_t>(i)]);
      }
    }
    if (object.is_list()) return Value::List(std::move(items));
    return Value::String(std::move(text));
  }

  StatusOr<Value> EvalCall(const Expr& e) {
    const Expr& callee = *e.args[0];
    LOOM_ASSIGN_OR_RETURN(const std::vector<Value> args, EvalAll(e.args, 1));
    LOOM_ASSIGN_OR_RETURN(const Kwargs kwargs, EvalKwargs(e));
    if (callee.kind == ExprKind::kAttr) {
      LOOM_ASSIGN_OR_RETURN(const Value object, Eval(*callee.args[0]));
      const Value* member = object.is_dict() ? object.dict().Find(callee.name) : nullptr;
      if (member == nullptr || !member->is_callable()) {
        bool found = false;
        StatusOr<Value> r = CallMethod(object, callee.name, args, kwargs, ctx_, &found);
        if (!r.ok()) return ErrorAt(e.pos, r.status());
        if (found) return r;
        return UnimplementedError("chat template ", Where(source_, e.pos), ": method '",
                                  callee.name, "' of ", object.TypeName(), " is not supported");
      }
      return CallValue(e, *member, args, kwargs);
    }
    LOOM_ASSIGN_OR_RETURN(const Value f, Eval(callee));
    if (f.is_undefined() && callee.kind == ExprKind::kName) {
      return UnimplementedError("chat template ", Where(source_, e.pos), ": function '",
                                callee.name, "' is not defined");
    }
    return CallValue(e, f, args, kwargs);
  }

  StatusOr<Value> CallValue(const Expr& e, const Value& f, const std::vector<Value>& args,
                            const Kwargs& kwargs) {
    if (!f.is_callable()) return Fail(e.pos, f.TypeName(), " is not callable");
    const Node* macro = f.callable().macro;
    if (macro == nullptr) {
      StatusOr<Value> r = CallGlobal(f.callable().name, args, kwargs, ctx_);
      if (!r.ok()) return ErrorAt(e.pos, r.status());
      return r;
    }
    if (++call_depth_ > 64) {
      --call_depth_;
      return Fail(e.pos, "macro calls nest deeper than 64 levels");
    }
    Scope params;
    if (args.size() > macro->names.size()) {
      --call_depth_;
      return Fail(e.pos, "macro '", macro->name, "' takes ", macro->names.size(),
                  " arguments, got ", args.size());
    }
    for (size_t i = 0; i < macro->names.size(); ++i) {
      if (i < args.size()) {
        params[macro->names[i]] = args[i];
      } else if (macro->conds[i] != nullptr) {
        StatusOr<Value> d = Eval(*macro->conds[i]);
        if (!d.ok()) {
          --call_depth_;
          return d.status();
        }
        params[macro->names[i]] = *d;
      }
    }
    for (const auto& [k, v] : kwargs) params[k] = v;
    frames_.push_back(scopes_.size());
    scopes_.push_back(std::move(params));
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string out;
    Status s = RenderBody(macro->bodies[0], &out);
    loop_depth_ = saved_loop_depth;
    flow_ = Flow::kNormal;
    scopes_.pop_back();
    frames_.pop_back();
    --call_depth_;
    if (!s.ok()) return s;
    return Value::String(std::move(out));
  }

  StatusOr<Value> Binary(const Expr& e, const Value& a, const Value& b) {
    const std::string& op = e.name;
    const int64_t max = options_.max_output_bytes;
    if (op == "~") {
      std::string s = Str(a);
      AppendStr(b, &s);
      if (static_cast<int64_t>(s.size()) > max) return Fail(e.pos, "string too long");
      return Value::String(std::move(s));
    }
    if (a.is_undefined() || b.is_undefined()) {
      return Fail(e.pos, "undefined value in '", op, "' (", a.TypeName(), " ", op, " ",
                  b.TypeName(), ")");
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (static_cast<int64_t>(a.as_string().size() + b.as_string().size()) > max) {
          return Fail(e.pos, "string too long");
        }
        return Value::String(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list()) {
        if (static_cast<int64_t>(a.items().size() + b.items().size()) > max) {
          return Fail(e.pos, "list too long");
        }
        std::vector<Value> items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::List(std::move(items));
      }
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
      const Value& seq = a.is_string() || a.is_list() ? a : b;
      const Value& count = &seq == &a ? b : a;
      if (count.kind() != Value::Kind::kInt) {
        return Fail(e.pos, "can't multiply ", seq.TypeName(), " by ", count.TypeName());
      }
      const int64_t times = std::max<int64_t>(count.as_int(), 0);
      const int64_t unit = seq.is_string() ? static_cast<int64_t>(seq.as_string().size())
                                           : static_cast<int64_t>(seq.items().size());
      if (unit > 0 && times > max / unit) return Fail(e.pos, "repetition too long");
      if (seq.is_string()) {
        std::string s;
        for (int64_t i = 0; i < times; ++i) s += seq.as_string();
        return Value::String(std::move(s));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i) {
        items.insert(items.end(), seq.items().begin(), seq.items().end());
      }
      return Value::List(std::move(items));
    }
    const auto numeric = [](const Value& v) {
      return v.is_number() || v.kind() == Value::Kind::kBool;
    };
    if (!numeric(a) || !numeric(b)) {
      if (op == "%" && a.is_string()) {
        return UnimplementedError("chat template ", Where(source_, e.pos),
                                  ": printf-style string formatting ('%') is not supported");
      }
      return Fail(e.pos, "unsupported operand types for ", op, ": ", a.TypeName(), " and ",
                  b.TypeName());
    }
    const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
    const int64_t x = a.kind() == Value::Kind::kBool ? a.as_bool() : a.as_int();
    const int64_t y = b.kind() == Value::Kind::kBool ? b.as_bool() : b.as_int();
    const double fx = a.kind() == Value::Kind::kBool ? a.as_bool() : a.as_number();
    const double fy = b.kind() == Value::Kind::kBool ? b.as_bool() : b.as_number();
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      if (ints) {
        const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                              : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                          : __builtin_mul_overflow(x, y, &r);
        if (overflow) return Fail(e.pos, "integer overflow");
        return Value::Int(r);
      }
      return Value::Float(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
    }
    if (op == "/") {
      if (fy == 0) return Fail(e.pos, "division by zero");
      return Value::Float(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (y == 0) return Fail(e.pos, "integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1)
          return Fail(e.pos, "integer overflow");
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
          --q;
          m += y;
        }
        return Value::Int(op == "//" ? q : m);
      }
      if (fy == 0) return Fail(e.pos, "float division or modulo by zero");
      const double q = std::floor(fx / fy);
      return Value::Float(op == "//" ? q : fx - q * fy);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t result = 1;
        for (int64_t i = 0; i < y; ++i) {
          if (__builtin_mul_overflow(result, x, &result)) return Fail(e.pos, "integer overflow");
          if (result == 0 || result == 1) break;
        }
        return Value::Int(result);
      }
      return Value::Float(std::pow(fx, fy));
    }
    return Fail(e.pos, "unknown operator ", op);
  }

  StatusOr<Value> EvalCompare(const Expr& e) {
    LOOM_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
    for (size_t i = 0; i < e.ops.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
      const std::string& op = e.ops[i];
      bool result = false;
      if (op == "==" || op == "!=") {
        result = Equal(left, right) == (op == "==");
      } else if (op == "in" || op == "notin") {
        LOOM_ASSIGN_OR_RETURN(const bool in, Contains(e, right, left));
        result = in == (op == "in");
      } else {
        StatusOr<bool> r = op == "<"    ? Less(left, right)
                           : op == ">"  ? Less(right, left)
                           : op == "<=" ? Less(right, left)
                                        : Less(left, right);
        if (!r.ok()) return ErrorAt(e.pos, r.status());
        result = (op == "<" || op == ">") ? *r : !*r;
      }
      if (!result) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  StatusOr<bool> Contains(const Expr& e, const Value& container, const Value& item) {
    switch (container.kind()) {
      case Value::Kind::kString:
        if (!item.is_string()) return Fail(e.pos, "'in <string>' needs a string on the left");
        return container.as_string().find(item.as_string()) != std::string::npos;
      case Value::Kind::kList:
        for (const Value& v : container.items()) {
          if (Equal(v, item)) return true;
        }
        return false;
      case Value::Kind::kDict:
        return item.is_string() && container.dict().Find(item.as_string()) != nullptr;
      case Value::Kind::kUndefined:
        return false;
      default:
        return Fail(e.pos, "argument of type ", container.TypeName(), " is not iterable");
    }
  }

  std::string_view source_;
  const RenderOptions& options_;
  BuiltinContext ctx_;
  std::vector<Scope> scopes_;
  std::vector<size_t> frames_;  // index of each call frame's first scope
  Flow flow_ = Flow::kNormal;
  int loop_depth_ = 0;
  int call_depth_ = 0;
  int recursion_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

StatusOr<Template> Template::Parse(std::string_view source) {
  Template t;
  t.source_ = std::string(source);
  LOOM_ASSIGN_OR_RETURN(t.body_, ParseTemplate(t.source_));
  return t;
}

StatusOr<std::string> Template::Render(const Value& variables, const RenderOptions& options) const {
  std::string out;
  Interpreter interpreter(source_, options);
  LOOM_RETURN_IF_ERROR(interpreter.Run(body_, variables, &out));
  return out;
}

}  // namespace loom::text::jinja
