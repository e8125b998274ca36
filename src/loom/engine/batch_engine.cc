#include "loom/engine/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <limits>
#include <utility>

#include "loom/base/clock.h"

namespace loom::engine {

std::string_view FinishReasonForApi(CompletionFinish finish) {
  switch (finish) {
    case CompletionFinish::kEndOfText:
    case CompletionFinish::kStopString:
      return "stop";
    case CompletionFinish::kLength:
    case CompletionFinish::kContextFull:
      return "length";
    case CompletionFinish::kCancelled:
      return "cancelled";
    case CompletionFinish::kError:
      return "error";
  }
  return "error";
}

void CompletionOutput::Clear() {
  text.clear();
  tokens.clear();
  done = false;
  finish = CompletionFinish::kLength;
  error = OkStatus();
  prompt_tokens = completion_tokens = 0;
  queue_seconds = first_token_seconds = decode_seconds = 0;
}

// ---------------------------------------------------------------------------------------------
// Completion

Completion::Completion(CompletionRequest request, std::function<void()> notify, double submit_time)
    : request_(std::move(request)), notify_(std::move(notify)), submit_time_(submit_time) {
  out_.prompt_tokens = static_cast<int64_t>(request_.prompt.size());
}

void Completion::Cancel() { cancelled_.store(true, std::memory_order_release); }

bool Completion::Take(CompletionOutput* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->text.append(out_.text);
  out_.text.clear();
  out->tokens.insert(out->tokens.end(), out_.tokens.begin(), out_.tokens.end());
  out_.tokens.clear();
  out->done = out_.done;
  out->finish = out_.finish;
  out->error = out_.error;
  out->prompt_tokens = out_.prompt_tokens;
  out->completion_tokens = out_.completion_tokens;
  out->queue_seconds = out_.queue_seconds;
  out->first_token_seconds = out_.first_token_seconds;
  out->decode_seconds = out_.decode_seconds;
  return out_.done;
}

bool Completion::WaitDone(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return done_cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return out_.done; });
}

void Completion::Post(std::string_view text, const GeneratedToken* token) {
  std::lock_guard<std::mutex> lock(mu_);
  out_.text.append(text);
  if (token != nullptr) out_.tokens.push_back(*token);
  out_.completion_tokens = generated_;
  if (first_token_time_ > 0) out_.first_token_seconds = first_token_time_ - submit_time_;
}

void Completion::Finish(CompletionFinish finish, Status error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    out_.done = true;
    out_.finish = finish;
    out_.error = std::move(error);
    out_.completion_tokens = generated_;
    if (admit_time_ > 0) out_.queue_seconds = admit_time_ - submit_time_;
    if (first_token_time_ > 0) {
      out_.first_token_seconds = first_token_time_ - submit_time_;
      out_.decode_seconds = last_token_time_ - first_token_time_;
    }
  }
  done_cv_.notify_all();
  Notify();
}

void Completion::Notify() {
  if (notify_) notify_();
}

// ---------------------------------------------------------------------------------------------
// BatchEngine

