#include "loom/serve/completion_run.h"

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/base/clock.h"
#include "loom/serve/api_error.h"

namespace loom::serve {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseData(const json& j) { return "data: " + Dump(j) + "\n\n"; }

json BytesOf(std::string_view s) {
  json a = json::array();
  for (char c : s) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}

// One request's state, on the io thread: set up by the handler, then advanced by the pump.  The
// exchange's on-close callback holds it until the response is written or the client leaves; the
// engine's notification holds it weakly.
struct Run : public Wakeable {
  void OnWake() override;

  ServeContext* ctx = nullptr;
  ApiKind kind = ApiKind::kChat;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  bool token_ids = false;          // return_token_ids
  std::vector<int32_t> prompt;     // (prompt tokens) when token_ids
  std::string id;
  int64_t created = 0;
  double received_at = 0;   // the request's head arrived (seconds, base::NowSeconds)
  double submitted_at = 0;  // handed to the engine, whose timings count from here
  std::shared_ptr<Exchange> exchange;
  std::shared_ptr<engine::Completion> completion;

  engine::CompletionOutput out;          // scratch for Take()
  std::string text;                      // non-streaming: the whole text
  json logprob_content = json::array();  // non-streaming chat: every token's entry
  json lp_tokens = json::array();        // non-streaming completions: the parallel arrays
  json lp_token_logprobs = json::array();
  json lp_top = json::array();
  json lp_offsets = json::array();
  json generated_ids = json::array();    // non-streaming with token_ids: every generated id
  int32_t prev_id = -1;     // the token before the next one (for piece texts)
  int64_t text_offset = 0;  // completions: offset of the next token's text
  bool first_token_seen = false;
  bool finished = false;
};

json ChatLogprobEntry(const text::Tokenizer& tok, int32_t prev, int32_t id, float logprob) {
  const std::string_view piece = tok.DecodePiece(prev, id);
  json e;
  e["token"] = std::string(piece);
  e["logprob"] = logprob;
  e["bytes"] = BytesOf(piece);
  return e;
}

// Log-probabilities of `tokens` in the endpoint's shape.  For streams, one chunk's worth; for
// whole responses the entries are appended to the run's accumulators.
json LogprobsOf(Run& r, const std::vector<engine::GeneratedToken>& tokens) {
  const text::Tokenizer& tok = *r.ctx->tokenizer;
  if (r.kind == ApiKind::kChat) {
    json content = json::array();
    for (const engine::GeneratedToken& t : tokens) {
      json e = ChatLogprobEntry(tok, r.prev_id, t.id, t.logprob);
      json top = json::array();
      for (int32_t i = 0; i < t.n_top; ++i) {
        top.push_back(ChatLogprobEntry(tok, r.prev_id, t.top[static_cast<size_t>(i)].id,
                                       t.top[static_cast<size_t>(i)].logprob));
      }
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
      r.prev_id = t.id;
    }
    if (!r.stream) {
      for (auto& e : content) r.logprob_content.push_back(e);
    }
    return json{{"content", std::move(content)}};
  }
  json tokens_j = json::array(), logprobs_j = json::array(), top_j = json::array(),
       offsets_j = json::array();
  for (const engine::GeneratedToken& t : tokens) {
    const std::string piece(tok.DecodePiece(r.prev_id, t.id));
    tokens_j.push_back(piece);
    logprobs_j.push_back(t.logprob);
    json top = json::object();
    for (int32_t i = 0; i < t.n_top; ++i) {
      const auto& alt = t.top[static_cast<size_t>(i)];
      top[std::string(tok.DecodePiece(r.prev_id, alt.id))] = alt.logprob;
    }
    top_j.push_back(std::move(top));
    offsets_j.push_back(r.text_offset);
    r.text_offset += static_cast<int64_t>(piece.size());
    r.prev_id = t.id;
  }
  if (!r.stream) {
    for (auto& e : tokens_j) r.lp_tokens.push_back(e);
    for (auto& e : logprobs_j) r.lp_token_logprobs.push_back(e);
    for (auto& e : top_j) r.lp_top.push_back(e);
    for (auto& e : offsets_j) r.lp_offsets.push_back(e);
  }
  return json{{"tokens", std::move(tokens_j)},
              {"token_logprobs", std::move(logprobs_j)},
              {"top_logprobs", std::move(top_j)},
              {"text_offset", std::move(offsets_j)}};
}

json Usage(const engine::CompletionOutput& o) {
  return json{{"prompt_tokens", o.prompt_tokens},
              {"completion_tokens", o.completion_tokens},
              {"total_tokens", o.prompt_tokens + o.completion_tokens}};
}

// The server's own figures for one finished completion, sent with the final chunk (and in whole
// responses) as llama-server does, so a client's speed read-out does not depend on how the stream
// was cut into network reads.  ttft_ms counts from the request's arrival; predicted_ms spans the
// first to the last generated token, so the rate is over predicted_n - 1 intervals.
json Timings(const Run& r, const engine::CompletionOutput& o) {
  const double setup_s = r.submitted_at - r.received_at;
  json t;
  t["prompt_n"] = o.prompt_tokens;
  t["queue_ms"] = (setup_s + o.queue_seconds) * 1e3;
  t["ttft_ms"] = o.first_token_seconds > 0 ? json((setup_s + o.first_token_seconds) * 1e3)
                                           : json(nullptr);
  t["predicted_n"] = o.completion_tokens;
  t["predicted_ms"] = o.decode_seconds * 1e3;
  t["predicted_per_second"] =
      o.completion_tokens > 1 && o.decode_seconds > 0
          ? json(static_cast<double>(o.completion_tokens - 1) / o.decode_seconds)
          : json(nullptr);
  return t;
}

json ChunkBase(const Run& r) {
  json c;
  c["id"] = r.id;
  c["object"] = r.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion";
  c["created"] = r.created;
  c["model"] = r.ctx->model_id;
  return c;
}

json IdsOf(const std::vector<engine::GeneratedToken>& tokens) {
  json a = json::array();
  for (const engine::GeneratedToken& t : tokens) a.push_back(t.id);
  return a;
}

// A streamed chunk with new text (and/or its log-probabilities, token ids) or the finish reason.
json Chunk(const Run& r, std::string_view text, const json& logprobs, const json& finish,
           bool first_chat_chunk = false, const json* token_ids = nullptr) {
  json c = ChunkBase(r);
  json choice;
  choice["index"] = 0;
  if (r.kind == ApiKind::kChat) {
    json delta = json::object();
    if (first_chat_chunk) delta["role"] = "assistant";
    if (!text.empty() || first_chat_chunk) delta["content"] = std::string(text);
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = std::string(text);
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish;
  if (r.token_ids) choice["token_ids"] = token_ids ? *token_ids : json::array();
  c["choices"] = json::array({std::move(choice)});
  if (r.include_usage) c["usage"] = nullptr;
  return c;
}

json WholeResponse(const Run& r) {
  json c;
  c["id"] = r.id;
  c["object"] = r.kind == ApiKind::kChat ? "chat.completion" : "text_completion";
  c["created"] = r.created;
  c["model"] = r.ctx->model_id;
  json choice;
  choice["index"] = 0;
  if (r.kind == ApiKind::kChat) {
    choice["message"] = json{{"role", "assistant"}, {"content", r.text}};
    choice["logprobs"] = r.logprobs ? json{{"content", r.logprob_content}} : json(nullptr);
  } else {
    choice["text"] = r.text;
    choice["logprobs"] = r.logprobs ? json{{"tokens", r.lp_tokens},
                                           {"token_logprobs", r.lp_token_logprobs},
                                           {"top_logprobs", r.lp_top},
                                           {"text_offset", r.lp_offsets}}
                                    : json(nullptr);
  }
  choice["finish_reason"] = std::string(engine::FinishReasonForApi(r.out.finish));
  if (r.token_ids) {
    choice["token_ids"] = r.generated_ids;
    c["prompt_token_ids"] = r.prompt;
  }
  c["choices"] = json::array({std::move(choice)});
  c["usage"] = Usage(r.out);
  c["timings"] = Timings(r, r.out);
  return c;
}

// Moves what the engine produced into the response.
void Pump(Run& r, Exchange& ex) {
  if (r.finished) return;
  r.out.text.clear();
  r.out.tokens.clear();
  const bool done = r.completion->Take(&r.out);
  if (!r.first_token_seen && !r.out.tokens.empty()) {
    r.first_token_seen = true;
    r.ctx->metrics->ObserveFirstToken(base::NowSeconds() - r.received_at);
  }
  const json logprobs =
      r.logprobs && !r.out.tokens.empty() ? LogprobsOf(r, r.out.tokens) : json(nullptr);
  if (r.stream) {
    const bool new_ids = r.token_ids && !r.out.tokens.empty();
    if (!r.out.text.empty() || !logprobs.is_null() || new_ids) {
      const json ids = new_ids ? IdsOf(r.out.tokens) : json::array();
      ex.Send(SseData(Chunk(r, r.out.text, logprobs, nullptr, false, &ids)));
    }
  } else {
    r.text += r.out.text;
    if (r.token_ids) {
      for (const engine::GeneratedToken& t : r.out.tokens) r.generated_ids.push_back(t.id);
    }
  }
  if (!done) return;
  r.finished = true;
  const engine::CompletionOutput& o = r.out;
  r.ctx->metrics->ObserveCompletion(o.prompt_tokens, o.completion_tokens, o.decode_seconds);
  if (o.finish == engine::CompletionFinish::kError) {
    const ApiError e = FromStatus(o.error);
    if (r.stream) {
      ex.Send("data: " + ErrorBody(e) + "\n\n");
      ex.End();
    } else {
      RespondError(ex, e);
    }
    return;
  }
  if (r.stream) {
    const std::string finish(engine::FinishReasonForApi(o.finish));
    json last = Chunk(r, "", nullptr, finish);
    last["timings"] = Timings(r, o);
    ex.Send(SseData(last));
    if (r.include_usage) {
      json u = ChunkBase(r);
      u["choices"] = json::array();
      u["usage"] = Usage(o);
      ex.Send(SseData(u));
    }
    ex.Send("data: [DONE]\n\n");
    ex.End();
  } else {
    ex.Respond(200, "application/json", Dump(WholeResponse(r)));
  }
}

void Run::OnWake() {
  if (!exchange->closed()) Pump(*this, *exchange);
}

}  // namespace

std::string ServeContext::NewId(std::string_view prefix) {
  char buf[40];
  const uint64_t n = next_id.fetch_add(1);
  std::snprintf(buf, sizeof(buf), "%016llx%08llx",
                static_cast<unsigned long long>(static_cast<uint64_t>(created) * 2654435761ull),
                static_cast<unsigned long long>(n));
  return std::string(prefix) + buf;
}

std::optional<ApiError> CheckModel(const ServeContext& ctx, const std::string& model) {
  if (model == ctx.model_id) return {};
  ApiError e;
  e.status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message =
      "The model '" + model + "' does not exist (this server serves '" + ctx.model_id + "')";
  return e;
}

void RunCompletion(ServeContext& ctx, const std::shared_ptr<Exchange>& exchange, ApiKind kind,
                   const GenerationParams& gen, std::vector<int32_t> prompt,
                   std::string_view prompt_param) {
  const int64_t context = ctx.engine->context();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) {
    RespondError(*exchange, BadParam(std::string(prompt_param), "the prompt is empty"));
    return;
  }
  if (n_prompt >= context) {
    RespondError(*exchange,
                 BadParam(std::string(prompt_param),
                          "This model's maximum context length is " + std::to_string(context) +
                              " tokens, but the prompt has " + std::to_string(n_prompt) +
                              " tokens (it must leave room for at least one new token)",
                          "context_length_exceeded"));
    return;
  }
  const auto n_score = static_cast<int64_t>(gen.score_token_ids.size());
  if (n_score > 0 && n_prompt + n_score > context) {
    RespondError(*exchange,
                 BadParam("score_token_ids",
                          "the prompt (" + std::to_string(n_prompt) + " tokens) and the " +
                              std::to_string(n_score) + " tokens to score exceed the context (" +
                              std::to_string(context) + " tokens)",
                          "context_length_exceeded"));
    return;
  }
  for (int32_t id : gen.score_token_ids) {
    if (id >= ctx.engine->vocab()) {  // (the engine would refuse it too, naming the prompt)
      RespondError(*exchange,
                   BadParam("score_token_ids",
                            "token id " + std::to_string(id) + " is outside the vocabulary (" +
                                std::to_string(ctx.engine->vocab()) + " tokens)",
                            "token_out_of_vocabulary"));
      return;
    }
  }
  if (n_score == 0 && gen.max_tokens && *gen.max_tokens > context) {
    RespondError(*exchange, BadParam("max_tokens",
                                     "max_tokens is " + std::to_string(*gen.max_tokens) +
                                         " but this model's context holds only " +
                                         std::to_string(context) + " tokens",
                                     "invalid_value"));
    return;
  }

