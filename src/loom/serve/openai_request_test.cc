#include "loom/serve/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace loom::serve {
namespace {

using json = nlohmann::json;

std::optional<ApiError> Chat(const std::string& body, ChatParams* p) {
  json j;
  if (auto e = ParseJsonObject(body, &j)) return e;
  return ParseChatRequest(j, p);
}

std::optional<ApiError> Completion(const std::string& body, CompletionParams* p) {
  json j;
  if (auto e = ParseJsonObject(body, &j)) return e;
  return ParseCompletionRequest(j, p);
}

// The param an error names ("" when the request is accepted).
std::string ChatError(const std::string& body) {
  ChatParams p;
  auto e = Chat(body, &p);
  if (!e) return "";
  EXPECT_EQ(e->status, 400) << body;
  EXPECT_FALSE(e->message.empty());
  return e->param.empty() ? "<none>" : e->param;
}

std::string CompletionError(const std::string& body) {
  CompletionParams p;
  auto e = Completion(body, &p);
  if (!e) return "";
  EXPECT_EQ(e->status, 400) << body;
  return e->param.empty() ? "<none>" : e->param;
}

TEST(OpenAiRequestTest, ParsesAChatRequestWithOpenAiDefaults) {
  ChatParams p;
  auto e = Chat(R"({"model": "m", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "again", "name": "bob"}],
      "unknown_vendor_field": {"x": 1}})",
                &p);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(p.gen.model, "m");
  EXPECT_FALSE(p.gen.stream);
  EXPECT_FALSE(p.gen.max_tokens.has_value());
  EXPECT_FLOAT_EQ(p.gen.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.gen.sampling.top_p, 1.0f);
  EXPECT_EQ(p.gen.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(p.gen.sampling.min_p, 0.0f);
  EXPECT_FALSE(p.gen.seed_given);
  ASSERT_EQ(p.messages.size(), 4u);
  EXPECT_EQ(p.messages[0].role, "system");
  EXPECT_EQ(p.messages[1].content, "hi there");
  EXPECT_EQ(p.messages[2].content, "");
  EXPECT_EQ(p.messages[3].content, "again");
}

TEST(OpenAiRequestTest, ReadsGenerationSettings) {
  ChatParams p;
  auto e = Chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 7,
      "temperature": 0, "top_p": 0.5, "seed": -3, "stop": ["a", "", "bc"], "logprobs": true,
      "top_logprobs": 4, "n": 1, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2,
      "frequency_penalty": 0, "logit_bias": {}, "response_format": {"type": "text"},
      "tools": [], "user": "u"})",
                &p);
  ASSERT_FALSE(e) << e->message;
  EXPECT_TRUE(p.gen.stream);
  EXPECT_TRUE(p.gen.include_usage);
  EXPECT_EQ(p.gen.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.gen.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(p.gen.sampling.top_p, 0.5f);
  EXPECT_TRUE(p.gen.seed_given);
  EXPECT_EQ(p.gen.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(p.gen.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(p.gen.logprobs);
  EXPECT_EQ(p.gen.top_logprobs, 4);
  EXPECT_EQ(p.gen.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(p.gen.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.gen.sampling.repeat_penalty, 1.2f);

  // top_p 0 is the greedy limit; null is "not given".
  ChatParams q;
  ASSERT_FALSE(Chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "top_p": 0, "max_tokens": null, "stop": null, "seed": 5.0})",
                    &q));
  EXPECT_FLOAT_EQ(q.gen.sampling.temperature, 0.0f);
  EXPECT_FALSE(q.gen.max_tokens.has_value());
  EXPECT_EQ(q.gen.sampling.seed, 5u);
}