BatchEngine::BatchEngine(model::ForwardPass& model, const text::Tokenizer& tokenizer,
                         const BatchEngineOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      vocab_(model.hparams().vocab_size),
      n_slots_(model.n_slots()),
      slots_(static_cast<size_t>(model.n_slots())),
      batch_tokens_(static_cast<size_t>(model.max_batch())),
      batch_positions_(static_cast<size_t>(model.max_batch())),
      batch_slots_(static_cast<size_t>(model.max_batch())),
      logit_rows_(static_cast<size_t>(model.n_slots())),
      row_slot_(static_cast<size_t>(model.n_slots())),
      prefill_taken_(static_cast<size_t>(model.n_slots())),
      logits_(model.n_slots() * model.hparams().vocab_size) {
  prefill_order_.reserve(static_cast<size_t>(n_slots_));
}

StatusOr<std::unique_ptr<BatchEngine>> BatchEngine::Create(model::ForwardPass& model,
                                                           const text::Tokenizer& tokenizer,
                                                           const BatchEngineOptions& options) {
  if (model.n_slots() < 1 || model.max_batch() < model.n_slots()) {
    return InvalidArgumentError("batch engine: the model holds ", model.n_slots(),
                                " sequences but runs batches of ", model.max_batch(),
                                " tokens; every sequence needs a place in each batch");
  }
  if (options.prefill_chunk < 1 || options.max_queue < 0) {
    return InvalidArgumentError("batch engine: prefill_chunk must be >= 1 (got ",
                                options.prefill_chunk, ") and max_queue >= 0 (got ",
                                options.max_queue, ")");
  }
  if (model.hparams().vocab_size < 1) {
    return InvalidArgumentError("batch engine: the model has no vocabulary");
  }
  std::unique_ptr<BatchEngine> engine(new BatchEngine(model, tokenizer, options));
  if (options.start_thread) engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

BatchEngine::~BatchEngine() { Stop(); }

StatusOr<std::shared_ptr<Completion>> BatchEngine::Submit(CompletionRequest request,
                                                          std::function<void()> notify) {
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) {
    return InvalidArgumentError("completion: the prompt is empty (it needs at least one token)");
  }
  if (n >= model_.context()) {
    return OutOfRangeError("completion: the prompt has ", n, " tokens but the context holds ",
                           model_.context(), " (the prompt must leave room for one new token)");
  }
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= vocab_) {
      return OutOfRangeError("completion: prompt token id ", id, " is outside the vocabulary (",
                             vocab_, " tokens)");
    }
  }
  if (request.max_tokens < 1) {
    return InvalidArgumentError("completion: max_tokens must be >= 1 (got ", request.max_tokens,
                                ")");
  }
  for (int32_t id : request.forced) {
    if (id < 0 || id >= vocab_) {
      return OutOfRangeError("completion: forced token id ", id, " is outside the vocabulary (",
                             vocab_, " tokens)");
    }
  }
  if (!request.forced.empty() && request.max_tokens > static_cast<int64_t>(request.forced.size())) {
    return InvalidArgumentError("completion: max_tokens (", request.max_tokens,
                                ") exceeds the forced tokens (", request.forced.size(), ")");
  }
  if (request.top_logprobs < -1 || request.top_logprobs > kMaxTopLogprobs) {
    return InvalidArgumentError("completion: top_logprobs must be in [0, ", kMaxTopLogprobs,
                                "] (got ", request.top_logprobs, ")");
  }
  if (static_cast<int64_t>(request.stop.size()) > kMaxStopStrings) {
    return InvalidArgumentError("completion: at most ", kMaxStopStrings, " stop strings (got ",
                                request.stop.size(), ")");
  }
  size_t max_stop = 0;
  for (const std::string& s : request.stop) {
    if (s.empty() || static_cast<int64_t>(s.size()) > kMaxStopStringBytes) {
      return InvalidArgumentError("completion: stop strings must have 1 to ", kMaxStopStringBytes,
                                  " bytes (got ", s.size(), ")");
    }
    max_stop = std::max(max_stop, s.size());
  }
  LOOM_ASSIGN_OR_RETURN(text::Sampler sampler, text::Sampler::Create(vocab_, request.sampling));

  auto c = std::make_shared<Completion>(std::move(request), std::move(notify), base::NowSeconds());
  // Prime the sampler's repetition window and the detokenizer's state with the prompt (as the
  // single-sequence Generator does), here on the caller's thread rather than in the step.
  c->sampler_.emplace(std::move(sampler));
  c->detok_.emplace(tokenizer_, options_.detokenizer);
  for (int32_t id : c->request_.prompt) {
    c->sampler_->Accept(id);
    c->detok_->Push(id);
  }
  c->max_stop_len_ = max_stop;
  c->held_.reserve(max_stop + 256);
  {
    const size_t expect = static_cast<size_t>(std::min<int64_t>(c->request_.max_tokens, 256));
    std::lock_guard<std::mutex> lock(c->mu_);
    c->out_.text.reserve(4096);
    c->out_.tokens.reserve(expect);
  }

  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return UnavailableError("completion: the engine is shutting down");
    if (!failed_.ok()) return failed_;
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
      // Requests whose clients left still count until admission skips them; drop them now.
      std::erase_if(queue_, [](const std::shared_ptr<Completion>& q) { return q->cancelled(); });
      queued_.store(static_cast<int64_t>(queue_.size()));
    }
    const bool slot_free = active_.load() < n_slots_ && queue_.empty();
    if (!slot_free && static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
      return ResourceExhaustedError("completion: the server is busy (", active_.load(), " of ",
                                    n_slots_, " slots generating, ", queue_.size(),
                                    " requests waiting, queue limit ", options_.max_queue, ")");
    }
    queue_.push_back(c);
    queued_.fetch_add(1);
  }
  cv_.notify_one();
  return c;
}

