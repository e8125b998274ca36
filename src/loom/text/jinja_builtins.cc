#include "loom/text/jinja_builtins.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "loom/text/utf8.h"

namespace loom::text::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;

// Python's str.isspace() characters.
bool IsPySpace(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

char32_t CodePointOf(std::string_view ch) {
  const size_t len = Utf8CharLength(ch, 0);
  return len == 0 ? 0xFFFD : DecodeUtf8Char(ch, 0, len);
}

// Positional argument `i`, else keyword `name`, else null.
const Value* Arg(const Args& args, const Kwargs& kwargs, size_t i, std::string_view name) {
  if (i < args.size()) return &args[i];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

StatusOr<std::string> StringArg(const Args& args, const Kwargs& kwargs, size_t i,
                                std::string_view name, std::string_view fn, std::string fallback) {
  const Value* v = Arg(args, kwargs, i, name);
  if (v == nullptr || v->is_none() || v->is_undefined()) return fallback;
  if (!v->is_string()) {
    return InvalidArgumentError(fn, ": argument '", name, "' must be a string, not ",
                                v->TypeName());
  }
  return v->as_string();
}

StatusOr<int64_t> IntArg(const Args& args, const Kwargs& kwargs, size_t i, std::string_view name,
                         std::string_view fn, int64_t fallback) {
  const Value* v = Arg(args, kwargs, i, name);
  if (v == nullptr || v->is_none() || v->is_undefined()) return fallback;
  if (v->kind() == Value::Kind::kBool) return static_cast<int64_t>(v->as_bool());
  if (v->kind() != Value::Kind::kInt) {
    return InvalidArgumentError(fn, ": argument '", name, "' must be an integer, not ",
                                v->TypeName());
  }
  return v->as_int();
}

bool BoolArg(const Args& args, const Kwargs& kwargs, size_t i, std::string_view name,
             bool fallback) {
  const Value* v = Arg(args, kwargs, i, name);
  return v == nullptr || v->is_undefined() ? fallback : v->Truthy();
}

std::string MapCase(std::string_view s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::string out;
  bool prev_cased = false;
  bool first = true;
  for (std::string_view ch : CodePoints(s)) {
    const size_t len = Utf8CharLength(ch, 0);
    if (len == 0) {
      out.append(ch);
      continue;
    }
    const UChar32 c = static_cast<UChar32>(DecodeUtf8Char(ch, 0, len));
    UChar32 m = c;
    if (mode == 0) {
      m = u_tolower(c);
    } else if (mode == 1) {
      m = u_toupper(c);
    } else if (mode == 2) {
      m = prev_cased ? u_tolower(c) : u_totitle(c);
      prev_cased = u_isalpha(c) != 0;
    } else {
      m = first ? u_totitle(c) : u_tolower(c);
    }
    first = false;
    AppendUtf8(static_cast<char32_t>(m), &out);
  }
  return out;
}

// str.strip / lstrip / rstrip: `chars` null means whitespace.
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<std::string_view> cps = CodePoints(s);
  auto strip_it = [&](std::string_view ch) {
    if (chars == nullptr) return IsPySpace(CodePointOf(ch));
    return std::string_view(*chars).find(ch) != std::string_view::npos;
  };
  size_t a = 0;
  size_t b = cps.size();
  if (left) {
    while (a < b && strip_it(cps[a])) ++a;
  }
  if (right) {
    while (b > a && strip_it(cps[b - 1])) --b;
  }
  std::string out;
  for (size_t i = a; i < b; ++i) out.append(cps[i]);
  return out;
}

StatusOr<Value> StripMethod(const Value& s, const Args& args, bool left, bool right,
                            std::string_view fn) {
  if (args.empty() || args[0].is_none()) {
    return Value::String(Strip(s.as_string(), nullptr, left, right));
  }
  if (!args[0].is_string()) return InvalidArgumentError(fn, ": chars must be a string");
  return Value::String(Strip(s.as_string(), &args[0].as_string(), left, right));
}

StatusOr<Value> Split(const std::string& s, const Args& args, const Kwargs& kwargs,
                      bool from_right) {
  const Value* sep = Arg(args, kwargs, 0, "sep");
  LOOM_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(args, kwargs, 1, "maxsplit", "split", -1));
  std::vector<Value> parts;
  if (sep == nullptr || sep->is_none()) {
    // Runs of whitespace, no empty parts.
    std::vector<std::string_view> cps = CodePoints(s);
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    for (std::string_view ch : cps) {
      if (IsPySpace(CodePointOf(ch))) {
        if (in_word) words.push_back(std::move(cur));
        cur.clear();
        in_word = false;
      } else {
        cur.append(ch);
        in_word = true;
      }
    }
    if (in_word) words.push_back(std::move(cur));
    for (std::string& w : words) parts.push_back(Value::String(std::move(w)));
    return Value::List(std::move(parts));
  }
  if (!sep->is_string() || sep->as_string().empty()) {
    return InvalidArgumentError("split: the separator must be a non-empty string");
  }
  const std::string& d = sep->as_string();
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t pos = 0;
    for (;;) {
      const size_t hit = s.find(d, pos);
      if (hit == std::string::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(pieces.size()) >= maxsplit)) {
        pieces.push_back(s.substr(pos));
        break;
      }
      pieces.push_back(s.substr(pos, hit - pos));
      pos = hit + d.size();
    }
  } else {
    size_t end = s.size();
    for (;;) {
      const size_t hit = end >= d.size() ? s.rfind(d, end - d.size()) : std::string::npos;
      if (hit == std::string::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(pieces.size()) >= maxsplit)) {
        pieces.push_back(s.substr(0, end));
        break;
      }
      pieces.push_back(s.substr(hit + d.size(), end - hit - d.size()));
      end = hit;
    }
    std::reverse(pieces.begin(), pieces.end());
  }
  for (std::string& p : pieces) parts.push_back(Value::String(std::move(p)));
  return Value::List(std::move(parts));
}

