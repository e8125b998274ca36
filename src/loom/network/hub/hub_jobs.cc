// Consumer requests through the hub: validation (the same shapes and errors as `loom serve`),
// placement, attempts on nodes, the stream back to the consumer with the tokens the hub counted,
// and failover: before the first token a retry elsewhere, mid-stream a continuation elsewhere from
// the prompt plus the tokens already sent.
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "loom/base/clock.h"
#include "loom/cluster/launch_plan.h"
#include "loom/network/hub/hub_impl.h"
#include "loom/network/protocol/identity.h"
#include "loom/serve/api_error.h"
#include "loom/serve/openai_request.h"

namespace loom::network::hub {
namespace {

constexpr size_t kMaxDecisions = 256;
// Sampling fields a continuation carries over from the original request.
constexpr const char* kCarriedFields[] = {"temperature", "top_p", "top_k", "min_p", "seed",
                                          "stop", "ignore_eos", "repetition_penalty"};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json ChunkBase(const Job& job) {
  return json{{"id", job.id},
              {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", job.created_unix},
              {"model", job.model}};
}

// One streamed chunk in the endpoint's shape.
std::string StreamChunk(const Job& job, std::string_view text, const json& finish,
                        bool first_chat_chunk = false) {
  json c = ChunkBase(job);
  json choice{{"index", 0}};
  if (job.chat) {
    json delta = json::object();
    if (first_chat_chunk) delta["role"] = "assistant";
    if (!text.empty() || first_chat_chunk) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish;
  c["choices"] = json::array({choice});
  if (job.include_usage) c["usage"] = nullptr;
  return "data: " + Dump(c) + "\n\n";
}

json Usage(const Job& job, int64_t prompt_tokens) {
  const auto completion = static_cast<int64_t>(job.generated.size());
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion},
              {"total_tokens", prompt_tokens + completion}};
}

// The bytes of the prompt's text, with 16 for each chat message's template.
int64_t PromptBytes(bool chat, const serve::ChatParams& chat_params,
                    const serve::CompletionParams& completion) {
  if (!chat) return static_cast<int64_t>(completion.prompt_text.size());
  int64_t bytes = 0;
  for (const auto& m : chat_params.messages) bytes += static_cast<int64_t>(m.content.size()) + 16;
  return bytes;
}

// Tokens the prompt will roughly take, for placement only (the hub holds no tokenizer): about four
// bytes of text a token.  Token-id prompts are exact.  An estimate may be off either way; the node
// that runs the request checks the exact count.
int64_t EstimatePromptTokens(bool chat, const serve::ChatParams& chat_params,
                             const serve::CompletionParams& completion) {
  if (!chat && completion.prompt_is_ids) return static_cast<int64_t>(completion.prompt_ids.size());
  return PromptBytes(chat, chat_params, completion) / 4 + 1;
}

// An upper bound on the prompt's tokens, for the reservation: a token is at least one byte of
// text, plus room for special tokens.  Token-id prompts are exact.
int64_t PromptTokensBound(bool chat, const serve::ChatParams& chat_params,
                          const serve::CompletionParams& completion) {
  if (!chat && completion.prompt_is_ids) return static_cast<int64_t>(completion.prompt_ids.size());
  return PromptBytes(chat, chat_params, completion) + (chat ? 16 : 8);
}

}  // namespace

void Hub::Impl::IndexModels() {
  if (!models_dirty_) return;
  holders_.clear();
  contexts_.clear();
  for (size_t i = 0; i < fleet_.size(); ++i) {
    for (const placement::ModelOffer& m : fleet_[i].models) {
      holders_[m.name].push_back(static_cast<int32_t>(i));
      int64_t& c = contexts_[m.name];
      c = std::max(c, m.context);
    }
  }
  models_dirty_ = false;
}

int64_t Hub::Impl::LargestContext(const std::string& model) {
  IndexModels();
  auto it = contexts_.find(model);
  return it == contexts_.end() ? 0 : it->second;
}

Job* Hub::Impl::JobOfAttempt(const std::string& attempt_id) {
  auto a = attempt_job_.find(attempt_id);
  if (a == attempt_job_.end()) return nullptr;
  auto j = jobs_.find(a->second);
  return j == jobs_.end() ? nullptr : j->second.get();
}

void Hub::Impl::OnCompletion(bool chat, const net::Request& request,
                             const std::shared_ptr<net::Responder>& responder,
                             int64_t account_id) {
  auto fail = [&](const serve::ApiError& e) {
    responder->Respond(e.status, "application/json", serve::ErrorBody(e));
  };
  json body;
  if (auto e = serve::ParseJsonObject(request.body, &body)) return fail(*e);
  serve::ChatParams chat_params;
  serve::CompletionParams completion;
  std::optional<serve::ApiError> invalid = chat ? serve::ParseChatRequest(body, &chat_params)
                                                : serve::ParseCompletionRequest(body, &completion);
  if (invalid) return fail(*invalid);
  const serve::GenerationParams& gen = chat ? chat_params.gen : completion.gen;
  if (gen.logprobs) {
    serve::ApiError e;
    e.param = "logprobs";
    e.code = "unsupported_parameter";
    e.message = "log-probabilities are not relayed through the network hub yet";
    return fail(e);
  }
  // What is certain without a tokenizer, against the largest context any holder offers, is the
  // consumer's error, answered as loom serve answers it: a token-id prompt that does not fit, and
  // max_tokens beyond the context.
  const int64_t context = LargestContext(gen.model);
  if (context > 0 && gen.max_tokens && *gen.max_tokens > context) {
    return fail(serve::BadParam("max_tokens",
                                "max_tokens is " + std::to_string(*gen.max_tokens) +
                                    " but this model's context holds only " +
                                    std::to_string(context) + " tokens",
                                "invalid_value"));
  }
  if (!chat && completion.prompt_is_ids) {
    const auto n = static_cast<int64_t>(completion.prompt_ids.size());
    if (context > 0 && n >= context) {
      return fail(serve::BadParam(
          "prompt",
          "This model's maximum context length is " + std::to_string(context) +
              " tokens, but the prompt has " + std::to_string(n) +
              " tokens (it must leave room for at least one new token)",
          "context_length_exceeded"));
    }
  }
  StatusOr<std::string> random = cluster::RandomHex(12);
  if (!random.ok()) {
    responder->Respond(500, "application/json",
                       ErrorBody(random.status().message(), "server_error", "hub_error"));
    return;
  }
  auto job = std::make_unique<Job>();
  job->id = (chat ? "chatcmpl-" : "cmpl-") + *random;
  job->account_id = account_id;
  job->model = gen.model;
  job->chat = chat;
  job->stream = gen.stream;
  job->include_usage = gen.include_usage;
  job->max_tokens = gen.max_tokens;
  job->prompt_estimate = EstimatePromptTokens(chat, chat_params, completion);
  job->created_unix = static_cast<int64_t>(std::time(nullptr));
  job->created_at = base::NowSeconds();
  job->consumer = responder;
  body["stream"] = true;
  body["return_token_ids"] = true;
  body.erase("stream_options");
  job->request = std::move(body);

  // Priced models: the worst case is reserved with the job, or the request is refused.
  const ledger::Price& price = options_.pricing.For(job->model);
  std::optional<store::LedgerTx> reserve;
  if (!price.free()) {
    const int64_t completion_bound =
        gen.max_tokens ? *gen.max_tokens : (context > 0 ? context : int64_t{4096});
    job->reserved = std::max<int64_t>(
        1, ledger::Cost(price, PromptTokensBound(chat, chat_params, completion), completion_bound));
    reserve = ledger::ReserveTx(job->id, account_id, job->reserved, base::UnixMillis());
  }

  // Written (hub_impl.h) before anything is acknowledged: a hub that dies from then on still
  // has the job.
  store::JobRecord record;
  record.job_id = job->id;
  record.account_id = account_id;
  record.model = job->model;
  record.endpoint = chat ? "chat" : "completion";
  record.created_ms = base::UnixMillis();
  job->unwritten = std::move(record);
  job->unwritten_reserve = std::move(reserve);
  const std::string id = job->id;
  Job& ref = *job;
  jobs_[id] = std::move(job);
  std::weak_ptr<int> life = life_;
  responder->OnClose([this, life, id] {
    if (life.lock()) CancelJob(id);
  });
  TryPlace(ref);
}

bool Hub::Impl::WriteJob(Job& job, const store::AttemptRecord* first) {
  if (!job.unwritten) return true;
  const Status created = store_->CreateJob(
      *job.unwritten, job.unwritten_reserve ? &*job.unwritten_reserve : nullptr, first);
  job.unwritten.reset();
  job.unwritten_reserve.reset();
  if (created.ok()) return true;
  if (created.code() == StatusCode::kResourceExhausted) {
    StatusOr<int64_t> has = store_->Balance(ledger::ConsumerBook(job.account_id));
    job.consumer->Respond(
        402, "application/json",
        ErrorBody("this request may cost up to " + ledger::FormatCredits(job.reserved) +
                      " credits (its prompt and max_tokens at the price of '" + job.model +
                      "'); the account has " + ledger::FormatCredits(has.ok() ? *has : 0),
                  "insufficient_quota", "insufficient_credits"));
  } else {
    std::fprintf(stderr, "hub: %s\n", created.ToString().c_str());
    job.consumer->Respond(500, "application/json",
                          ErrorBody("the hub could not record the request", "server_error",
                                    "hub_error"));
  }
  if (job.queued) {
    auto& q = queues_[job.model];
    q.erase(std::remove(q.begin(), q.end(), job.id), q.end());
  }
  const std::string id = job.id;
  jobs_.erase(id);  // `job` is gone from here on
  return false;
}

void Hub::Impl::TryPlace(Job& job) {
  placement::Request pr;
  pr.model = job.model;
  pr.prompt_tokens = job.prompt_estimate + static_cast<int64_t>(job.generated.size());
  pr.max_tokens = job.max_tokens ? std::max<int64_t>(1, *job.max_tokens -
                                                           static_cast<int64_t>(job.generated.size()))
                                 : 256;
  pr.exclude = job.excluded;
  // Untrusted nodes (hub_verify.cc) get no work.
  pr.exclude.insert(pr.exclude.end(), untrusted_.begin(), untrusted_.end());
  const double place_start = base::NowSeconds();
  IndexModels();
  static const std::vector<int32_t> kNone;
  auto holders = holders_.find(pr.model);
  placement::Decision d = placement::Place(pr, fleet_, holders == holders_.end() ? kNone : holders->second,
                                           tuning_, random_);
  const double place_us = (base::NowSeconds() - place_start) * 1e6;
  if (job.recorded()) {
    NoteDecision(job, d);
    json rec = placement::DecisionToJson(d);
    rec["place_us"] = place_us;
    rec["fleet_size"] = static_cast<int64_t>(fleet_.size());
    rec["job_id"] = job.id;
    rec["attempt"] = job.attempts + 1;
    rec["at_unix_ms"] = base::UnixMillis();
    rec["request"] = json{{"model", pr.model}, {"prompt_tokens_estimate", pr.prompt_tokens},
                          {"max_tokens", pr.max_tokens}, {"exclude", pr.exclude}};
    decisions_.push_back(std::move(rec));
    if (decisions_.size() > kMaxDecisions) decisions_.pop_front();
  }
  if (d.placed) {
    if (job.queued) {
      auto& q = queues_[job.model];
      q.erase(std::remove(q.begin(), q.end(), job.id), q.end());
      job.queued = false;
    }
    if (NodeConn* node = ReadyNode(d.target_id)) return StartAttempt(job, *node, d);
  }
  if (!WriteJob(job, nullptr)) return;  // it waits or fails: written on its own
  const bool in_grace = base::NowSeconds() - started_at_ < options_.grace_s;
  // Idle models may be filling the memory this request needs: unloading them is worth the wait.
  const bool room = job.recorded() && MakeRoom(job, pr.prompt_tokens + pr.max_tokens, base::NowSeconds());
  if (d.reason == "no_node_for_model" && !in_grace && !room) {
    return EndJob(job, store::JobState::kFailed, "", d.detail, 503, "no_node_for_model");
  }
  if (!job.queued) {
    auto& q = queues_[job.model];
    if (static_cast<int64_t>(q.size()) >= options_.queue_limit) {
      return EndJob(job, store::JobState::kFailed, "",
                    "every node that serves '" + job.model + "' is busy and " +
                        std::to_string(q.size()) + " requests are waiting",
                    503, "over_capacity");
    }
    q.push_back(job.id);
    job.queued = true;
    job.queued_at = base::NowSeconds();
  }
  job.queue_reason = d.reason.empty() || room ? "over_capacity" : d.reason;
}

void Hub::Impl::DrainQueues() {
  for (auto& [model, q] : queues_) {
    // First come, first served: stop at the first request that still finds no target.
    while (!q.empty()) {
      auto it = jobs_.find(q.front());
      if (it == jobs_.end()) {
        q.pop_front();
        continue;
      }
      Job& job = *it->second;
      const size_t before = q.size();
      TryPlace(job);
      if (q.size() == before) break;  // still waiting
    }
  }
}

void Hub::Impl::StartAttempt(Job& job, NodeConn& node, const placement::Decision& d) {
  const double now = base::NowSeconds();
  job.attempts += 1;
  job.attempt_id = job.id + "-" + std::to_string(job.attempts);
  job.node_id = node.node_id;
  job.assigned_at = now;
  job.first_token_at = 0;
  job.last_chunk_at = now;
  job.next_index = 0;
  job.attempt_tokens = 0;
  double cold_s = 0, prefill_s = 0;
  if (!d.candidates.empty()) {
    cold_s = d.candidates.front().costs.cold_load_s;
    prefill_s = d.candidates.front().costs.prefill_s;
  }
  job.first_token_deadline = now + options_.first_token_s + 3 * (cold_s + prefill_s);

  protocol::Assign a;
  a.attempt_id = job.attempt_id;
  a.model = job.model;
  if (job.generated.empty()) {
    a.endpoint = job.chat ? "chat" : "completion";
    a.request = job.request;
  } else {
    // Continue from the prompt as the first node tokenized it plus every token already streamed:
    // greedy decoding then gives the same tokens an uninterrupted run would.
    a.endpoint = "completion";
    json r{{"model", job.model}, {"stream", true}, {"return_token_ids", true}};
    std::vector<int32_t> prompt = job.prompt_ids;
    prompt.insert(prompt.end(), job.generated.begin(), job.generated.end());
    r["prompt"] = prompt;
    for (const char* f : kCarriedFields) {
      if (job.request.contains(f)) r[f] = job.request[f];
    }
    if (job.max_tokens) {
      r["max_tokens"] = *job.max_tokens - static_cast<int64_t>(job.generated.size());
    }
    a.request = std::move(r);
  }
  a.first_token_deadline_ms = static_cast<int64_t>((job.first_token_deadline - now) * 1000) + 1;

  if (job.recorded()) {
    store::AttemptRecord rec;
    rec.attempt_id = job.attempt_id;
    rec.job_id = job.id;
    rec.node_id = node.node_id;
    rec.number = job.attempts;
    rec.started_ms = base::UnixMillis();
    if (job.unwritten) {
      if (!WriteJob(job, &rec)) return;
    } else {
      LogError(store_->AddAttempt(rec));
    }
  }
  node.attempts.insert(job.attempt_id);
  attempt_job_[job.attempt_id] = job.id;
  UpdateLoad(node);
  SendFrame(node, a);
}

void Hub::Impl::OnAccepted(NodeConn& c, const protocol::Accepted& f) {
  if (Check* check = CheckOfAttempt(f.attempt_id)) return OnCheckAccepted(c, *check, f);
  Job* job = JobOfAttempt(f.attempt_id);
  if (job == nullptr || job->node_id != c.node_id) return;  // stale: cancelled or failed over
  if (!job->prompt_known && job->generated.empty()) {
    job->prompt_ids = f.prompt_token_ids;
    job->prompt_known = true;
  }
  if (job->consumer && job->stream && !job->head_sent) {
    job->consumer->BeginStream(200, "text/event-stream",
                               {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    if (job->chat) job->consumer->Send(StreamChunk(*job, "", nullptr, true));
    job->head_sent = true;
  }
}

void Hub::Impl::OnChunk(NodeConn& c, const protocol::Chunk& f) {
  if (Check* check = CheckOfAttempt(f.attempt_id)) return OnCheckChunk(c, *check, f);
  Job* job = JobOfAttempt(f.attempt_id);
  if (job == nullptr || job->node_id != c.node_id) return;
  if (f.index != job->next_index || !job->prompt_known) {
    return FailAttempt(*job, "node " + c.node_id + " sent chunk " + std::to_string(f.index) +
                                 " out of order");
  }
  const double now = base::NowSeconds();
  job->next_index += 1;
  job->last_chunk_at = now;
  if (!f.token_ids.empty() && job->first_token_at == 0) job->first_token_at = now;
  // The hub counts the tokens itself, from the stream.
  job->generated.insert(job->generated.end(), f.token_ids.begin(), f.token_ids.end());
  job->attempt_tokens += static_cast<int64_t>(f.token_ids.size());
  if (!job->consumer || f.text.empty()) return;
  if (job->stream) {
    job->consumer->Send(StreamChunk(*job, f.text, nullptr));
  } else {
    job->text += f.text;
  }
}

void Hub::Impl::OnComplete(NodeConn& c, const protocol::Complete& f) {
  if (Check* check = CheckOfAttempt(f.attempt_id)) return OnCheckComplete(c, *check);
  Job* job = JobOfAttempt(f.attempt_id);
  if (job == nullptr || job->node_id != c.node_id) return;
  if (job->probe) return EndProbe(*job, job->attempt_tokens > 0, "it streamed no token");
  if (job->benchmark) {
    // The hub's own measurement of this node on this model.
    Measured m;
    const double ttft = job->first_token_at - job->assigned_at;
    if (job->first_token_at > 0 && ttft > 0) {
      m.prefill_tps = static_cast<double>(job->prompt_ids.size()) / ttft;
    }
    const double decode = job->last_chunk_at - job->first_token_at;
    if (job->attempt_tokens > 1 && decode > 0) {
      m.decode_tps = static_cast<double>(job->attempt_tokens - 1) / decode;
    } else if (job->attempt_tokens > 0 && job->last_chunk_at > job->assigned_at) {
      // Every token came in one chunk (a fast model, a busy node): the whole attempt's time,
      // prefill included, gives a lower bound instead of no figure.
      m.decode_tps = static_cast<double>(job->attempt_tokens) /
                     (job->last_chunk_at - job->assigned_at);
    }
    measured_[c.node_id][job->model] = m;
    std::fprintf(stderr, "hub: measured node %s on %s: prefill %.1f tok/s, decode %.1f tok/s\n",
                 c.node_id.c_str(), job->model.c_str(), m.prefill_tps, m.decode_tps);
    c.benchmarking.erase(job->model);
    c.attempts.erase(job->attempt_id);
    attempt_job_.erase(job->attempt_id);
    const std::string id = job->id;
    jobs_.erase(id);
    UpdateFleet(c);
    return;
  }
  RecordAttemptEnd(*job, store::AttemptState::kCompleted, "");
  EndJob(*job, store::JobState::kCompleted, f.finish_reason, "", 200, "");
}

void Hub::Impl::OnNodeError(NodeConn& c, const protocol::Error& f) {
  if (!f.attempt_id) {
    std::fprintf(stderr, "hub: node %s reports %s: %s\n", c.node_id.c_str(), f.code.c_str(),
                 f.message.c_str());
    return;
  }
  if (Check* check = CheckOfAttempt(*f.attempt_id)) {
    if (check->verifier != c.node_id) return;
    // Tokens the model does not have are the node's fault; any other refusal the verifier's.
    if (f.code == "token_out_of_vocabulary") return OnCheckFailed(*check, f.message);
    return NextTry(*check, "the verifier: " + f.message);
  }
  Job* job = JobOfAttempt(*f.attempt_id);
  if (job == nullptr || job->node_id != c.node_id) return;
  // The consumer's own mistakes (a prompt longer than the context, ...) are not the node's fault:
  // answer them as they are; anything else is retried elsewhere.
  const bool consumer_error = f.status >= 400 && f.status < 500 && f.status != 408 &&
                              f.status != 429 && job->generated.empty() && job->recorded();
  if (consumer_error) {
    RecordAttemptEnd(*job, store::AttemptState::kFailed, f.message);
    return EndJob(*job, store::JobState::kFailed, "", f.message, f.status, f.code);
  }
  FailAttempt(*job, "node " + c.node_id + ": " + f.message);
}

void Hub::Impl::FailAttempt(Job& job, const std::string& message) {
  std::fprintf(stderr, "hub: attempt %s failed: %s\n", job.attempt_id.c_str(), message.c_str());
  if (job.probe) return EndProbe(job, false, message);
  if (NodeConn* node = ReadyNode(job.node_id)) {
    node->attempts.erase(job.attempt_id);
    if (job.benchmark) node->benchmarking.erase(job.model);
    UpdateLoad(*node);
  }
  attempt_job_.erase(job.attempt_id);
  if (job.benchmark || job.canary) {  // neither is retried elsewhere
    if (job.benchmark) bench_retry_at_[job.node_id + " " + job.model] = base::NowSeconds() + 30;
    jobs_.erase(job.id);
    return;
  }
  RecordAttemptEnd(job, store::AttemptState::kFailed, message);
  job.excluded.push_back(job.node_id);
  job.node_id.clear();
  job.attempt_id.clear();
  failovers_ += 1;
  if (job.attempts >= options_.max_attempts) {
    return EndJob(job, store::JobState::kFailed, "",
                  "the request failed on " + std::to_string(job.attempts) +
                      " node(s); the last: " + message,
                  502, "node_failed");
  }
  if (job.max_tokens && static_cast<int64_t>(job.generated.size()) >= *job.max_tokens) {
    return EndJob(job, store::JobState::kCompleted, "length", "", 200, "");
  }
  WriteAttemptEnd(job);
  TryPlace(job);
}

void Hub::Impl::EndJob(Job& job, store::JobState state, const std::string& finish_reason,
                       const std::string& error, int status, const std::string& code) {
  const int64_t prompt_tokens =
      job.prompt_known ? static_cast<int64_t>(job.prompt_ids.size()) : 0;
  if (job.consumer && !job.consumer->closed()) {
    net::Responder& out = *job.consumer;
    if (state == store::JobState::kCompleted) {
      if (job.stream) {
        if (!job.head_sent) {
          out.BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
          if (job.chat) out.Send(StreamChunk(job, "", nullptr, true));
        }
        out.Send(StreamChunk(job, "", finish_reason));
        if (job.include_usage) {
          json u = ChunkBase(job);
          u["choices"] = json::array();
          u["usage"] = Usage(job, prompt_tokens);
          out.Send("data: " + Dump(u) + "\n\n");
        }
        out.Send("data: [DONE]\n\n");
        out.End();
      } else {
        json c;
        c["id"] = job.id;
        c["object"] = job.chat ? "chat.completion" : "text_completion";
        c["created"] = job.created_unix;
        c["model"] = job.model;
        json choice{{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
        if (job.chat) {
          choice["message"] = json{{"role", "assistant"}, {"content", job.text}};
        } else {
          choice["text"] = job.text;
        }
        c["choices"] = json::array({choice});
        c["usage"] = Usage(job, prompt_tokens);
        out.Respond(200, "application/json", Dump(c));
      }
    } else {
      const std::string type = status >= 500 ? "server_error" : "invalid_request_error";
      std::vector<std::pair<std::string, std::string>> headers;
      if (status == 503) headers.emplace_back("Retry-After", "5");
      if (job.head_sent) {
        out.Send("data: " + ErrorBody(error, type, code) + "\n\n");
        out.End();
      } else {
        out.Respond(status, "application/json", ErrorBody(error, type, code), headers);
      }
    }
  }
  std::optional<store::LedgerTx> settle;
  if (job.reserved > 0) {
    settle = ledger::SettleTx(job.id, job.account_id, job.reserved,
                              options_.pricing.For(job.model), prompt_tokens, job.work,
                              options_.pricing.operator_share_bp, base::UnixMillis());
  }
  if (job.recorded()) {
    const Status finished = store_->FinishJob(
        job.id, state, base::UnixMillis(), prompt_tokens,
        static_cast<int64_t>(job.generated.size()), finish_reason, error,
        settle ? &*settle : nullptr, job.attempt_end ? &*job.attempt_end : nullptr);
    job.attempt_end.reset();
    LogError(finished);
    if (finished.ok() && settle) NoteSettlement(job, *settle);
    if (state == store::JobState::kCompleted) {
      jobs_completed_ += 1;
    } else {
      jobs_failed_ += 1;
    }
  }
  if (!job.attempt_id.empty()) {
    if (NodeConn* node = ReadyNode(job.node_id)) {
      node->attempts.erase(job.attempt_id);
      UpdateLoad(*node);
    }
    attempt_job_.erase(job.attempt_id);
  }
  if (job.queued) {
    auto& q = queues_[job.model];
    q.erase(std::remove(q.begin(), q.end(), job.id), q.end());
  }
  // Verification (hub_verify.cc): the job's attempts may be re-executed elsewhere.
  if (job.canary) {
    OnCanaryEnd(job);
  } else if (job.recorded()) {
    ConsiderChecks(job);
  }
  const std::string id = job.id;
  jobs_.erase(id);  // `job` is gone from here on
}

void Hub::Impl::CancelJob(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  if (!job.attempt_id.empty()) {
    SendCancel(job);
    RecordAttemptEnd(job, store::AttemptState::kCancelled, "the client disconnected");
  }
  EndJob(job, store::JobState::kFailed, "", "the client disconnected", 499, "client_closed");
}

void Hub::Impl::RecordAttemptEnd(Job& job, store::AttemptState state,
                                  const std::string& error) {
  const int64_t now_ms = base::UnixMillis();
  job.work.push_back({job.attempt_id, job.node_id, job.attempt_tokens,
                      OperatorShareFor(job.node_id, job.model)});
  // The first token's time, moved from the monotonic clock onto the store's wall clock.
  const int64_t first_ms =
      job.first_token_at > 0
          ? now_ms - static_cast<int64_t>((base::NowSeconds() - job.first_token_at) * 1000)
          : 0;
  if (!job.recorded()) return;
  job.attempt_end = store::Store::AttemptEnd{.attempt_id = job.attempt_id,
                                             .state = state,
                                             .first_token_ms = first_ms,
                                             .finished_ms = now_ms,
                                             .tokens = job.attempt_tokens,
                                             .error = error};
}

void Hub::Impl::WriteAttemptEnd(Job& job) {
  if (!job.attempt_end) return;
  const store::Store::AttemptEnd& e = *job.attempt_end;
  LogError(store_->FinishAttempt(e.attempt_id, e.state, e.first_token_ms, e.finished_ms, e.tokens,
                                 e.error));
  job.attempt_end.reset();
}

void Hub::Impl::SendCancel(const Job& job) {
  if (NodeConn* node = ReadyNode(job.node_id)) {
    protocol::Cancel cancel;
    cancel.attempt_id = job.attempt_id;
    SendFrame(*node, cancel);
  }
}

void Hub::Impl::CheckJobs(double now) {
  std::vector<std::string> ids;
  ids.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    Job& job = *it->second;
    if (job.queued) {
      if (now - job.queued_at > options_.queue_wait_s) {
        EndJob(job, store::JobState::kFailed, "",
               job.queue_reason == "no_node_for_model"
                   ? "no node serves '" + job.model + "' (none reconnected in time)"
                   : "no node could take the request for '" + job.model + "' within " +
                         std::to_string(static_cast<int>(options_.queue_wait_s)) + " s",
               503, job.queue_reason);
      }
      continue;
    }
    if (job.attempt_id.empty()) continue;
    std::string why;
    if (job.first_token_at == 0 && now > job.first_token_deadline) {
      why = "no first token in time";
    } else if (job.first_token_at > 0 && now - job.last_chunk_at > options_.stall_s) {
      why = "the stream stalled";
    }
    if (why.empty()) continue;
    SendCancel(job);
    FailAttempt(job, "node " + job.node_id + ": " + why);
  }
}

}  // namespace loom::network::hub