void BatchEngine::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool work = cv_.wait_for(
          lock, std::chrono::duration<double>(options_.keep_alive_seconds),
          [&] { return stopping_ || !queue_.empty() || active_.load() > 0; });
      if (stopping_) return;
      if (!work) {
        if (!failed_.ok()) continue;
        lock.unlock();
        const Status alive = model_.KeepAlive();
        if (alive.ok()) continue;
        std::fprintf(stderr, "loom: the model failed while idle: %s\n", alive.ToString().c_str());
        lock.lock();
        failed_ = UnavailableError("completion: the model failed: ", alive.message());
        continue;
      }
    }
    Step();
  }
}

void BatchEngine::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t s = 0;
  while (!queue_.empty()) {
    while (s < n_slots_ && slots_[static_cast<size_t>(s)].c != nullptr) ++s;
    if (s == n_slots_) break;
    std::shared_ptr<Completion> c = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1);
    if (c->cancelled()) {
      finished_total_.fetch_add(1, std::memory_order_relaxed);
      cancelled_total_.fetch_add(1, std::memory_order_relaxed);
      c->Finish(CompletionFinish::kCancelled, OkStatus());
      continue;
    }
    c->admit_time_ = base::NowSeconds();
    Slot& slot = slots_[static_cast<size_t>(s)];
    slot.c = std::move(c);
    slot.n_past = 0;
    slot.prompt_done = 0;
    slot.next_token = -1;
    slot.decoding = false;
    prefill_order_.push_back(s);
    active_.fetch_add(1);
  }
}

bool BatchEngine::Step() {
  // Cancelled sequences leave first, so that their slots go to waiting requests in this step.
  for (int32_t s = 0; s < n_slots_; ++s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.c != nullptr && slot.c->cancelled()) FinishSlot(s, CompletionFinish::kCancelled);
  }
  Admit();

  // One decode token per generating sequence, then prompt chunks in admission order.
  const int64_t max_batch = model_.max_batch();
  int64_t n = 0;
  int64_t rows = 0;
  for (int32_t s = 0; s < n_slots_; ++s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.c == nullptr || !slot.decoding) continue;
    batch_tokens_[static_cast<size_t>(n)] = slot.next_token;
    batch_positions_[static_cast<size_t>(n)] = static_cast<int32_t>(slot.n_past);
    batch_slots_[static_cast<size_t>(n)] = s;
    logit_rows_[static_cast<size_t>(rows)] = static_cast<int32_t>(n);
    row_slot_[static_cast<size_t>(rows)] = s;
    ++rows;
    ++n;
  }
  const bool anyone_decoding = n > 0;
  int64_t budget = max_batch - n;
  if (anyone_decoding) budget = std::min(budget, options_.prefill_chunk);
  for (int32_t s : prefill_order_) {
    if (budget <= 0) break;
    Slot& slot = slots_[static_cast<size_t>(s)];
    const std::vector<int32_t>& prompt = slot.c->request_.prompt;
    const int64_t remaining = static_cast<int64_t>(prompt.size()) - slot.prompt_done;
    const int64_t take = std::min(remaining, budget);
    for (int64_t i = 0; i < take; ++i) {
      batch_tokens_[static_cast<size_t>(n)] = prompt[static_cast<size_t>(slot.prompt_done + i)];
      batch_positions_[static_cast<size_t>(n)] = static_cast<int32_t>(slot.prompt_done + i);
      batch_slots_[static_cast<size_t>(n)] = s;
      ++n;
    }
    prefill_taken_[static_cast<size_t>(s)] = take;
    if (take == remaining) {
      logit_rows_[static_cast<size_t>(rows)] = static_cast<int32_t>(n - 1);
      row_slot_[static_cast<size_t>(rows)] = s;
      ++rows;
    }
    budget -= take;
  }
  if (n == 0) return false;

  const auto nn = static_cast<size_t>(n);
  const model::Batch batch{std::span<const int32_t>(batch_tokens_.data(), nn),
                           std::span<const int32_t>(batch_positions_.data(), nn),
                           std::span<const int32_t>(batch_slots_.data(), nn),
                           std::span<const int32_t>(logit_rows_.data(), static_cast<size_t>(rows))};
  const int64_t t0 = base::NowMicros();
  const Status status = model_.Forward(batch, logits_.data());
  busy_micros_.fetch_add(base::NowMicros() - t0, std::memory_order_relaxed);
  steps_.fetch_add(1, std::memory_order_relaxed);
  batch_tokens_total_.fetch_add(n, std::memory_order_relaxed);

  // Advance the cache positions of every sequence in the batch.
  int64_t prompt_run = 0;
  for (int32_t s = 0; s < n_slots_; ++s) {
    Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.c == nullptr) continue;
    int64_t& taken = prefill_taken_[static_cast<size_t>(s)];
    if (slot.decoding) {
      ++slot.n_past;
    } else if (taken > 0) {
      slot.prompt_done += taken;
      slot.n_past = slot.prompt_done;
      prompt_run += taken;
    }
    if (!status.ok() && (slot.decoding || taken > 0)) {
      FinishSlot(s, CompletionFinish::kError, status);
    }
    taken = 0;
  }
  prompt_tokens_total_.fetch_add(prompt_run, std::memory_order_relaxed);
  std::erase_if(prefill_order_, [&](int32_t s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    return slot.c == nullptr ||
           slot.prompt_done == static_cast<int64_t>(slot.c->request_.prompt.size());
  });
  if (!status.ok()) return true;

  for (int64_t r = 0; r < rows; ++r) {
    SampleRow(row_slot_[static_cast<size_t>(r)], logits_.data() + r * vocab_);
  }
  return true;
}

