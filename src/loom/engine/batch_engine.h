// Continuous batching for serving: one thread owns a ForwardPass, its KV-cache slots and every
// running sequence's sampler and detokenizer.  Other threads (HTTP handlers) only Submit()
// requests and read what each request produced from its own thread-safe Completion.
//
// Each step builds one Batch: one decode token for every sequence that is generating, plus prompt
// chunks of newly admitted sequences (at most `prefill_chunk` prompt tokens while others decode, so
// their next token is not held up by a long prompt; the whole max_batch when nobody decodes).  It
// runs Forward once, samples each finished row with that sequence's own Sampler, detokenizes,
// checks stop strings / end-of-generation / max tokens / context, and posts the new text to the
// Completion.  Waiting requests are admitted first come, first served as slots free up; the wait
// queue is bounded and Submit() refuses with ResourceExhausted when it is full.  A cancelled
// request (its client went away) releases its slot at the next step.
//
// Batching does not change results: a request's rows are computed as if it ran alone (up to float
// rounding in the batched kernels), so greedy output equals the single-sequence Generator's.
// The step allocates nothing once buffers have grown (text buffers are reserved on admission).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"
#include "loom/model/forward_pass.h"
#include "loom/text/detokenizer.h"
#include "loom/text/sampler.h"
#include "loom/text/tokenizer.h"

namespace loom::engine {

inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr int32_t kMaxStopStrings = 16;
inline constexpr int64_t kMaxStopStringBytes = 1024;

// What a client asks for.
struct CompletionRequest {
  std::vector<int32_t> prompt;  // (n) token ids, BOS included when wanted; 1 <= n < context
  int64_t max_tokens = 256;     // new tokens at most, >= 1
  text::SamplerConfig sampling;
  std::vector<std::string> stop;  // the text ends before the first occurrence of any of these
  bool stop_at_eog = true;        // end at the tokenizer's end-of-generation tokens
  // -1: no log-probabilities.  0..kMaxTopLogprobs: each token's log-probability plus that many of
  // the most likely alternatives (log-softmax of the raw logits, before any sampling step).
  int32_t top_logprobs = -1;
  // Teacher forcing (scoring): when not empty, the i-th new token is forced[i] instead of a
  // sampled one, with its log-probability (and the alternatives) from the model's logits as for a
  // sampled token; max_tokens must be at most forced.size().  The network's verifier scores
  // another node's output this way.
  std::vector<int32_t> forced;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0;  // 0 when log-probabilities were not asked for
  int32_t n_top = 0;  // valid entries of `top`, most likely first (ties: lower id first)
  std::array<TokenLogprob, kMaxTopLogprobs> top{};
};

enum class CompletionFinish {
  kEndOfText,    // the model produced an end-of-generation token
  kStopString,   // a stop string appeared (it is not part of the text)
  kLength,       // max_tokens reached
  kContextFull,  // no position left in the sequence's context
  kCancelled,    // Cancel() was called
  kError,        // the forward pass failed, or the engine stopped (see CompletionOutput::error)
};
// OpenAI's finish_reason: "stop" (end of text, stop string), "length" (max tokens, context),
// "cancelled", "error".
std::string_view FinishReasonForApi(CompletionFinish finish);

// What a completion produced since the last Take(), plus its totals once done.
struct CompletionOutput {
  std::string text;                    // new text (valid UTF-8)
  std::vector<GeneratedToken> tokens;  // new tokens (their text may still be held back)
  bool done = false;
  CompletionFinish finish = CompletionFinish::kLength;
  Status error;  // when finish == kError
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;   // tokens generated so far (end-of-generation excluded)
  double queue_seconds = 0;        // submit -> admitted to a slot
  double first_token_seconds = 0;  // submit -> first token sampled (0 until then)
  double decode_seconds = 0;       // first token -> last token

  void Clear();
};

class BatchEngine;

// One request's handle, shared by the engine and the client.  Thread-safe.
class Completion {
 public:
  // Asks the engine to stop this request and free its slot (a no-op once done).
  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Appends what was produced since the last call to `out` (text, tokens) and copies the totals;
  // returns whether the completion is done (everything it will produce has been taken).
  bool Take(CompletionOutput* out);

  // Blocks until done or `seconds` pass; returns whether it is done.
  bool WaitDone(double seconds);

  const CompletionRequest& request() const { return request_; }

  Completion(CompletionRequest request, std::function<void()> notify, double submit_time);

 private:
  friend class BatchEngine;
  // Engine side: appends text/a token to what the client has not taken yet.
  void Post(std::string_view text, const GeneratedToken* token);
  void Finish(CompletionFinish finish, Status error);
  void Notify();

  const CompletionRequest request_;
  const std::function<void()> notify_;  // called (on the engine thread) after new output
  const double submit_time_;
  // The engine checks this at every step; it never sleeps while a request holds a slot or waits
  // for one, so Cancel() needs no wake-up.
  std::atomic<bool> cancelled_{false};

