// The Jinja interpreter: syntax, whitespace control, scoping, operators, filters, tests, methods,
// and failing cleanly (errors with positions, Unimplemented for what is not supported, limits on
// loops, output and nesting).
#include "loom/text/jinja.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace loom::text::jinja {
namespace {

// Renders `source` with `vars` (JSON) and returns the text, or "ERROR: <status>".
std::string R(std::string_view source, const char* vars = "{}") {
  auto t = Template::Parse(source);
  if (!t.ok()) return "ERROR: " + t.status().ToString();
  auto v = Value::FromJson(nlohmann::ordered_json::parse(vars));
  if (!v.ok()) return "ERROR: " + v.status().ToString();
  RenderOptions options;
  options.now_unix_seconds = 1721995200;  // 2024-07-26 12:00 UTC
  auto out = t->Render(*v, options);
  return out.ok() ? *out : "ERROR: " + out.status().ToString();
}

Status E(std::string_view source, const char* vars = "{}", RenderOptions options = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  auto v = Value::FromJson(nlohmann::ordered_json::parse(vars));
  if (!v.ok()) return v.status();
  auto out = t->Render(*v, options);
  return out.ok() ? OkStatus() : out.status();
}

TEST(JinjaTest, TextExpressionsAndComments) {
  EXPECT_EQ(R("plain {# comment #}text"), "plain text");
  EXPECT_EQ(R("{{ a }}-{{ b.c }}-{{ d[1] }}", R"({"a": "x", "b": {"c": 2}, "d": [1, 2]})"),
            "x-2-2");
  EXPECT_EQ(R("[{{ missing }}][{{ missing.attr }}]"), "[][]");
  EXPECT_EQ(R("{{ 'a' 'b' }}{{ \"q\\\"\\n\" }}"), "abq\"\n");
  EXPECT_EQ(R("{{ '\\u00e9\\x41' }}"),
            "\xC3\xA9"
            "A");
}

TEST(JinjaTest, PrintsValuesAsPythonDoes) {
  EXPECT_EQ(R("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(R("{{ {'k': \"it's\"} }}"), "{'k': \"it's\"}");
  EXPECT_EQ(R("{{ 1.0 }} {{ 0.1 }} {{ 1e-5 }} {{ 2.5e20 }} {{ 3 / 2 }} {{ 4 / 2 }}"),
            "1.0 0.1 1e-05 2.5e+20 1.5 2.0");
}

TEST(JinjaTest, WhitespaceControlTrimBlocksAndLstripBlocks) {
  EXPECT_EQ(R("a  {{- 'b' -}}  c"), "abc");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it too.
  EXPECT_EQ(R("{% if true %}\n    yes\n    {% endif %}\nend"), "    yes\nend");
  EXPECT_EQ(R("<{% if true %} x {% endif %}>"), "< x >");
  // "+" keeps the indentation; "-" strips all whitespace including newlines.
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(R("a\n\n  {%- if true -%}\n\n  b{% endif %}"), "ab");
  // One trailing newline of the template is dropped.
  EXPECT_EQ(R("x\n"), "x");
  EXPECT_EQ(R("x\n\n"), "x\n");
  EXPECT_EQ(R("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
}

TEST(JinjaTest, IfElifElse) {
  const char* t = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(R(t, R"({"n": 5})"), "big");
  EXPECT_EQ(R(t, R"({"n": 2})"), "two");
  EXPECT_EQ(R(t, R"({"n": 0})"), "small");
  EXPECT_EQ(R("{{ 'y' if x else 'n' }}{{ 'z' if false }}", R"({"x": [0]})"), "y");
}

TEST(JinjaTest, ForLoopsAndTheLoopVariable) {
  EXPECT_EQ(R("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
              "{{ '|' if not loop.last }}{% endfor %}",
              R"({"xs": ["a", "b", "c"]})"),
            "01a|12b|23c");
  EXPECT_EQ(R("{% for x in xs %}{{ loop.first }}{{ loop.length }}{{ loop.revindex0 }} {% endfor %}",
              R"({"xs": [1, 2]})"),
            "True21 False20 ");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(
      R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"b": 1, "a": 2}})"),
      "b=1;a=2;");
  EXPECT_EQ(R("{% for k in d %}{{ k }}{% endfor %}", R"({"d": {"x": 1, "y": 2}})"), "xy");
  EXPECT_EQ(R("{% for x in range(10) if x is odd %}{{ x }}{% endfor %}"), "13579");
  EXPECT_EQ(R("{% for x in xs if x != 'b' %}{{ loop.index }}{{ x }}{% endfor %}",
              R"({"xs": ["a", "b", "c"]})"),
            "1a2c");
  EXPECT_EQ(R("{% for x in range(9) %}{% if x == 2 %}{% continue %}{% endif %}"
              "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(R("{% for c in 'h\xC3\xA9' %}[{{ c }}]{% endfor %}"), "[h][\xC3\xA9]");
}

TEST(JinjaTest, SetScopesAndNamespaces) {
  // A set inside a loop does not leak out of it; a namespace attribute does.
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(R("{% set ns = namespace(x=1, y='a') %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}"
              "{% endfor %}{{ ns.x }}{{ ns.y }}"),
            "4a");
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(
      R("{% set messages = messages[1:] %}{{ messages | length }}", R"({"messages": [1, 2, 3]})"),
      "2");
  EXPECT_EQ(R("{% set block %}in {{ 1 + 1 }}{% endset %}[{{ block }}]"), "[in 2]");
  EXPECT_EQ(R("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");  // if is not a scope
}

TEST(JinjaTest, Macros) {
  EXPECT_EQ(R("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
              "{{ greet('Ann') }} {{ greet('Bo', '?') }} {{ greet(name='Cy', punct='.') }}"),
            "Hi Ann! Hi Bo? Hi Cy.");
  // Macros see the template's globals, not the caller's loop variables.
  EXPECT_EQ(
      R("{% macro show() %}{{ g }}{{ i }}{% endmacro %}{% for i in [7] %}{{ show() }}{% endfor %}",
        R"({"g": "G"})"),
      "G");
}

TEST(JinjaTest, OperatorsAndPrecedence) {
  EXPECT_EQ(
      R("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"),
      "7 9 3 -4 2 1024");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }}"), "a1None abab [1, 2]");
  EXPECT_EQ(R("{{ not false and true }} {{ false or 'x' }} {{ 0 and 1 }}"), "True x 0");
  EXPECT_EQ(R("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'b' > 'a' }} {{ 1 == 1.0 }} {{ [1] == [1] }}"),
            "True False True True True");
  EXPECT_EQ(R("{{ 'ell' in 'hello' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "True False True");
  EXPECT_EQ(R("{{ (messages | length - 1) - 1 }}", R"({"messages": [1, 2, 3]})"), "1");
  EXPECT_EQ(R("{{ -x | abs }}", R"({"x": 3})"), "3");
}

TEST(JinjaTest, IndexingAndSlicing) {
  const char* vars = R"({"xs": [1, 2, 3, 4], "s": "h\u00e9llo"})";
  EXPECT_EQ(R("{{ xs[-1] }} {{ xs[1:3] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[10] }}", vars),
            "4 [2, 3] [4, 3, 2, 1] [1, 3] ");
  EXPECT_EQ(R("{{ s[1] }} {{ s[:-1] }} {{ s[::-1] }} {{ s | length }}", vars),
            "\xC3\xA9 h\xC3\xA9ll oll\xC3\xA9h 5");
}

TEST(JinjaTest, Filters) {
  const char* vars =
      R"({"m": [{"role": "user", "c": "a"}, {"role": "bot", "c": "b"}, {"role": "user", "c": "c"}],
          "d": {"b": 2, "a": [1, "x"]}, "s": "  Hi There \n"})";
  EXPECT_EQ(
      R("[{{ s | trim }}] {{ s | trim | upper }} {{ s | trim | lower }} {{ 'ab' | capitalize }}",
        vars),
      "[Hi There] HI THERE hi there Ab");
  EXPECT_EQ(R("{{ m | length }} {{ m | map(attribute='c') | join(', ') }} {{ m | first }}", vars),
            "3 a, b, c {'role': 'user', 'c': 'a'}");
  EXPECT_EQ(R("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}", vars),
            "['a', 'c']");
  EXPECT_EQ(R("{{ m | rejectattr('role', 'equalto', 'user') | list | length }}", vars), "1");
  EXPECT_EQ(
      R("{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(',') }}"),
      "a,b");
  EXPECT_EQ(R("{{ x | default('dflt') }} {{ '' | default('e', true) }} {{ 0 | d(5) }}"),
            "dflt e 0");
  EXPECT_EQ(R("{{ d | items | list }}", vars), "[['b', 2], ['a', [1, 'x']]]");
  EXPECT_EQ(R("{{ 12 | string ~ 'x' }} {{ [3, 1, 2] | sort }} {{ [3, 1, 3] | unique | list }} "
              "{{ [1, 2] | last }} {{ 'abc' | reverse }}"),
            "12x [1, 2, 3] [3, 1] 2 cba");
  EXPECT_EQ(R("{{ 'a-b-c' | replace('-', '+') }} {{ '42' | int + 1 }} {{ 2.567 | round(2) }} "
              "{{ 'x' | int }}"),
            "a+b+c 43 2.57 0");
  EXPECT_EQ(R("{{ 'a\nb\n\nc' | indent(2) }}"), "a\n  b\n\n  c");
}

TEST(JinjaTest, ToJsonAsHuggingFaceWritesIt) {
  const char* vars =
      R"({"t": {"name": "f", "args": {"x": 1, "ok": true, "n": null, "s": "\u00e9\"\n"},
                         "list": [1.5, []]}})";
  EXPECT_EQ(
      R("{{ t | tojson }}", vars),
      R"({"name": "f", "args": {"x": 1, "ok": true, "n": null, "s": "é\"\n"}, "list": [1.5, []]})");
  EXPECT_EQ(R("{{ {'a': [1, {'b': 2}]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"), "{\"a\": 2, \"b\": 1}");
}

