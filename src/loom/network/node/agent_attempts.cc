// The attempts the hub assigns (agent_impl.h): each runs as one streaming request to the model's
// `loom serve` child, whose SSE events go up to the hub as paced chunk frames and end in a
// complete or error frame.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>

#include "loom/base/clock.h"
#include "loom/network/node/agent_impl.h"

namespace loom::network::node {
namespace {

// Token ids from the child's JSON; anything that is not a list of ids gives an empty list (the
// frame then carries no ids rather than the agent throwing on a malformed answer).
std::vector<int32_t> TokenIds(const json& v) {
  std::vector<int32_t> ids;
  if (!v.is_array()) return ids;
  ids.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) return {};
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

}  // namespace

void Agent::Impl::SendError(const std::string& attempt, std::string code, std::string message,
                            int status) {
  // The code is passed on from the child's answer: keep it a valid frame id whatever it was.
  std::string safe;
  for (char ch : code) {
    if (safe.size() < 64 && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
                             ch == '-' || ch == '.')) {
      safe.push_back(ch);
    }
  }
  protocol::Error e;
  e.attempt_id = attempt;
  e.code = safe.empty() ? "generation_failed" : safe;
  e.message = message.substr(0, protocol::kMaxMessageBytes);
  e.status = status >= 100 && status <= 599 ? status : 502;
  Send(e);
}

void Agent::Impl::OnAssign(const protocol::Assign& assign) {
  if (attempts_.count(assign.attempt_id)) return;  // idempotent on attempt_id
  if (draining_ || Paused()) {
    return SendError(assign.attempt_id, "node_unavailable",
                     draining_ ? "this node is draining" : "this node is paused by its owner", 503);
  }
  auto m = std::find_if(models_.begin(), models_.end(),
                        [&](const LocalModel& x) { return x.name == assign.model; });
  if (m == models_.end()) {
    return SendError(assign.attempt_id, "model_not_found",
                     "this node does not hold '" + assign.model + "'", 503);
  }
  Attempt a;
  a.id = assign.attempt_id;
  a.model = assign.model;
  a.endpoint = assign.endpoint;
  a.request = assign.request;
  a.request["model"] = assign.model;
  a.request["stream"] = true;
  a.request["return_token_ids"] = true;
  auto [it, inserted] = attempts_.emplace(a.id, std::move(a));
  unload_pending_.erase(assign.model);  // wanted again
  auto s = servers_.find(assign.model);
  if (s == servers_.end()) {
    if (Footprint(*m) > MemFree()) {
      attempts_.erase(it);
      return SendError(assign.attempt_id, "no_memory",
                       "not enough lendable memory to load '" + assign.model + "'", 503);
    }
    it->second.waiting_for_load = true;
    Load(assign.model);
    return;
  }
  if (!s->second->ready()) {
    it->second.waiting_for_load = true;
    return;
  }
  StartCall(it->second);
}

void Agent::Impl::StartCall(Attempt& a) {
  const ModelServer& server = *servers_.at(a.model);
  net::ClientRequest req;
  req.method = "POST";
  req.url.scheme = "http";
  req.url.host = "127.0.0.1";
  req.url.port = server.port();
  req.url.target = a.endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions";
  req.headers = {{"Content-Type", "application/json"},
                 {"Authorization", "Bearer " + server.api_key()}};
  req.body = a.request.dump(-1, ' ', false, json::error_handler_t::replace);
  req.timeout_s = 600;
  std::weak_ptr<int> life = life_;
  const std::string id = a.id;
  a.call = net::StartRequest(
      io_, std::move(req), nullptr,
      [this, life, id](int status, const std::vector<std::pair<std::string, std::string>>&) {
        if (!life.lock()) return;
        auto it = attempts_.find(id);
        if (it != attempts_.end()) it->second.status = status;
      },
      [this, life, id](std::string_view data) {
        if (life.lock()) OnData(id, data);
      },
      [this, life, id](Status s) {
        if (life.lock()) OnDone(id, s);
      });
  Heartbeat();
}

