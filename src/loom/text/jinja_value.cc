#include "loom/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "loom/text/utf8.h"

namespace loom::text::jinja {

const Value* DictRep::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictRep::Set(std::string key, Value value) {
  depth = std::max(depth, value.depth() + 1);
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ListRep>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  v.list_->depth = depth + 1;
  v.list_->items = std::move(items);
  return v;
}

Value Value::Dict(std::vector<std::pair<std::string, Value>> items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<DictRep>();
  int depth = 0;
  for (const auto& item : items) depth = std::max(depth, item.second.depth());
  v.dict_->depth = depth + 1;
  v.dict_->items = std::move(items);
  return v;
}

Value Value::Namespace() {
  Value v = Dict();
  v.dict_->is_namespace = true;
  return v;
}

Value Value::Callable(std::string name, const Node* macro) {
  Value v;
  v.kind_ = Kind::kCallable;
  auto rep = std::make_shared<CallableRep>();
  rep->name = std::move(name);
  rep->macro = macro;
  v.callable_ = std::move(rep);
  return v;
}

namespace {

template <class Json>
StatusOr<Value> FromJsonAt(const Json& j, int depth) {
  if (depth > kMaxDepth) {
    return InvalidArgumentError("template data nests deeper than ", kMaxDepth, " levels");
  }
  switch (j.type()) {
    case Json::value_t::null:
      return Value::None();
    case Json::value_t::boolean:
      return Value::Bool(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::Float(j.template get<double>());
    case Json::value_t::string:
      return Value::String(j.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        LOOM_ASSIGN_OR_RETURN(Value v, FromJsonAt(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) {
        LOOM_ASSIGN_OR_RETURN(Value v, FromJsonAt(e, depth + 1));
        items.emplace_back(k, std::move(v));
      }
      return Value::Dict(std::move(items));
    }
    default:
      return InvalidArgumentError("template data: unsupported JSON value");
  }
}

}  // namespace

StatusOr<Value> Value::FromJson(const nlohmann::json& j) { return FromJsonAt(j, 0); }
StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& j) { return FromJsonAt(j, 0); }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return dict_->is_namespace ? "namespace" : "dict";
    case Kind::kCallable:
      return "callable";
  }
  return "?";
}

int Value::depth() const {
  if (kind_ == Kind::kList) return list_->depth;
  if (kind_ == Kind::kDict) return dict_->depth;
  return 0;
}

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kInt && b.kind() == K::kInt) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  // Python: True == 1; booleans compare as numbers with numbers.
  if (a.kind() == K::kBool && b.is_number()) return Equal(Value::Int(a.as_bool()), b);
  if (b.kind() == K::kBool && a.is_number()) return Equal(a, Value::Int(b.as_bool()));
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kBool:
      return a.as_bool() == b.as_bool();
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!Equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      if (a.is_namespace() || b.is_namespace()) return &a.dict() == &b.dict();
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equal(v, *other)) return false;
      }
      return true;
    }
    case K::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