TEST(JinjaTest, Tests) {
  const char* vars = R"({"s": "x", "n": null, "d": {"a": 1}, "l": [1], "i": 3, "f": 1.5})";
  EXPECT_EQ(R("{{ s is defined }}{{ u is defined }}{{ u is undefined }}{{ n is none }}"
              "{{ n is not none }}",
              vars),
            "TrueFalseTrueTrueFalse");
  EXPECT_EQ(R("{{ s is string }}{{ d is mapping }}{{ l is sequence }}{{ s is iterable }}"
              "{{ d is iterable }}{{ i is number }}{{ i is integer }}{{ f is float }}",
              vars),
            "TrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ i is odd }}{{ i is even }}{{ 9 is divisibleby 3 }}{{ s is equalto 'x' }}"
              "{{ 1 is in [1, 2] }}{{ true is true }}{{ none is false }}",
              vars),
            "TrueFalseTrueTrueTrueTrueFalse");
}

TEST(JinjaTest, Methods) {
  const char* vars = R"({"s": "<a>x</a>\n", "d": {"k": 1}})";
  EXPECT_EQ(R("{{ s.startswith('<a>') }}{{ s.endswith(('z', '\n')) }}{{ s.strip() }}"
              "|{{ s.rstrip('\n').lstrip('<') }}",
              vars),
            "TrueTrue<a>x</a>|a>x</a>");
  EXPECT_EQ(R("{{ s.split('>') }} {{ 'a b  c'.split() }} {{ 'a,b,c'.split(',', 1) }} "
              "{{ 'a,b,c'.rsplit(',', 1) }}",
              vars),
            "['<a', 'x</a', '\\n'] ['a', 'b', 'c'] ['a', 'b,c'] ['a,b', 'c']");
  EXPECT_EQ(R("{{ s.split('</a>')[0].split('<a>')[-1] }}", vars), "x");
  EXPECT_EQ(R("{{ d.get('k') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }} {{ d.keys() | list }} "
              "{{ d.values() | list }}",
              vars),
            "1 dflt None ['k'] [1]");
  EXPECT_EQ(
      R("{{ 'AbC'.upper() }}{{ 'AbC'.lower() }}{{ 'ab cd'.title() }}{{ 'aXa'.replace('a', 'b') }}"
        "{{ 'hello'.find('l') }}{{ 'hello'.count('l') }}"),
      "ABCabcAb CdbXb22");
}

