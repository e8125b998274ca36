// Fuzzes the Jinja lexer, parser and interpreter: the input is a template, rendered with a fixed
// chat (messages with a system prompt, tool calls, a namespace-friendly mix of types).  Nothing may
// crash, hang or grow without bound: the step, output and nesting limits must hold for any input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "loom/text/jinja.h"

namespace {

const loom::text::jinja::Value& Variables() {
  static const loom::text::jinja::Value* vars = [] {
    const auto json = nlohmann::ordered_json::parse(R"({
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2? <tool_response>x</tool_response>"},
        {"role": "assistant", "content": "<think>add</think>4", "tool_calls": [
          {"type": "function", "id": "abcdefghi",
           "function": {"name": "calc", "arguments": {"a": 2, "b": [1.5, null, true]}}}]},
        {"role": "tool", "content": "4", "tool_call_id": "abcdefghi"},
        {"role": "user", "content": "Thanks \u00e9\ud83d\ude00"}],
      "tools": [{"type": "function", "function": {"name": "calc", "description": "adds",
                 "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
      "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true})");
    auto v = loom::text::jinja::Value::FromJson(json);
    if (!v.ok()) std::abort();
    return new loom::text::jinja::Value(std::move(v).value());
  }();
  return *vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto t = loom::text::jinja::Template::Parse(source);
  if (!t.ok()) return 0;
  loom::text::jinja::RenderOptions options;
  options.now_unix_seconds = 1721995200;
  options.max_steps = 200000;
  options.max_output_bytes = 1 << 20;
  auto out = t->Render(Variables(), options);
  if (out.ok() && static_cast<int64_t>(out->size()) > options.max_output_bytes) {
    std::fprintf(stderr, "output larger than the limit\n");
    std::abort();
  }
  return 0;
}
