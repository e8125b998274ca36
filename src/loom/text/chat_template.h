// Chat templates: turning a list of chat messages into the prompt text a model was trained on.
// Models ship their template as Jinja source (tokenizer_config.json `chat_template`, GGUF
// `tokenizer.chat_template`); RenderChat interprets it with the Jinja subset of jinja.h, passing
// the variables Hugging Face's apply_chat_template passes: messages (role, content), bos_token,
// eos_token, add_generation_prompt, tools = none, documents = none, plus strftime_now() and
// raise_exception().
//
// Typical use (loom run --chat, the chat completions route):
//   auto text = RenderChat(tokenizer, messages, /*add_generation_prompt=*/true);
//   auto ids = EncodeChat(tokenizer, *text);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/text/tokenizer.h"

namespace loom::text {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  int64_t now_unix_seconds = -1;  // strftime_now()'s clock (tests pin it); -1 = now
};

// Renders `messages` with `info`'s template.  With add_generation_prompt the text ends where the
// assistant's reply begins.  Without a template: the plain fallback, the message contents joined
// by "\n" (so one user message is the same prompt as a plain completion of its text).  Templates
// using Jinja beyond the supported subset fail with Unimplemented naming the construct and its
// line; raise_exception() in a template (e.g. "roles must alternate") fails with InvalidArgument.
StatusOr<std::string> RenderChat(const ChatTemplateInfo& info,
                                 std::span<const ChatMessage> messages, const ChatOptions& options);

// The same with the template a tokenizer carries.
StatusOr<std::string> RenderChat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt);

// The same with the template of `spec` (its chat_template, bos/eos token texts).
StatusOr<std::string> RenderChat(const model::TokenizerSpec& spec,
                                 std::span<const ChatMessage> messages, bool add_generation_prompt);

// The prompt ids of text RenderChat made: with a template, the text is encoded as Hugging Face
// does (control tokens the template wrote, <|im_start|> or <|begin_of_text|>, become their ids;
// no BOS is added beyond what the template wrote); with the plain fallback, as a plain prompt
// (BOS as the tokenizer says, no special-token parsing).
StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, std::string_view rendered);

}  // namespace loom::text
