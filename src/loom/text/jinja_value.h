// Values of the Jinja interpreter (jinja.h), with Python's semantics where templates can tell:
// truthiness, equality (1 == 1.0, lists and dicts by content), str() and repr() spellings
// ("None", "True", "['a', 1]"), and json.dumps for the tojson filter.  Lists and dicts are shared
// and never mutated once built (templates cannot mutate them: Hugging Face renders in Jinja's
// immutable sandbox); namespace() objects are the one mutable kind.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "loom/base/status.h"

namespace loom::text::jinja {

class Value;
struct Node;

// The deepest nesting of lists and dicts a value may have (deeper values are refused where they
// are made, so printing, comparing and freeing them never recurse deeply).
inline constexpr int kMaxDepth = 128;

struct ListRep {
  std::vector<Value> items;
  int depth = 1;  // nesting of lists and dicts, this one included
};

// A dict or a namespace: string keys in insertion order (Python dicts keep it; tojson and items()
// show it).
struct DictRep {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  int depth = 1;

  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

// A callable: a builtin global (range, namespace, raise_exception, strftime_now) or a macro.
struct CallableRep {
  std::string name;
  const Node* macro = nullptr;  // the {% macro %} node; null for builtins
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,  // also namespaces
    kCallable,
  };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(std::vector<Value> items);
  static Value Dict(std::vector<std::pair<std::string, Value>> items = {});
  static Value Namespace();
  static Value Callable(std::string name, const Node* macro = nullptr);
  // From JSON: objects become dicts (string keys), arrays lists, null none.  Nesting deeper than
  // kMaxDepth fails.
  static StatusOr<Value> FromJson(const nlohmann::json& j);
  // The same keeping the objects' key order (tool definitions print in the order they were given).
  static StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : f_; }
  const std::string& as_string() const { return *s_; }
  const std::vector<Value>& items() const { return list_->items; }
  const DictRep& dict() const { return *dict_; }
  DictRep& mutable_dict() const { return *dict_; }  // namespaces only
  const CallableRep& callable() const { return *callable_; }

  // Python truthiness: undefined, none, false, 0, "", [] and {} are false.
  bool Truthy() const;
  // The type name for error messages ("string", "list", ...).
  std::string_view TypeName() const;
  // Nesting of lists and dicts: 0 for scalars, 1 for a flat list, ...
  int depth() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // shared: templates read the same contents many times
  std::shared_ptr<ListRep> list_;
  std::shared_ptr<DictRep> dict_;
  std::shared_ptr<const CallableRep> callable_;
};

// Python ==.
bool Equal(const Value& a, const Value& b);
// Python <, for numbers, strings and lists; an error for other kinds.
StatusOr<bool> Less(const Value& a, const Value& b);

// str(value) as Jinja prints it ({{ x }}): undefined -> "", none -> "None", strings as they are.
void AppendStr(const Value& v, std::string* out);
std::string Str(const Value& v);
// repr(value): strings quoted ('a'), as inside printed lists and dicts.
void AppendRepr(const Value& v, std::string* out);

// json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys), as Hugging Face's
// tojson filter; indent < 0 means none.  Undefined and callables cannot be serialized.  Nesting
// deeper than 512 fails.
Status AppendJson(const Value& v, int indent, bool sort_keys, std::string* out);

// Python float repr ("1.0", "0.1", "1e-05", "inf").
std::string FloatRepr(double d);

// Whether a value contains a namespace (storing one in a namespace could build a cycle).
bool ContainsNamespace(const Value& v);

}  // namespace loom::text::jinja