void BatchEngine::SampleRow(int32_t s, const float* logits) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  Completion& c = *slot.c;
  const std::vector<int32_t>& forced = c.request_.forced;
  StatusOr<int32_t> next =
      !forced.empty()
          ? StatusOr<int32_t>(forced[static_cast<size_t>(c.generated_)])
          : c.sampler_->Sample(std::span<const float>(logits, static_cast<size_t>(vocab_)));
  if (!next.ok()) {
    FinishSlot(s, CompletionFinish::kError, next.status());
    return;
  }
  const int32_t id = *next;
  const double now = base::NowSeconds();
  if (c.first_token_time_ == 0) c.first_token_time_ = now;
  c.last_token_time_ = now;
  if (c.request_.stop_at_eog && tokenizer_.IsEog(id)) {
    FinishSlot(s, CompletionFinish::kEndOfText);
    return;
  }
  c.sampler_->Accept(id);
  ++c.generated_;
  generated_total_.fetch_add(1, std::memory_order_relaxed);
  GeneratedToken token;
  token.id = id;
  if (c.request_.top_logprobs >= 0) Logprobs(logits, id, c.request_.top_logprobs, &token);

  c.held_.append(c.detok_->Push(id));
  bool stopped = false;
  const size_t emit = SplitHeld(c, &stopped);
  c.Post(std::string_view(c.held_).substr(0, emit), &token);
  DropHeld(c, emit, stopped);
  if (stopped) {
    FinishSlot(s, CompletionFinish::kStopString);
    return;
  }
  if (c.generated_ >= c.request_.max_tokens) {
    FinishSlot(s, CompletionFinish::kLength);
    return;
  }
  if (slot.n_past >= model_.context()) {
    FinishSlot(s, CompletionFinish::kContextFull);
    return;
  }
  slot.next_token = id;
  slot.decoding = true;
  c.Notify();
}

size_t BatchEngine::SplitHeld(const Completion& c, bool* stop_found) {
  const std::string_view held(c.held_);
  const std::vector<std::string>& stops = c.request_.stop;
  size_t emit = held.size();
  *stop_found = false;
  for (const std::string& stop : stops) {
    const size_t pos = held.find(stop);
    if (pos != std::string_view::npos && (!*stop_found || pos < emit)) {
      emit = pos;
      *stop_found = true;
    }
  }
  if (*stop_found) return emit;
  // Hold back the longest end of the text that could still grow into a stop string.
  size_t keep = 0;
  for (const std::string& stop : stops) {
    for (size_t k = std::min(stop.size() - 1, held.size()); k > keep; --k) {
      if (held.substr(held.size() - k) == std::string_view(stop).substr(0, k)) {
        keep = k;
        break;
      }
    }
  }
  return held.size() - keep;
}

void BatchEngine::DropHeld(Completion& c, size_t emitted, bool stop_found) {
  if (stop_found) {
    c.held_.clear();  // the stop string and anything after it are not part of the text
  } else {
    c.held_.erase(0, emitted);
  }
}

