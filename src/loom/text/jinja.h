// A small Jinja interpreter for chat templates: parse once (Template::Parse), render many times
// with a dict of variables (messages, bos_token, add_generation_prompt, ...).  It implements the
// subset that real Llama 3/3.1/3.2, Qwen2.5/3 and Mistral templates use (see jinja_parser.h for
// the syntax, jinja_builtins.h for filters, tests, methods and globals), renders with Hugging
// Face's settings (trim_blocks, lstrip_blocks, undefined prints as ""), and fails cleanly:
// Unimplemented for constructs outside the subset (naming them and their line and column),
// InvalidArgument for syntax errors, type errors and raise_exception(), ResourceExhausted when a
// template loops too long or renders too much.  Rendering never crashes or hangs on any input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/text/jinja_ast.h"
#include "loom/text/jinja_value.h"

namespace loom::text::jinja {

struct RenderOptions {
  int64_t now_unix_seconds = -1;        // the clock of strftime_now(); -1 = the current time
  int64_t max_output_bytes = 16 << 20;  // also the longest string a template may build
  int64_t max_steps = 2'000'000;        // statements and expressions evaluated
};

class Template {
 public:
  static StatusOr<Template> Parse(std::string_view source);

  // Renders with `variables` (a dict; the globals range, namespace, raise_exception and
  // strftime_now are added unless `variables` defines those names).
  StatusOr<std::string> Render(const Value& variables, const RenderOptions& options = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  Body body_;
};

}  // namespace loom::text::jinja
