#include "loom/text/chat_template.h"

#include "loom/text/jinja.h"

namespace loom::text {
namespace {

std::string PlainFallback(std::span<const ChatMessage> messages) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out += "\n";
    out += messages[i].content;
  }
  return out;
}

}  // namespace

StatusOr<std::string> RenderChat(const ChatTemplateInfo& info,
                                 std::span<const ChatMessage> messages,
                                 const ChatOptions& options) {
  if (info.source.empty()) return PlainFallback(messages);
  LOOM_ASSIGN_OR_RETURN(const jinja::Template tmpl, jinja::Template::Parse(info.source));
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    list.push_back(jinja::Value::Dict(
        {{"role", jinja::Value::String(m.role)}, {"content", jinja::Value::String(m.content)}}));
  }
  const jinja::Value variables = jinja::Value::Dict({
      {"messages", jinja::Value::List(std::move(list))},
      {"bos_token", jinja::Value::String(std::string(info.bos_token))},
      {"eos_token", jinja::Value::String(std::string(info.eos_token))},
      {"add_generation_prompt", jinja::Value::Bool(options.add_generation_prompt)},
      {"tools", jinja::Value::None()},
      {"documents", jinja::Value::None()},
  });
  jinja::RenderOptions render;
  render.now_unix_seconds = options.now_unix_seconds;
  return tmpl.Render(variables, render);
}

StatusOr<std::string> RenderChat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) {
  return RenderChat(tokenizer.chat_template(), messages,
                    ChatOptions{.add_generation_prompt = add_generation_prompt});
}

StatusOr<std::string> RenderChat(const model::TokenizerSpec& spec,
                                 std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) {
  auto text_of = [&](int32_t id) -> std::string_view {
    if (id < 0 || static_cast<size_t>(id) >= spec.tokens.size()) return {};
    return spec.tokens[static_cast<size_t>(id)];
  };
  const ChatTemplateInfo info{.source = spec.chat_template,
                              .bos_token = text_of(spec.bos_id),
                              .eos_token = text_of(spec.eos_id)};
  return RenderChat(info, messages, ChatOptions{.add_generation_prompt = add_generation_prompt});
}

StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, std::string_view rendered) {
  if (tokenizer.chat_template().source.empty()) {
    return tokenizer.Encode(rendered, EncodeOptions{.add_bos = tokenizer.add_bos_default()});
  }
  return tokenizer.Encode(rendered, EncodeOptions{.add_bos = false, .parse_special = true});
}

}  // namespace loom::text