  auto run = std::make_shared<Run>();
  run->ctx = &ctx;
  run->exchange = exchange;
  run->kind = kind;
  run->stream = gen.stream;
  run->include_usage = gen.include_usage;
  run->logprobs = gen.logprobs;
  run->token_ids = gen.return_token_ids;
  if (run->token_ids) run->prompt = prompt;
  run->id = ctx.NewId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
  run->created = static_cast<int64_t>(std::time(nullptr));
  run->received_at = exchange->received_at();
  run->prev_id = prompt.back();

  engine::CompletionRequest request;
  request.prompt = std::move(prompt);
  // Without a limit, generation may fill the context (it ends there with "length").
  request.max_tokens = gen.max_tokens ? *gen.max_tokens : context - n_prompt;
  request.sampling = gen.sampling;
  request.stop = gen.stop;
  request.top_logprobs = gen.logprobs ? gen.top_logprobs : -1;
  request.stop_at_eog = !gen.ignore_eos;
  if (n_score > 0) {  // scoring: exactly these tokens, whatever they are
    request.forced = gen.score_token_ids;
    request.max_tokens = n_score;
    request.stop.clear();
    request.stop_at_eog = false;
  }

  // The engine's thread only queues a wake-up (no allocation there); the pump runs here, on the
  // io thread, after this function returned: the response head is out by then.
  const std::weak_ptr<Wakeable> weak = run;
  run->submitted_at = base::NowSeconds();
  auto submitted = ctx.engine->Submit(std::move(request),
                                      [wakes = ctx.wakes, weak] { wakes->Wake(weak); });
  if (!submitted.ok()) {
    const bool about_prompt = submitted.status().code() == StatusCode::kOutOfRange;
    RespondError(*exchange, FromStatus(submitted.status(),
                                       about_prompt ? std::string(prompt_param) : std::string()));
    return;
  }
  run->completion = std::move(*submitted);
  exchange->SetOnClose([run] { run->completion->Cancel(); });
  if (gen.stream) {
    exchange->BeginStream(200, "text/event-stream",
                          {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    // The first chunk of a chat stream names the role; with return_token_ids every stream opens
    // with a chunk that carries the prompt's token ids.
    if (kind == ApiKind::kChat || run->token_ids) {
      json first = Chunk(*run, "", nullptr, nullptr, /*first_chat_chunk=*/kind == ApiKind::kChat);
      if (run->token_ids) first["prompt_token_ids"] = run->prompt;
      exchange->Send(SseData(first));
    }
  }
}

}  // namespace loom::serve