StatusOr<Value> Replace(const std::string& s, const Args& args, const Kwargs& kwargs,
                        const BuiltinContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(const std::string old_text,
                        StringArg(args, kwargs, 0, "old", "replace", ""));
  LOOM_ASSIGN_OR_RETURN(const std::string new_text,
                        StringArg(args, kwargs, 1, "new", "replace", ""));
  LOOM_ASSIGN_OR_RETURN(const int64_t count, IntArg(args, kwargs, 2, "count", "replace", -1));
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {
    // Python inserts `new` between every character (and at both ends).
    for (std::string_view ch : CodePoints(s)) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      out.append(ch);
      if (static_cast<int64_t>(out.size()) > ctx.max_bytes) {
        return InvalidArgumentError("replace: result too long");
      }
    }
    if (count < 0 || done < count) out += new_text;
    return Value::String(std::move(out));
  }
  size_t pos = 0;
  for (;;) {
    const size_t hit = s.find(old_text, pos);
    if (hit == std::string::npos || (count >= 0 && done >= count)) break;
    out.append(s, pos, hit - pos);
    out += new_text;
    if (static_cast<int64_t>(out.size()) > ctx.max_bytes) {
      return InvalidArgumentError("replace: result too long");
    }
    pos = hit + old_text.size();
    ++done;
  }
  out.append(s, pos);
  return Value::String(std::move(out));
}

// Attribute lookup for map/selectattr/sort: "a.b" walks dicts; list items by integer parts.
Value GetAttribute(const Value& v, std::string_view path) {
  Value cur = v;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (cur.is_dict()) {
      const Value* found = cur.dict().Find(part);
      cur = found != nullptr ? *found : Value();
    } else if (cur.is_list() && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               part.size() < 10) {
      const size_t i = static_cast<size_t>(std::stoll(std::string(part)));
      cur = i < cur.items().size() ? cur.items()[i] : Value();
    } else {
      return Value();
    }
  }
  return cur;
}

