// The built-in filters, tests, methods and global functions of the Jinja interpreter (internal to
// jinja.cc).  Strings are UTF-8 and measured, indexed and sliced by code point, as Python does.
//
// Filters: abs, capitalize, count, d/default, first, float, indent, int, items, join, last, length,
//   list, lower, map, reject, rejectattr, replace, reverse, round, safe, select, selectattr, sort,
//   string, title, tojson, trim, unique, upper.
// Tests: boolean, callable, defined, divisibleby, eq/equalto/==, even, false, float, ge/gt/le/lt,
//   in, integer, iterable, lower, mapping, ne/!=, none, number, odd, sameas, sequence, string,
//   true, undefined, upper.
// Methods: str: startswith endswith split rsplit strip lstrip rstrip upper lower title capitalize
//   replace find count; dict: items keys values get.
// Globals: range, namespace, dict, raise_exception, strftime_now.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/text/jinja_value.h"

namespace loom::text::jinja {

using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

struct BuiltinContext {
  int64_t now_unix_seconds = -1;
  int64_t max_bytes = 16 << 20;  // the longest string or list (in items) a builtin may build
};

// Errors name the filter / test / method; the caller adds the template position.
StatusOr<Value> ApplyFilter(std::string_view name, const Value& operand, const Args& args,
                            const Kwargs& kwargs, const BuiltinContext& ctx);
StatusOr<bool> ApplyTest(std::string_view name, const Value& operand, const Args& args);
// Calls a method of a string or dict; `*found` is false (and the result undefined) when the
// value has no method of that name.
StatusOr<Value> CallMethod(const Value& object, std::string_view name, const Args& args,
                           const Kwargs& kwargs, const BuiltinContext& ctx, bool* found);
// Calls a builtin global (a callable whose name is one of the globals above).
StatusOr<Value> CallGlobal(std::string_view name, const Args& args, const Kwargs& kwargs,
                           const BuiltinContext& ctx);
// The names of the builtin globals.
const std::vector<std::string_view>& GlobalNames();

// Code-point helpers shared with the interpreter.
int64_t CodePointLength(std::string_view s);
std::vector<std::string_view> CodePoints(std::string_view s);

}  // namespace loom::text::jinja