void BatchEngine::FinishSlot(int32_t s, CompletionFinish finish, Status error) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  std::shared_ptr<Completion> c = std::move(slot.c);
  slot = Slot{};
  std::erase(prefill_order_, s);
  if (finish == CompletionFinish::kEndOfText || finish == CompletionFinish::kLength ||
      finish == CompletionFinish::kContextFull) {
    // The text held back (an unfinished UTF-8 character, a possible stop string start) ends here.
    c->held_.append(c->detok_->Finish());
    bool stopped = false;
    const size_t emit = SplitHeld(*c, &stopped);
    if (stopped) finish = CompletionFinish::kStopString;
    c->Post(std::string_view(c->held_).substr(0, stopped ? emit : c->held_.size()), nullptr);
    c->held_.clear();
  }
  // Counters first: a client that sees its completion done also sees it gone from the stats.
  active_.fetch_sub(1);
  finished_total_.fetch_add(1, std::memory_order_relaxed);
  if (finish == CompletionFinish::kCancelled) {
    cancelled_total_.fetch_add(1, std::memory_order_relaxed);
  }
  c->Finish(finish, std::move(error));
}

void BatchEngine::Logprobs(const float* logits, int32_t chosen, int32_t n_top,
                           GeneratedToken* out) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float max_logit = kNegInf;
  for (int64_t v = 0; v < vocab_; ++v) {
    if (logits[v] > max_logit) max_logit = logits[v];  // NaN compares false: skipped
  }
  double sum = 0;
  if (std::isfinite(max_logit)) {
    for (int64_t v = 0; v < vocab_; ++v) {
      if (!std::isnan(logits[v])) sum += std::exp(static_cast<double>(logits[v] - max_logit));
    }
  }
  const double lse = sum > 0 ? max_logit + std::log(sum) : max_logit;
  auto logprob = [&](int32_t id) {
    const float l = logits[id];
    return std::isnan(l) ? kNegInf : static_cast<float>(l - lse);
  };
  out->logprob = logprob(chosen);
  // The n_top largest logits, most likely first; on ties the lower id stays ahead.
  int32_t count = 0;
  for (int64_t v = 0; v < vocab_ && n_top > 0; ++v) {
    const float l = logits[v];
    if (std::isnan(l)) continue;
    if (count == n_top && !(l > logits[out->top[static_cast<size_t>(count - 1)].id])) continue;
    int32_t i = count < n_top ? count++ : count - 1;
    while (i > 0 && l > logits[out->top[static_cast<size_t>(i - 1)].id]) {
      out->top[static_cast<size_t>(i)] = out->top[static_cast<size_t>(i - 1)];
      --i;
    }
    out->top[static_cast<size_t>(i)].id = static_cast<int32_t>(v);
  }
  out->n_top = count;
  for (int32_t i = 0; i < count; ++i) {
    out->top[static_cast<size_t>(i)].logprob = logprob(out->top[static_cast<size_t>(i)].id);
  }
}

void BatchEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  const Status gone = UnavailableError("completion: the engine stopped before it finished");
  std::deque<std::shared_ptr<Completion>> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting.swap(queue_);
    queued_.store(0);
  }
  for (auto& c : waiting) c->Finish(CompletionFinish::kError, gone);
  for (int32_t s = 0; s < n_slots_; ++s) {
    if (slots_[static_cast<size_t>(s)].c != nullptr) FinishSlot(s, CompletionFinish::kError, gone);
  }
  prefill_order_.clear();
}

EngineStats BatchEngine::Stats() const {
  EngineStats st;
  st.slots = n_slots_;
  st.active = active_.load(std::memory_order_relaxed);
  st.queued = queued_.load(std::memory_order_relaxed);
  st.max_queue = options_.max_queue;
  st.steps = steps_.load(std::memory_order_relaxed);
  st.batch_tokens = batch_tokens_total_.load(std::memory_order_relaxed);
  st.prompt_tokens = prompt_tokens_total_.load(std::memory_order_relaxed);
  st.generated_tokens = generated_total_.load(std::memory_order_relaxed);
  st.requests_finished = finished_total_.load(std::memory_order_relaxed);
  st.requests_cancelled = cancelled_total_.load(std::memory_order_relaxed);
  st.busy_seconds = static_cast<double>(busy_micros_.load(std::memory_order_relaxed)) * 1e-6;
  return st;
}

}  // namespace loom::engine