StatusOr<std::vector<Value>> AsList(const Value& v, std::string_view fn) {
  if (v.is_list()) return v.items();
  if (v.is_undefined()) return std::vector<Value>{};
  if (v.is_string()) {
    std::vector<Value> out;
    for (std::string_view ch : CodePoints(v.as_string()))
      out.push_back(Value::String(std::string(ch)));
    return out;
  }
  if (v.is_dict() && !v.is_namespace()) {
    std::vector<Value> out;
    for (const auto& item : v.dict().items) out.push_back(Value::String(item.first));
    return out;
  }
  return InvalidArgumentError(fn, ": ", v.TypeName(), " is not iterable");
}

// select / reject / selectattr / rejectattr.
StatusOr<Value> SelectLike(const Value& operand, const Args& args, bool by_attr, bool keep,
                           std::string_view fn) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<Value> items, AsList(operand, fn));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.empty() || !args[0].is_string()) {
      return InvalidArgumentError(fn, ": the first argument must be an attribute name");
    }
    attr = args[0].as_string();
    next = 1;
  }
  std::string test;
  if (next < args.size()) {
    if (!args[next].is_string())
      return InvalidArgumentError(fn, ": the test name must be a string");
    test = args[next].as_string();
    ++next;
  }
  const Args test_args(args.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.size())),
                       args.end());
  std::vector<Value> out;
  for (const Value& item : items) {
    const Value subject = by_attr ? GetAttribute(item, attr) : item;
    bool pass = false;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      LOOM_ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

std::string LowerIfString(const Value& v) { return v.is_string() ? MapCase(v.as_string(), 0) : ""; }

}  // namespace

int64_t CodePointLength(std::string_view s) { return static_cast<int64_t>(CodePoints(s).size()); }

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t len = Utf8CharLength(s, pos);
    if (len == 0) len = 1;  // an invalid byte counts as one character
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

const std::vector<std::string_view>& GlobalNames() {
  static const std::vector<std::string_view> kNames = {"range", "namespace", "dict",
                                                       "raise_exception", "strftime_now"};
  return kNames;
}

StatusOr<Value> CallGlobal(std::string_view name, const Args& args, const Kwargs& kwargs,
                           const BuiltinContext& ctx) {
  if (name == "range") {
    if (args.empty() || args.size() > 3)
      return InvalidArgumentError("range() takes 1 to 3 arguments");
    int64_t bounds[3] = {0, 0, 1};
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].kind() != Value::Kind::kInt)
        return InvalidArgumentError("range() needs integers");
    }
    if (args.size() == 1) {
      bounds[1] = args[0].as_int();
    } else {
      bounds[0] = args[0].as_int();
      bounds[1] = args[1].as_int();
      if (args.size() == 3) bounds[2] = args[2].as_int();
    }
    if (bounds[2] == 0) return InvalidArgumentError("range() step must not be zero");
    const long double span = static_cast<long double>(bounds[1]) - bounds[0];
    if (span / bounds[2] > kMaxRange) {
      return InvalidArgumentError("range() longer than ", kMaxRange, " items");
    }
    std::vector<Value> items;
    for (int64_t i = bounds[0]; bounds[2] > 0 ? i < bounds[1] : i > bounds[1]; i += bounds[2]) {
      if (static_cast<int64_t>(items.size()) >= kMaxRange) {
        return InvalidArgumentError("range() longer than ", kMaxRange, " items");
      }
      items.push_back(Value::Int(i));
      if ((bounds[2] > 0 && i > INT64_MAX - bounds[2]) ||
          (bounds[2] < 0 && i < INT64_MIN - bounds[2]))
        break;
    }
    return Value::List(std::move(items));
  }
  if (name == "namespace" || name == "dict") {
    Value ns = name == "namespace" ? Value::Namespace() : Value::Dict();
    for (const Value& a : args) {
      if (!a.is_dict() || a.is_namespace()) {
        return InvalidArgumentError(name, "() takes a dict or keyword arguments");
      }
      for (const auto& [k, v] : a.dict().items) ns.mutable_dict().Set(k, v);
    }
    for (const auto& [k, v] : kwargs) {
      if (name == "namespace" && ContainsNamespace(v)) {
        return InvalidArgumentError("namespace(): a namespace inside a namespace is not supported");
      }
      ns.mutable_dict().Set(k, v);
    }
    if (ns.depth() > kMaxDepth) return InvalidArgumentError(name, "(): value nests too deeply");
    return ns;
  }
  if (name == "raise_exception") {
    const std::string message = args.empty() ? std::string() : Str(args[0]);
    return InvalidArgumentError("the template raised an error: ", message);
  }
  if (name == "strftime_now") {
    if (args.size() != 1 || !args[0].is_string()) {
      return InvalidArgumentError("strftime_now() takes one format string");
    }
    if (args[0].as_string().size() > 128)
      return InvalidArgumentError("strftime_now(): format too long");
    const std::time_t now = ctx.now_unix_seconds >= 0
                                ? static_cast<std::time_t>(ctx.now_unix_seconds)
                                : std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), args[0].as_string().c_str(), &tm);
    return Value::String(std::string(buf, n));
  }
  return UnimplementedError("function '", name, "' is not supported");
}