  // Owned by the engine thread while the request runs.
  std::optional<text::Sampler> sampler_;
  std::optional<text::StreamingDetokenizer> detok_;
  std::string held_;  // generated text not yet posted: it may be the start of a stop string
  size_t max_stop_len_ = 0;
  int64_t generated_ = 0;
  double admit_time_ = 0;
  double first_token_time_ = 0;
  double last_token_time_ = 0;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  CompletionOutput out_;  // guarded by mu_: not yet taken text/tokens, and totals
};

struct BatchEngineOptions {
  int64_t max_queue = 64;      // requests waiting for a slot; beyond that Submit() refuses
  int64_t prefill_chunk = 64;  // prompt tokens per step while other sequences decode
  bool start_thread = true;    // false: the caller drives Step() (tests)
  // With nothing to run for this long the engine calls the model's KeepAlive() (a pod's other
  // ranks wait for steps with a deadline).  A KeepAlive error fails the engine: every request
  // then ends with that error.
  double keep_alive_seconds = 5;
  text::DetokenizerOptions detokenizer;
};

// Counters for /metrics and /health; a consistent-enough snapshot of atomics.
struct EngineStats {
  int64_t slots = 0;
  int64_t active = 0;  // sequences holding a slot
  int64_t queued = 0;  // requests waiting for one
  int64_t max_queue = 0;
  int64_t steps = 0;             // forward passes run
  int64_t batch_tokens = 0;      // tokens run in them
  int64_t prompt_tokens = 0;     // prompt tokens run
  int64_t generated_tokens = 0;  // tokens sampled (end-of-generation excluded)
  int64_t requests_finished = 0;
  int64_t requests_cancelled = 0;  // of those, cancelled (clients that left)
  double busy_seconds = 0;         // time spent in steps
};

class BatchEngine {
 public:
  // `model` and `tokenizer` must outlive the engine.  Needs model.max_batch() >= n_slots().
  static StatusOr<std::unique_ptr<BatchEngine>> Create(model::ForwardPass& model,
                                                       const text::Tokenizer& tokenizer,
                                                       const BatchEngineOptions& options);
  ~BatchEngine();  // Stop()s
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Validates `request` and queues it.  `notify` (may be null) is called on the engine thread
  // whenever the completion has new output or is done; it must be quick and must not call back
  // into the engine.  Errors: InvalidArgument / OutOfRange for a bad request (prompt empty or not
  // shorter than the context, ids outside the vocabulary, bad sampling values, stop strings),
  // ResourceExhausted when the wait queue is full, Unavailable once stopped.
  StatusOr<std::shared_ptr<Completion>> Submit(CompletionRequest request,
                                               std::function<void()> notify = nullptr);

  // Runs one step (admission, cancellations, one Forward, sampling).  Returns false when there was
  // nothing to run.  Only for engines created with start_thread = false.
  bool Step();

  // Finishes every queued and running request with Unavailable and joins the thread.
  void Stop();

  EngineStats Stats() const;
  int64_t context() const { return model_.context(); }
  int64_t vocab() const { return vocab_; }
  int64_t n_slots() const { return n_slots_; }
  const text::Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  struct Slot {
    std::shared_ptr<Completion> c;  // null when free
    int64_t n_past = 0;             // positions in the cache
    int64_t prompt_done = 0;        // prompt tokens run so far
    int32_t next_token = -1;        // sampled, not yet run (decode phase)
    bool decoding = false;
  };

  BatchEngine(model::ForwardPass& model, const text::Tokenizer& tokenizer,
              const BatchEngineOptions& options);
  void Loop();
  void Admit();
  // Samples the row for slot `s` from `logits` (vocab); posts text; may finish the sequence.
  void SampleRow(int32_t s, const float* logits);
  // Posts everything still held (detokenizer tail, stop-string holdback) and finishes.
  void FinishSlot(int32_t s, CompletionFinish finish, Status error = OkStatus());
  // How much of the completion's held text can be posted: all of it but an end that could still
  // grow into a stop string, or, when a stop string is complete (*stop_found), the text before it.
  static size_t SplitHeld(const Completion& c, bool* stop_found);
  // Removes what was posted (everything, after a stop string) from the held text.
  static void DropHeld(Completion& c, size_t emitted, bool stop_found);
  void Logprobs(const float* logits, int32_t chosen, int32_t n_top, GeneratedToken* out) const;

  model::ForwardPass& model_;
  const text::Tokenizer& tokenizer_;
  const BatchEngineOptions options_;
  const int64_t vocab_;
  const int64_t n_slots_;

  // Engine thread only.
  std::vector<Slot> slots_;               // (n_slots)
  std::vector<int32_t> prefill_order_;    // slots still running their prompt, admission order
  std::vector<int32_t> batch_tokens_;     // (max_batch)
  std::vector<int32_t> batch_positions_;  // (max_batch)
  std::vector<int32_t> batch_slots_;      // (max_batch)
  std::vector<int32_t> logit_rows_;       // (n_slots) batch index of each wanted row
  std::vector<int32_t> row_slot_;         // (n_slots) the slot each wanted row belongs to
  std::vector<int64_t> prefill_taken_;    // (n_slots) prompt tokens of each slot in this batch
  base::AlignedBuffer<float> logits_;     // (n_slots, vocab)

  // Shared with Submit()/Stats().
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Completion>> queue_;
  bool stopping_ = false;
  Status failed_;  // the model's KeepAlive() error: no request can run any more
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> queued_{0};
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> batch_tokens_total_{0};
  std::atomic<int64_t> prompt_tokens_total_{0};
  std::atomic<int64_t> generated_total_{0};
  std::atomic<int64_t> finished_total_{0};
  std::atomic<int64_t> cancelled_total_{0};
  std::atomic<int64_t> busy_micros_{0};
  std::thread thread_;
};

}  // namespace loom::engine