StatusOr<bool> Less(const Value& a, const Value& b) {
  if ((a.is_number() || a.kind() == Value::Kind::kBool) &&
      (b.is_number() || b.kind() == Value::Kind::kBool)) {
    const double x = a.kind() == Value::Kind::kBool ? a.as_bool() : a.as_number();
    const double y = b.kind() == Value::Kind::kBool ? b.as_bool() : b.as_number();
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt) {
      return a.as_int() < b.as_int();
    }
    return x < y;
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return InvalidArgumentError("cannot compare ", a.TypeName(), " with ", b.TypeName());
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed for exponents -4..15, else d.ddde+XX.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
             digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

namespace {

void AppendQuoted(std::string_view s, std::string* out) {
  // Python's repr: single quotes unless the text has ' and no ".
  const bool double_quote =
      s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = double_quote ? '"' : '\'';
  out->push_back(q);
  for (char c : s) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c == q) {
          out->push_back('\\');
          out->push_back(c);
        } else if (static_cast<uint8_t>(c) < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<uint8_t>(c));
          out->append(buf);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back(q);
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<uint8_t>(c));
          out->append(buf);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

Status AppendJsonAt(const Value& v, int indent, bool sort_keys, int level, std::string* out) {
  using K = Value::Kind;
  if (level > kMaxDepth + 1) return InvalidArgumentError("tojson: nesting too deep");
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case K::kNone:
      out->append("null");
      return OkStatus();
    case K::kBool:
      out->append(v.as_bool() ? "true" : "false");
      return OkStatus();
    case K::kInt:
      out->append(std::to_string(v.as_int()));
      return OkStatus();
    case K::kFloat: {
      const double d = v.as_number();
      out->append(std::isnan(d)   ? "NaN"
                  : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                  : FloatRepr(d));
      return OkStatus();
    }
    case K::kString:
      AppendJsonString(v.as_string(), out);
      return OkStatus();
    case K::kList: {
      if (v.items().empty()) {
        out->append("[]");
        return OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out->append(item_sep);
        newline(level + 1);
        LOOM_RETURN_IF_ERROR(AppendJsonAt(v.items()[i], indent, sort_keys, level + 1, out));
      }
      newline(level);
      out->push_back(']');
      return OkStatus();
    }
    case K::kDict: {
      if (v.dict().items.empty()) {
        out->append("{}");
        return OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> order;
      for (const auto& item : v.dict().items) order.push_back(&item);
      if (sort_keys) {
        std::stable_sort(order.begin(), order.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < order.size(); ++i) {
        if (i > 0) out->append(item_sep);
        newline(level + 1);
        AppendJsonString(order[i]->first, out);
        out->append(": ");
        LOOM_RETURN_IF_ERROR(AppendJsonAt(order[i]->second, indent, sort_keys, level + 1, out));
      }
      newline(level);
      out->push_back('}');
      return OkStatus();
    }
    case K::kUndefined:
      return InvalidArgumentError("tojson: cannot serialize an undefined value");
    case K::kCallable:
      return InvalidArgumentError("tojson: cannot serialize a callable");
  }
  return OkStatus();
}

}  // namespace

Status AppendJson(const Value& v, int indent, bool sort_keys, std::string* out) {
  return AppendJsonAt(v, indent, sort_keys, 0, out);
}

void AppendRepr(const Value& v, std::string* out) {
  if (v.is_string()) {
    AppendQuoted(v.as_string(), out);
    return;
  }
  AppendStr(v, out);
}

void AppendStr(const Value& v, std::string* out) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined:
      return;
    case K::kNone:
      out->append("None");
      return;
    case K::kBool:
      out->append(v.as_bool() ? "True" : "False");
      return;
    case K::kInt:
      out->append(std::to_string(v.as_int()));
      return;
    case K::kFloat:
      out->append(FloatRepr(v.as_number()));
      return;
    case K::kString:
      out->append(v.as_string());
      return;
    case K::kList:
      out->push_back('[');
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out->append(", ");
        AppendRepr(v.items()[i], out);
      }
      out->push_back(']');
      return;
    case K::kDict:
      if (v.is_namespace()) {
        out->append("<Namespace>");
        return;
      }
      out->push_back('{');
      for (size_t i = 0; i < v.dict().items.size(); ++i) {
        if (i > 0) out->append(", ");
        AppendQuoted(v.dict().items[i].first, out);
        out->append(": ");
        AppendRepr(v.dict().items[i].second, out);
      }
      out->push_back('}');
      return;
    case K::kCallable:
      out->append("<function ").append(v.callable().name).append(">");
      return;
  }
}

std::string Str(const Value& v) {
  std::string out;
  AppendStr(v, &out);
  return out;
}

bool ContainsNamespace(const Value& v) {
  if (v.is_namespace()) return true;
  if (v.is_list()) {
    return std::any_of(v.items().begin(), v.items().end(), ContainsNamespace);
  }
  if (v.is_dict()) {
    for (const auto& item : v.dict().items) {
      if (ContainsNamespace(item.second)) return true;
    }
  }
  return false;
}

}  // namespace loom::text::jinja