StatusOr<Value> CallMethod(const Value& object, std::string_view name, const Args& args,
                           const Kwargs& kwargs, const BuiltinContext& ctx, bool* found) {
  *found = true;
  if (object.is_string()) {
    const std::string& s = object.as_string();
    if (name == "startswith" || name == "endswith") {
      if (args.empty()) return InvalidArgumentError(name, "() needs an argument");
      std::vector<Value> options =
          args[0].is_list() ? args[0].items() : std::vector<Value>{args[0]};
      for (const Value& o : options) {
        if (!o.is_string()) return InvalidArgumentError(name, "() needs strings");
        const std::string& p = o.as_string();
        const bool hit =
            name == "startswith"
                ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (name == "strip") return StripMethod(object, args, true, true, name);
    if (name == "lstrip") return StripMethod(object, args, true, false, name);
    if (name == "rstrip") return StripMethod(object, args, false, true, name);
    if (name == "split") return Split(s, args, kwargs, false);
    if (name == "rsplit") return Split(s, args, kwargs, true);
    if (name == "upper") return Value::String(MapCase(s, 1));
    if (name == "lower") return Value::String(MapCase(s, 0));
    if (name == "title") return Value::String(MapCase(s, 2));
    if (name == "capitalize") return Value::String(MapCase(s, 3));
    if (name == "replace") return Replace(s, args, kwargs, ctx);
    if (name == "find" || name == "count") {
      if (args.empty() || !args[0].is_string())
        return InvalidArgumentError(name, "() needs a string");
      const std::string& sub = args[0].as_string();
      if (name == "find") {
        const size_t hit = s.find(sub);
        return Value::Int(
            hit == std::string::npos ? -1 : CodePointLength(std::string_view(s).substr(0, hit)));
      }
      if (sub.empty()) return Value::Int(CodePointLength(s) + 1);
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size()))
        ++n;
      return Value::Int(n);
    }
  } else if (object.is_dict() && !object.is_namespace()) {
    if (name == "items") return ApplyFilter("items", object, {}, {}, ctx);
    if (name == "keys" || name == "values") {
      std::vector<Value> out;
      for (const auto& [k, v] : object.dict().items)
        out.push_back(name == "keys" ? Value::String(k) : v);
      return Value::List(std::move(out));
    }
    if (name == "get") {
      if (args.empty() || !args[0].is_string())
        return InvalidArgumentError("get() needs a string key");
      const Value* v = object.dict().Find(args[0].as_string());
      if (v != nullptr) return *v;
      return args.size() > 1 ? args[1] : Value::None();
    }
  }
  *found = false;
  return Value();
}

StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const Args& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "iterable") return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && MapCase(v.as_string(), 0) == v.as_string();
  if (name == "upper") return v.is_string() && MapCase(v.as_string(), 1) == v.as_string();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind() != K::kInt) return InvalidArgumentError("test '", name, "' needs an integer");
    if (name == "odd") return v.as_int() % 2 != 0;
    if (name == "even") return v.as_int() % 2 == 0;
    if (args.empty() || args[0].kind() != K::kInt || args[0].as_int() == 0) {
      return InvalidArgumentError("divisibleby needs a non-zero integer");
    }
    return v.as_int() % args[0].as_int() == 0;
  }
  const bool binary = name == "eq" || name == "equalto" || name == "==" || name == "ne" ||
                      name == "!=" || name == "sameas" || name == "in" || name == "lt" ||
                      name == "le" || name == "gt" || name == "ge" || name == "lessthan" ||
                      name == "greaterthan";
  if (binary) {
    if (args.empty()) return InvalidArgumentError("test '", name, "' needs an argument");
    const Value& other = args[0];
    if (name == "eq" || name == "equalto" || name == "==") return Equal(v, other);
    if (name == "ne" || name == "!=") return !Equal(v, other);
    if (name == "sameas") {
      if (v.kind() != other.kind()) return false;
      if (v.is_none() || v.is_undefined()) return true;
      if (v.kind() == K::kBool) return v.as_bool() == other.as_bool();
      if (v.is_list()) return &v.items() == &other.items();
      if (v.is_dict()) return &v.dict() == &other.dict();
      return Equal(v, other);
    }
    if (name == "in") {
      if (other.is_string())
        return v.is_string() && other.as_string().find(v.as_string()) != std::string::npos;
      if (other.is_list()) {
        return std::any_of(other.items().begin(), other.items().end(),
                           [&](const Value& x) { return Equal(x, v); });
      }
      if (other.is_dict()) return v.is_string() && other.dict().Find(v.as_string()) != nullptr;
      return InvalidArgumentError("test 'in' needs a string, list or dict");
    }
    if (name == "lt" || name == "lessthan") return Less(v, other);
    if (name == "gt" || name == "greaterthan") return Less(other, v);
    LOOM_ASSIGN_OR_RETURN(const bool less, name == "le" ? Less(other, v) : Less(v, other));
    return !less;
  }
  return UnimplementedError("test '", name, "' is not supported");
}

StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const Args& args,
                            const Kwargs& kwargs, const BuiltinContext& ctx) {
  using K = Value::Kind;
  if (name == "safe") return v;
  if (name == "string") return Value::String(Str(v));
  if (name == "trim") {
    const Value* chars = Arg(args, kwargs, 0, "chars");
    const std::string s = Str(v);
    if (chars != nullptr && chars->is_string())
      return Value::String(Strip(s, &chars->as_string(), true, true));
    return Value::String(Strip(s, nullptr, true, true));
  }
  if (name == "upper") return Value::String(MapCase(Str(v), 1));
  if (name == "lower") return Value::String(MapCase(Str(v), 0));
  if (name == "title") return Value::String(MapCase(Str(v), 2));
  if (name == "capitalize") return Value::String(MapCase(Str(v), 3));
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(CodePointLength(v.as_string()));
    if (v.is_list()) return Value::Int(static_cast<int64_t>(v.items().size()));
    if (v.is_dict()) return Value::Int(static_cast<int64_t>(v.dict().items.size()));
    if (v.is_undefined()) return Value::Int(0);
    return InvalidArgumentError("length: ", v.TypeName(), " has no length");
  }
  if (name == "default" || name == "d") {
    const bool boolean = BoolArg(args, kwargs, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.Truthy())) {
      const Value* fallback = Arg(args, kwargs, 0, "default_value");
      return fallback != nullptr ? *fallback : Value::String("");
    }
    return v;
  }
  if (name == "tojson") {
    LOOM_ASSIGN_OR_RETURN(const int64_t indent, IntArg(args, kwargs, 0, "indent", "tojson", -1));
    if (indent > 64) return InvalidArgumentError("tojson: indent too large");
    const bool sort_keys = BoolArg(args, kwargs, 99, "sort_keys", false);
    const Value* separators = Arg(args, kwargs, 99, "separators");
    if (separators != nullptr && !separators->is_none()) {
      return UnimplementedError("tojson: separators are not supported");
    }
    std::string out;
    LOOM_RETURN_IF_ERROR(AppendJson(v, static_cast<int>(indent), sort_keys, &out));
    if (static_cast<int64_t>(out.size()) > ctx.max_bytes)
      return InvalidArgumentError("tojson: too long");
    return Value::String(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::List({});
    if (!v.is_dict() || v.is_namespace())
      return InvalidArgumentError("items: ", v.TypeName(), " is not a dict");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict().items) out.push_back(Value::List({Value::String(k), x}));
    return Value::List(std::move(out));
  }
  if (name == "list") {
    LOOM_ASSIGN_OR_RETURN(std::vector<Value> items, AsList(v, name));
    return Value::List(std::move(items));
  }
  if (name == "first" || name == "last") {
    LOOM_ASSIGN_OR_RETURN(const std::vector<Value> items, AsList(v, name));
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string_view> cps = CodePoints(v.as_string());
      std::string out;
      for (size_t i = cps.size(); i-- > 0;) out.append(cps[i]);
      return Value::String(std::move(out));
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<Value> items, AsList(v, name));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "join") {
    LOOM_ASSIGN_OR_RETURN(const std::string sep, StringArg(args, kwargs, 0, "d", "join", ""));
    const Value* attr = Arg(args, kwargs, 1, "attribute");
    LOOM_ASSIGN_OR_RETURN(const std::vector<Value> items, AsList(v, name));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += sep;
      AppendStr(attr != nullptr && attr->is_string() ? GetAttribute(items[i], attr->as_string())
                                                     : items[i],
                &out);
      if (static_cast<int64_t>(out.size()) > ctx.max_bytes)
        return InvalidArgumentError("join: too long");
    }
    return Value::String(std::move(out));
  }
  if (name == "map") {
    LOOM_ASSIGN_OR_RETURN(const std::vector<Value> items, AsList(v, name));
    std::vector<Value> out;
    const Value* attr = Arg(args, kwargs, 99, "attribute");
    if (attr != nullptr) {
      if (!attr->is_string()) return InvalidArgumentError("map: attribute must be a string");
      const Value* fallback = Arg(args, kwargs, 99, "default");
      for (const Value& item : items) {
        Value x = GetAttribute(item, attr->as_string());
        out.push_back(x.is_undefined() && fallback != nullptr ? *fallback : x);
      }
      return Value::List(std::move(out));
    }
    if (args.empty() || !args[0].is_string()) {
      return InvalidArgumentError("map: needs attribute= or a filter name");
    }
    const Args rest(args.begin() + 1, args.end());
    for (const Value& item : items) {
      LOOM_ASSIGN_OR_RETURN(Value x, ApplyFilter(args[0].as_string(), item, rest, {}, ctx));
      out.push_back(std::move(x));
    }
    return Value::List(std::move(out));
  }
  if (name == "select") return SelectLike(v, args, false, true, name);
  if (name == "reject") return SelectLike(v, args, false, false, name);
  if (name == "selectattr") return SelectLike(v, args, true, true, name);
  if (name == "rejectattr") return SelectLike(v, args, true, false, name);
  if (name == "unique") {
    LOOM_ASSIGN_OR_RETURN(const std::vector<Value> items, AsList(v, name));
    const bool case_sensitive = BoolArg(args, kwargs, 0, "case_sensitive", false);
    std::vector<Value> out;
    std::vector<Value> keys;
    for (const Value& item : items) {
      const Value key =
          !case_sensitive && item.is_string() ? Value::String(LowerIfString(item)) : item;
      if (std::none_of(keys.begin(), keys.end(), [&](const Value& k) { return Equal(k, key); })) {
        keys.push_back(key);
        out.push_back(item);
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "sort") {
    LOOM_ASSIGN_OR_RETURN(std::vector<Value> items, AsList(v, name));
    const bool reverse = BoolArg(args, kwargs, 0, "reverse", false);
    const bool case_sensitive = BoolArg(args, kwargs, 1, "case_sensitive", false);
    const Value* attr = Arg(args, kwargs, 2, "attribute");
    auto key = [&](const Value& x) {
      Value k = attr != nullptr && attr->is_string() ? GetAttribute(x, attr->as_string()) : x;
      return !case_sensitive && k.is_string() ? Value::String(LowerIfString(k)) : k;
    };
    Status error;
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      StatusOr<bool> less = reverse ? Less(key(b), key(a)) : Less(key(a), key(b));
      if (!less.ok()) {
        if (error.ok()) error = less.status();
        return false;
      }
      return *less;
    });
    LOOM_RETURN_IF_ERROR(error);
    return Value::List(std::move(items));
  }
  if (name == "replace") {
    return Replace(Str(v), args, kwargs, ctx);
  }
  if (name == "abs") {
    if (v.kind() == K::kInt) {
      if (v.as_int() == INT64_MIN) return InvalidArgumentError("abs: integer overflow");
      return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (v.kind() == K::kFloat) return Value::Float(std::fabs(v.as_number()));
    return InvalidArgumentError("abs: ", v.TypeName(), " is not a number");
  }
  if (name == "int" || name == "float") {
    const Value* fallback = Arg(args, kwargs, 0, "default");
    const Value def =
        fallback != nullptr ? *fallback : (name == "int" ? Value::Int(0) : Value::Float(0));
    double d = 0;
    if (v.is_number()) {
      d = v.as_number();
    } else if (v.kind() == K::kBool) {
      d = v.as_bool();
    } else if (v.is_string()) {
      const std::string s = Strip(v.as_string(), nullptr, true, true);
      char* end = nullptr;
      d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) return def;
    } else {
      return def;
    }
    if (name == "float") return Value::Float(d);
    if (v.kind() == K::kInt) return v;
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
    return Value::Int(static_cast<int64_t>(d));
  }
  if (name == "round") {
    if (!v.is_number()) return InvalidArgumentError("round: ", v.TypeName(), " is not a number");
    LOOM_ASSIGN_OR_RETURN(const int64_t precision,
                          IntArg(args, kwargs, 0, "precision", "round", 0));
    LOOM_ASSIGN_OR_RETURN(const std::string method,
                          StringArg(args, kwargs, 1, "method", "round", "common"));
    if (precision < 0 || precision > 15)
      return InvalidArgumentError("round: precision out of range");
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_number() * scale;
    const double r = method == "floor"  ? std::floor(x)
                     : method == "ceil" ? std::ceil(x)
                                        : std::round(x);
    return Value::Float(r / scale);
  }
  if (name == "indent") {
    const Value* width_arg = Arg(args, kwargs, 0, "width");
    std::string pad = "    ";
    if (width_arg != nullptr && width_arg->is_string()) {
      pad = width_arg->as_string();
    } else if (width_arg != nullptr && width_arg->kind() == K::kInt) {
      if (width_arg->as_int() < 0 || width_arg->as_int() > 256)
        return InvalidArgumentError("indent: bad width");
      pad = std::string(static_cast<size_t>(width_arg->as_int()), ' ');
    }
    const bool first = BoolArg(args, kwargs, 1, "first", false);
    const bool blank = BoolArg(args, kwargs, 2, "blank", false);
    const std::string s = Str(v);
    std::string out;
    size_t line_start = 0;
    bool is_first = true;
    for (;;) {
      const size_t nl = s.find('\n', line_start);
      const std::string_view line = std::string_view(s).substr(
          line_start, nl == std::string::npos ? std::string::npos : nl - line_start);
      if ((!is_first || first) && (blank || !line.empty())) out += pad;
      out.append(line);
      if (nl == std::string::npos) break;
      out.push_back('\n');
      line_start = nl + 1;
      is_first = false;
      if (static_cast<int64_t>(out.size()) > ctx.max_bytes)
        return InvalidArgumentError("indent: too long");
    }
    return Value::String(std::move(out));
  }
  return UnimplementedError("filter '", name, "' is not supported");
}

}  // namespace loom::text::jinja