void Agent::Impl::OnData(const std::string& id, std::string_view data) {
  auto it = attempts_.find(id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (a.status != 200) {
    if (a.error_body.size() < 65536) a.error_body.append(data);
    return;
  }
  a.buffer.append(data);
  size_t end;
  while ((end = a.buffer.find("\n\n")) != std::string::npos) {
    std::string event = a.buffer.substr(0, end);
    a.buffer.erase(0, end + 2);
    if (event.rfind("data: ", 0) == 0) OnEvent(a, std::string_view(event).substr(6));
    if (attempts_.find(id) == attempts_.end()) return;  // finished inside
  }
  MaybeFlush(a);
}

void Agent::Impl::OnEvent(Attempt& a, std::string_view data) {
  if (data == "[DONE]") {
    FlushChunk(a);
    protocol::Complete c;
    c.attempt_id = a.id;
    c.finish_reason = a.finish_reason == "length" ? "length" : "stop";
    c.prompt_tokens = a.prompt_tokens;
    c.completion_tokens = a.completion_tokens;
    Send(c);
    return Finish(a.id);
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  if (j.contains("error")) {
    FlushChunk(a);
    const json& e = j["error"];
    std::string code = "generation_failed", message = "generation failed";
    if (e.is_object() && e.contains("code") && e["code"].is_string()) code = e["code"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) message = e["message"];
    SendError(a.id, code, message, 500);
    return Finish(a.id);
  }
  if (j.contains("prompt_token_ids") && !a.accepted) {
    protocol::Accepted acc;
    acc.attempt_id = a.id;
    acc.prompt_token_ids = TokenIds(j["prompt_token_ids"]);
    a.prompt_tokens = static_cast<int64_t>(acc.prompt_token_ids.size());
    a.accepted = true;
    Send(acc);
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
  const json& choice = j["choices"][0];
  if (!choice.is_object()) return;
  std::string text;
  if (choice.contains("delta") && choice["delta"].is_object() && choice["delta"].contains("content") &&
      choice["delta"]["content"].is_string()) {
    text = choice["delta"]["content"].get<std::string>();
  } else if (choice.contains("text") && choice["text"].is_string()) {
    text = choice["text"].get<std::string>();
  }
  std::vector<int32_t> ids;
  if (choice.contains("token_ids")) ids = TokenIds(choice["token_ids"]);
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    a.finish_reason = choice["finish_reason"].get<std::string>();
  }
  // A scoring request's log-probabilities (completions' shape: token_logprobs, and top_logprobs
  // maps whose largest value is the most likely token's), one per token id or none at all.
  const json* lp =
      choice.contains("logprobs") && choice["logprobs"].is_object() ? &choice["logprobs"] : nullptr;
  if (lp != nullptr && !ids.empty() && lp->contains("token_logprobs") &&
      (*lp)["token_logprobs"].is_array() && (*lp)["token_logprobs"].size() == ids.size()) {
    const json& values = (*lp)["token_logprobs"];
    const json* tops = lp->contains("top_logprobs") && (*lp)["top_logprobs"].is_array() &&
                               (*lp)["top_logprobs"].size() == ids.size()
                           ? &(*lp)["top_logprobs"]
                           : nullptr;
    // A value JSON cannot carry (-inf reads null) is the least possible.
    auto clamp = [](const json& v) {
      const double d = v.is_number() ? v.get<double>() : protocol::kMinLogprob;
      return std::clamp(d, protocol::kMinLogprob, protocol::kMaxLogprob);
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      const double own = clamp(values[i]);
      double best = own;
      if (tops != nullptr && (*tops)[i].is_object()) {
        for (const auto& [piece, v] : (*tops)[i].items()) best = std::max(best, clamp(v));
      }
      a.pending_logprobs.push_back(own);
      a.pending_best.push_back(best);
    }
  }
  // Pieces go up together, paced by MaybeFlush after the read.
  a.pending_text += text;
  a.pending_ids.insert(a.pending_ids.end(), ids.begin(), ids.end());
}

void Agent::Impl::FlushChunk(Attempt& a) {
  if (a.pending_text.empty() && a.pending_ids.empty()) return;
  protocol::Chunk c;
  c.attempt_id = a.id;
  c.index = a.index++;
  c.text = std::move(a.pending_text);
  c.token_ids = std::move(a.pending_ids);
  if (a.pending_logprobs.size() == c.token_ids.size()) {
    c.logprobs = std::move(a.pending_logprobs);
    c.best_logprobs = std::move(a.pending_best);
  }
  a.pending_text.clear();
  a.pending_ids.clear();
  a.pending_logprobs.clear();
  a.pending_best.clear();
  a.completion_tokens += static_cast<int64_t>(c.token_ids.size());
  a.last_flush = base::NowSeconds();
  Send(c);
}

void Agent::Impl::MaybeFlush(Attempt& a) {
  if (a.pending_text.empty() && a.pending_ids.empty()) return;
  const double now = base::NowSeconds();
  const double due = a.last_flush + options_.chunk_interval_s;
  if (a.last_flush == 0 || due <= now) return FlushChunk(a);
  if (flush_at_ != 0 && flush_at_ <= due) return;  // armed early enough
  flush_at_ = due;
  flush_.expires_after(std::chrono::microseconds(static_cast<int64_t>((due - now) * 1e6) + 1));
  std::weak_ptr<int> life = life_;
  flush_.async_wait([this, life](const boost::system::error_code& ec) {
    if (!ec && life.lock()) OnFlushTimer();
  });
}

void Agent::Impl::OnFlushTimer() {
  flush_at_ = 0;
  for (auto& [id, a] : attempts_) MaybeFlush(a);
}

void Agent::Impl::OnDone(const std::string& id, const Status& s) {
  auto it = attempts_.find(id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (a.status != 200 && a.status != 0) {
    // The child refused the request: pass its OpenAI error on with its status.
    json j = json::parse(a.error_body, nullptr, false);
    std::string message = "loom serve answered " + std::to_string(a.status);
    std::string code = "request_refused";
    if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object()) {
      if (j["error"].contains("message") && j["error"]["message"].is_string()) {
        message = j["error"]["message"].get<std::string>();
      }
      if (j["error"].contains("code") && j["error"]["code"].is_string()) {
        code = j["error"]["code"].get<std::string>();
      }
    }
    SendError(id, code, message, a.status);
  } else if (!s.ok() && s.code() != StatusCode::kCancelled) {
    SendError(id, "generation_failed", s.ToString(), 502);
  } else if (s.ok()) {
    SendError(id, "generation_failed", "the stream ended without [DONE]", 502);
  }
  Finish(id);
}

void Agent::Impl::Finish(const std::string& id) {
  auto it = attempts_.find(id);
  if (it == attempts_.end()) return;
  std::shared_ptr<net::ClientCall> call = std::move(it->second.call);
  const std::string model = it->second.model;
  attempts_.erase(it);
  if (call) call->Cancel();  // no-op when it already ended
  if (unload_pending_.count(model) &&
      std::none_of(attempts_.begin(), attempts_.end(),
                   [&](const auto& a) { return a.second.model == model; })) {
    Unload(model);
  }
  MaybeDrained();
}

}  // namespace loom::network::node