TEST(JinjaTest, GlobalsRaiseExceptionAndStrftimeNow) {
  EXPECT_EQ(R("{{ strftime_now('%d %b %Y') }}"), "26 Jul 2024");
  EXPECT_EQ(R("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
  EXPECT_EQ(R("{% if strftime_now is defined %}yes{% endif %}"), "yes");
  const Status s = E("a{{ raise_exception('Roles must alternate!') }}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Roles must alternate!"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("line 1 col 2"), std::string::npos) << s.ToString();
}

TEST(JinjaTest, UnsupportedConstructsAreUnimplementedWithTheirPosition) {
  auto expect = [](std::string_view source, std::string_view needle) {
    const Status s = E(source);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << source << " -> " << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  expect("x\n{% include 'other.j2' %}", "{% include %} at line 2 col 4");
  expect("{{ x | wordwrap }}", "filter 'wordwrap'");
  expect("{{ x is prime }}", "test 'prime'");
  expect("{{ lipsum() }}", "function 'lipsum'");
  expect("{{ 'a'.zfill(3) }}", "method 'zfill'");
  expect("{{ f(*args) }}", "*args");
  expect("{% for x in y recursive %}{% endfor %}", "recursive");
  expect("{{ '%d' % 3 }}", "'%'");
}

TEST(JinjaTest, SyntaxErrorsNameLineAndColumn) {
  auto expect = [](std::string_view source, std::string_view needle) {
    const Status s = E(source);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << source << " -> " << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  expect("ok\n  {{ x ", "line 2 col 3: unclosed {{");
  expect("{% if x %}never closed", "never closed");
  expect("{% endfor %}", "unexpected {% endfor %}");
  expect("{{ 'open }}", "unclosed string");
  expect("{{ x $ y }}", "unexpected character '$'");
  expect("{# no end", "unclosed comment");
  expect("{{ (1 + }}", "expected an expression");
  expect("{{ 1 + none }}", "unsupported operand types for +");
  expect("{{ 1 // 0 }}", "by zero");
  expect("{{ u + 'x' }}", "undefined value");
}

TEST(JinjaTest, RunawayTemplatesStopWithResourceExhausted) {
  RenderOptions small;
  small.max_steps = 100000;
  EXPECT_EQ(E("{% for a in range(1000) %}{% for b in range(1000) %}x{% endfor %}{% endfor %}", "{}",
              small)
                .code(),
            StatusCode::kResourceExhausted);
  RenderOptions tiny_output;
  tiny_output.max_output_bytes = 1000;
  EXPECT_EQ(E("{% for a in range(2000) %}xy{% endfor %}", "{}", tiny_output).code(),
            StatusCode::kResourceExhausted);
  EXPECT_FALSE(
      E("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}")
          .ok());
  EXPECT_FALSE(E("{{ range(100000000) }}").ok());
  // Deep nesting is refused, not a stack overflow.
  EXPECT_FALSE(E("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").ok());
  EXPECT_FALSE(E("{{ " + std::string(3000, '[') + std::string(3000, ']') + " }}").ok());
  EXPECT_FALSE(E("{{ " + std::string(3000, '-') + "1 }}").ok());
  std::string chain = "{{ x";
  for (int i = 0; i < 3000; ++i) chain += "|trim";
  EXPECT_FALSE(E(chain + " }}").ok());
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  EXPECT_FALSE(E(sum + " }}").ok());
  std::string deep_ifs;
  for (int i = 0; i < 1000; ++i) deep_ifs += "{% if true %}";
  EXPECT_FALSE(E(deep_ifs).ok());
  EXPECT_FALSE(E("{% set ns = namespace(x=[]) %}{% for i in range(500) %}{% set ns.x = [ns.x] %}"
                 "{% endfor %}")
                   .ok());
  EXPECT_FALSE(E("{% set ns = namespace() %}{% set ns.me = ns %}").ok());
  EXPECT_FALSE(E("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").ok());
}

}  // namespace
}  // namespace loom::text::jinja