TEST(OpenAiRequestTest, NamesTheOffendingFieldOfBadChatRequests) {
  const std::string ok_messages = R"("messages": [{"role": "user", "content": "x"}])";
  auto with = [&](const std::string& fields) {
    return R"({"model": "m", )" + ok_messages + (fields.empty() ? "" : ", " + fields) + "}";
  };
  EXPECT_EQ(ChatError(with("")), "");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}]})"), "model");
  EXPECT_EQ(ChatError(R"({"model": 3, )" + ok_messages + "}"), "model");
  EXPECT_EQ(ChatError(R"({"model": "m"})"), "messages");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": []})"), "messages");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": "hi"})"), "messages");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": [3]})"), "messages[0]");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": [{"content": "x"}]})"), "messages[0].role");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": [{"role": "wizard", "content": "x"}]})"),
            "messages[0].role");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": [{"role": "user"}]})"), "messages[0].content");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": [{"role": "user", "content": 5}]})"),
            "messages[0].content");
  EXPECT_EQ(ChatError(R"({"model": "m", "messages": [{"role": "user", "content":
      [{"type": "image_url", "image_url": {"url": "x"}}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(ChatError(with(R"("stream": "yes")")), "stream");
  EXPECT_EQ(ChatError(with(R"("stream_options": {"include_usage": true})")), "stream_options");
  EXPECT_EQ(ChatError(with(R"("stream": true, "stream_options": {"include_usage": 1})")),
            "stream_options.include_usage");
  EXPECT_EQ(ChatError(with(R"("max_tokens": 0)")), "max_tokens");
  EXPECT_EQ(ChatError(with(R"("max_tokens": -5)")), "max_tokens");
  EXPECT_EQ(ChatError(with(R"("max_tokens": 2.5)")), "max_tokens");
  EXPECT_EQ(ChatError(with(R"("max_tokens": "10")")), "max_tokens");
  EXPECT_EQ(ChatError(with(R"("max_tokens": 1e300)")), "max_tokens");
  EXPECT_EQ(ChatError(with(R"("max_completion_tokens": 99999999999999999999)")),
            "max_completion_tokens");
  EXPECT_EQ(ChatError(with(R"("temperature": 2.5)")), "temperature");
  EXPECT_EQ(ChatError(with(R"("temperature": "hot")")), "temperature");
  EXPECT_EQ(ChatError(with(R"("top_p": 1.5)")), "top_p");
  EXPECT_EQ(ChatError(with(R"("seed": "1")")), "seed");
  EXPECT_EQ(ChatError(with(R"("stop": 5)")), "stop");
  EXPECT_EQ(ChatError(with(R"("stop": ["a", 1])")), "stop");
  EXPECT_EQ(ChatError(with(R"("n": 2)")), "n");
  EXPECT_EQ(ChatError(with(R"("frequency_penalty": 0.5)")), "frequency_penalty");
  EXPECT_EQ(ChatError(with(R"("presence_penalty": 9)")), "presence_penalty");
  EXPECT_EQ(ChatError(with(R"("logit_bias": {"5": 1})")), "logit_bias");
  EXPECT_EQ(ChatError(with(R"("logprobs": 1)")), "logprobs");
  EXPECT_EQ(ChatError(with(R"("top_logprobs": 3)")), "top_logprobs");
  EXPECT_EQ(ChatError(with(R"("logprobs": true, "top_logprobs": 21)")), "top_logprobs");
  EXPECT_EQ(ChatError(with(R"("response_format": {"type": "json_object"})")), "response_format");
  EXPECT_EQ(ChatError(with(R"("tools": [{"type": "function"}])")), "tools");
  EXPECT_EQ(ChatError(with(R"("tool_choice": "auto")")), "tool_choice");
  EXPECT_EQ(ChatError(with(R"("user": 5)")), "user");
}

TEST(OpenAiRequestTest, ParsesEveryFormOfCompletionPrompt) {
  CompletionParams p;
  ASSERT_FALSE(Completion(R"({"model": "m", "prompt": "Once"})", &p));
  EXPECT_FALSE(p.prompt_is_ids);
  EXPECT_EQ(p.prompt_text, "Once");
  CompletionParams q;
  ASSERT_FALSE(Completion(R"({"model": "m", "prompt": [1, 2, 3], "logprobs": 2})", &q));
  EXPECT_TRUE(q.prompt_is_ids);
  EXPECT_EQ(q.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(q.gen.logprobs);
  EXPECT_EQ(q.gen.top_logprobs, 2);
  CompletionParams r;
  ASSERT_FALSE(Completion(R"({"model": "m", "prompt": ["Once"], "echo": false, "best_of": 1,
      "suffix": null})",
                          &r));
  EXPECT_EQ(r.prompt_text, "Once");
  CompletionParams s;
  ASSERT_FALSE(Completion(R"({"model": "m", "prompt": [[7, 8]]})", &s));
  EXPECT_EQ(s.prompt_ids, (std::vector<int32_t>{7, 8}));

  EXPECT_EQ(CompletionError(R"({"model": "m"})"), "prompt");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": 5})"), "prompt");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": []})"), "prompt");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": ["a", "b"]})"), "prompt");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": [1, -2]})"), "prompt");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": [1, 1.5]})"), "prompt");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": [1, 99999999999]})"), "prompt");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": "x", "logprobs": 6})"), "logprobs");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": "x", "logprobs": true})"), "logprobs");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": "x", "echo": true})"), "echo");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": "x", "best_of": 3})"), "best_of");
  EXPECT_EQ(CompletionError(R"({"model": "m", "prompt": "x", "suffix": "y"})"), "suffix");
}

TEST(OpenAiRequestTest, RefusesBodiesThatAreNotJsonObjects) {
  json j;
  const std::vector<std::string> bodies = {"",
                                           "{",
                                           "[1, 2]",
                                           "\"text\"",
                                           "null",
                                           "{\"a\": }",
                                           "{\"a\": 1} trailing",
                                           "{\"a\": \"\xff\"}"};
  for (const std::string& body : bodies) {
    auto e = ParseJsonObject(body, &j);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400);
  }
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  auto e = ParseJsonObject("{\"a\": " + deep + "}", &j);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("deeper"), std::string::npos);
  // Brackets inside strings do not count as nesting.
  EXPECT_FALSE(ParseJsonObject("{\"a\": \"" + deep + "\"}", &j).has_value());
}

TEST(OpenAiRequestTest, ScoreTokenIdsNeedLogprobsAndValidIds) {
  CompletionParams ok;
  ASSERT_FALSE(ParseCompletionRequest(json::parse(R"({"model": "m", "prompt": [1, 2],
      "score_token_ids": [5, 6, 7], "logprobs": 1})"),
                                      &ok));
  EXPECT_EQ(ok.gen.score_token_ids, (std::vector<int32_t>{5, 6, 7}));
  for (const char* bad :
       {R"({"model": "m", "prompt": [1], "score_token_ids": [5]})",
        R"({"model": "m", "prompt": [1], "score_token_ids": [], "logprobs": 1})",
        R"({"model": "m", "prompt": [1], "score_token_ids": [-1], "logprobs": 1})",
        R"({"model": "m", "prompt": [1], "score_token_ids": "5", "logprobs": 1})"}) {
    CompletionParams p;
    auto e = ParseCompletionRequest(json::parse(bad), &p);
    ASSERT_TRUE(e.has_value()) << bad;
    EXPECT_EQ(e->param, "score_token_ids") << bad;
    EXPECT_EQ(e->status, 400);
  }
}

}  // namespace
}  // namespace loom::serve
