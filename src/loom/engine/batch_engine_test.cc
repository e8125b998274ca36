// The continuous-batching engine: batched greedy output equals the single-sequence Generator's
// (stories260K and synthetic float and quantized models), a continuation prefilled from streamed
// tokens equals the uninterrupted run, stop strings, limits, cancellation, the bounded
// queue, log-probabilities, and a decode step that does not allocate.
#include "loom/engine/batch_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "loom/base/testing.h"
#include "loom/engine/generator.h"
#include "loom/kernels/dtype.h"
#include "loom/model/synth.h"
#include "loom/model/transformer.h"
#include "loom/text/tokenizer_loader.h"

// Counts heap allocations made by the current thread while counting is switched on.  (GCC warns
// that free() meets memory from operator new: here operator new is malloc.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local bool g_count_allocations = false;
thread_local int64_t g_allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (g_count_allocations) ++g_allocations;
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace loom::engine {
namespace {

// A model, its tokenizer, and a transformer with `n_slots` sequences.
struct Fixture {
  std::vector<std::byte> bytes;  // synthetic models live in memory
  std::unique_ptr<model::ModelFile> file;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<model::TransformerWeights> weights;
  std::unique_ptr<base::ThreadPool> pool;

  std::unique_ptr<model::Transformer> MakeTransformer(int64_t n_slots, int64_t context = 0,
                                                      int64_t max_batch = 64) {
    model::TransformerOptions t;
    t.n_slots = n_slots;
    t.context = context;
    t.max_batch = max_batch;
    auto tr = model::Transformer::Create(*weights, t, *pool);
    EXPECT_TRUE(tr.ok()) << tr.status().ToString();
    return tr.ok() ? std::move(*tr) : nullptr;
  }
};

void Finish(Fixture* f) {
  auto tokenizer = text::LoadTokenizerForModel(*f->file, "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  f->tokenizer = std::move(*tokenizer);
  auto weights = model::BindWeights(*f->file);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  f->weights = std::make_unique<model::TransformerWeights>(std::move(*weights));
  f->pool = std::make_unique<base::ThreadPool>(2);
}

void OpenStories(const std::string& shared, Fixture* f) {
  auto file = model::OpenModel(shared + "/models/stories260K/stories260K.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  f->file = std::move(*file);
  Finish(f);
}

void OpenSynth(kernels::DType type, Fixture* f, const std::string& shape = "tiny") {
  model::SynthOptions options;
  options.shape = *model::FindSynthShape(shape);
  options.type = type;
  options.seed = 7;
  options.threads = 1;
  ASSERT_TRUE(model::WriteSynthModelToMemory(options, &f->bytes).ok());
  auto file = model::OpenModelFromBytes(f->bytes, "synth-tiny");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  f->file = std::move(*file);
  Finish(f);
}

std::vector<int32_t> Encode(const Fixture& f, const std::string& text) {
  auto ids = f.tokenizer->Encode(text, f.tokenizer->add_bos_default());
  EXPECT_TRUE(ids.ok());
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

CompletionRequest Greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

// Drives a manual engine until `c` is done; returns its whole output.
CompletionOutput RunUntilDone(BatchEngine& engine, Completion& c, int max_steps = 10000) {
  CompletionOutput out;
  for (int i = 0; i < max_steps && !c.Take(&out); ++i) engine.Step();
  return out;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time",       "The cat sat", "Lily and Tom went",
    "One day, a little bird", "He was",      "A big red ball"};

// Runs every prompt alone through the Generator and all at once through the engine (started
// together, different lengths, so prompt chunks share batches with decode steps), and compares:
// the tokens must be equal, for quantized weights too (their kernels give every row the same bits
// whatever the batch: kernels/matmul_test.cc BatchRowsEqualSingleRowsBitForBit).
void ExpectBatchedEqualsAlone(Fixture& f, int64_t max_tokens, int64_t prefill_chunk) {
  std::vector<GenerationResult> alone;
  {
    auto t = f.MakeTransformer(1);
    ASSERT_NE(t, nullptr);
    Generator gen(*t, *f.tokenizer);
    for (const std::string& p : kPrompts) {
      GenerateOptions o;
      o.max_new_tokens = max_tokens;
      o.sampling.temperature = 0;
      auto r = gen.Generate(Encode(f, p), o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      alone.push_back(std::move(*r));
    }
  }
  auto t = f.MakeTransformer(4);
  ASSERT_NE(t, nullptr);
  BatchEngineOptions eo;
  eo.prefill_chunk = prefill_chunk;
  eo.start_thread = false;
  auto engine = BatchEngine::Create(*t, *f.tokenizer, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<std::shared_ptr<Completion>> cs;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    CompletionRequest r = Greedy(Encode(f, kPrompts[i]), max_tokens);
    r.top_logprobs = 2;
    auto c = (*engine)->Submit(std::move(r));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cs.push_back(*c);
    (*engine)->Step();  // later requests join while earlier ones decode
  }
  std::vector<CompletionOutput> outs(cs.size());
  int steps = 0;
  for (bool all_done = false; !all_done && steps < 10000; ++steps) {
    all_done = true;
    for (size_t i = 0; i < cs.size(); ++i) all_done &= cs[i]->Take(&outs[i]);
    if (!all_done) (*engine)->Step();
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    std::vector<int32_t> ids;
    for (const GeneratedToken& tok : outs[i].tokens) ids.push_back(tok.id);
    EXPECT_EQ(outs[i].prompt_tokens, static_cast<int64_t>(Encode(f, kPrompts[i]).size()));
    EXPECT_EQ(outs[i].completion_tokens, static_cast<int64_t>(ids.size()));
    EXPECT_EQ(ids, alone[i].generated) << kPrompts[i];
    EXPECT_EQ(outs[i].text, alone[i].text) << kPrompts[i];
    const CompletionFinish want = alone[i].finish == FinishReason::kEndOfText
                                      ? CompletionFinish::kEndOfText
                                      : CompletionFinish::kLength;
    EXPECT_EQ(outs[i].finish, want) << kPrompts[i];
  }
  EXPECT_EQ((*engine)->Stats().active, 0);
}

TEST(BatchEngineTest, BatchedGreedyEqualsGeneratorOnStories260K) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(OpenStories(shared, &f));
  ExpectBatchedEqualsAlone(f, 48, /*prefill_chunk=*/3);
  ExpectBatchedEqualsAlone(f, 48, /*prefill_chunk=*/64);
}

TEST(BatchEngineTest, BatchedGreedyEqualsGeneratorOnSyntheticModels) {
  for (kernels::DType type : {kernels::DType::kF32, kernels::DType::kQ8_0, kernels::DType::kQ4_0}) {
    SCOPED_TRACE(std::string(kernels::Traits(type).name));
    Fixture f;
    ASSERT_NO_FATAL_FAILURE(OpenSynth(type, &f));
    ExpectBatchedEqualsAlone(f, 24, /*prefill_chunk=*/2);
  }
}

// Failover (docs/network.md): another node continues a stream by prefilling the prompt plus the
// tokens already streamed as one batch.  With greedy sampling the continuation must be the rest of
// the uninterrupted run token for token, so every position's KV cache and logits need the same
// bits decoded alone as inside a batched prompt, for quantized weights too.  The "small" shape has
// rows of 512 and 1536 values (whole and partial 128-value kernel groups; K-quant super-blocks).
TEST(BatchEngineTest, ContinuationPrefilledAsOneBatchEqualsTheUninterruptedRun) {
  for (kernels::DType type : {kernels::DType::kF32, kernels::DType::kQ8_0, kernels::DType::kQ4_0,
                              kernels::DType::kQ4_K}) {
    SCOPED_TRACE(std::string(kernels::Traits(type).name));
    Fixture f;
    ASSERT_NO_FATAL_FAILURE(OpenSynth(type, &f, "small"));
    const std::vector<int32_t> prompt = Encode(f, "Once upon a time");
    constexpr int64_t kTokens = 32;
    const std::vector<int64_t> streamed = {1, 6, 17, 31};  // tokens streamed before the failure
    std::vector<int32_t> whole;
    {
      auto t = f.MakeTransformer(1, /*context=*/256, /*max_batch=*/64);
      ASSERT_NE(t, nullptr);
      Generator gen(*t, *f.tokenizer);
      GenerateOptions o;
      o.max_new_tokens = kTokens;
      o.sampling.temperature = 0;
      o.stop_at_eog = false;
      auto r = gen.Generate(prompt, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      whole = r->generated;  // decoded one token at a time
      ASSERT_EQ(whole.size(), static_cast<size_t>(kTokens));
      for (int64_t k : streamed) {
        std::vector<int32_t> continued = prompt;
        continued.insert(continued.end(), whole.begin(), whole.begin() + k);
        ASSERT_LE(continued.size(), static_cast<size_t>(t->max_batch()));  // one forward pass
        o.max_new_tokens = kTokens - k;
        auto rest = gen.Generate(continued, o);
        ASSERT_TRUE(rest.ok()) << rest.status().ToString();
        EXPECT_EQ(rest->generated, std::vector<int32_t>(whole.begin() + k, whole.end()))
            << "Generator, continued after " << k << " tokens";
      }
    }
    // The serving engine: every continuation at once, so their prompts are prefilled in one
    // batch (prefill_chunk covers them) and they then decode together.
    auto t = f.MakeTransformer(static_cast<int64_t>(streamed.size()), /*context=*/256,
                               /*max_batch=*/256);
    ASSERT_NE(t, nullptr);
    BatchEngineOptions eo;
    eo.prefill_chunk = 256;
    eo.start_thread = false;
    auto engine = BatchEngine::Create(*t, *f.tokenizer, eo);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<std::shared_ptr<Completion>> cs;
    for (int64_t k : streamed) {
      std::vector<int32_t> continued = prompt;
      continued.insert(continued.end(), whole.begin(), whole.begin() + k);
      CompletionRequest r = Greedy(std::move(continued), kTokens - k);
      r.stop_at_eog = false;
      auto c = (*engine)->Submit(std::move(r));
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      cs.push_back(*c);
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      const CompletionOutput out = RunUntilDone(**engine, *cs[i]);
      std::vector<int32_t> ids;
      for (const GeneratedToken& tok : out.tokens) ids.push_back(tok.id);
      const int64_t k = streamed[i];
      EXPECT_EQ(ids, std::vector<int32_t>(whole.begin() + k, whole.end()))
          << "engine, continued after " << k << " tokens";
    }
  }
}

TEST(BatchEngineTest, ThreadedEngineServesConcurrentClients) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(OpenSynth(kernels::DType::kF32, &f));
  std::vector<std::vector<int32_t>> alone;
  {
    auto t = f.MakeTransformer(1);
    Generator gen(*t, *f.tokenizer);
    for (const std::string& p : kPrompts) {
      GenerateOptions o;
      o.max_new_tokens = 16;
      o.sampling.temperature = 0;
      auto r = gen.Generate(Encode(f, p), o);
      ASSERT_TRUE(r.ok());
      alone.push_back(r->generated);
    }
  }
  auto t = f.MakeTransformer(3);
  auto engine = BatchEngine::Create(*t, *f.tokenizer, {});
  ASSERT_TRUE(engine.ok());
  std::atomic<int> notified{0};
  std::vector<std::thread> clients;
  std::vector<std::vector<int32_t>> got(kPrompts.size());
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    clients.emplace_back([&, i] {
      auto c = (*engine)->Submit(Greedy(Encode(f, kPrompts[i]), 16), [&] { ++notified; });
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      ASSERT_TRUE((*c)->WaitDone(60));
      CompletionOutput out;
      ASSERT_TRUE((*c)->Take(&out));
      for (const GeneratedToken& tok : out.tokens) got[i].push_back(tok.id);
    });
  }
  for (auto& th : clients) th.join();
  for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(got[i], alone[i]) << kPrompts[i];
  EXPECT_GT(notified.load(), 0);
  const EngineStats st = (*engine)->Stats();
  EXPECT_EQ(st.requests_finished, static_cast<int64_t>(kPrompts.size()));
  EXPECT_EQ(st.active, 0);
  EXPECT_EQ(st.queued, 0);
}

class ManualEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(OpenSynth(kernels::DType::kF32, &f_)); }
  std::unique_ptr<BatchEngine> Make(int64_t n_slots, int64_t max_queue = 8, int64_t context = 0) {
    transformer_ = f_.MakeTransformer(n_slots, context);
    BatchEngineOptions o;
    o.start_thread = false;
    o.max_queue = max_queue;
    auto e = BatchEngine::Create(*transformer_, *f_.tokenizer, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }
  Fixture f_;
  std::unique_ptr<model::Transformer> transformer_;
};

TEST_F(ManualEngineTest, StopStringEndsTheTextBeforeIt) {
  auto engine = Make(1);
  auto c = engine->Submit(Greedy(Encode(f_, "Once upon a time"), 40));
  ASSERT_TRUE(c.ok());
  const CompletionOutput full = RunUntilDone(*engine, **c);
  ASSERT_GE(full.text.size(), 12u) << full.text;
  // A stop string taken from the middle of the unstopped text (it may span several tokens).
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  const size_t first = full.text.find(stop);
  CompletionRequest r = Greedy(Encode(f_, "Once upon a time"), 40);
  r.stop = {"\x01never", stop};
  auto c2 = engine->Submit(std::move(r));
  ASSERT_TRUE(c2.ok());
  const CompletionOutput out = RunUntilDone(*engine, **c2);
  EXPECT_EQ(out.finish, CompletionFinish::kStopString);
  EXPECT_EQ(out.text, full.text.substr(0, first));
  EXPECT_EQ(FinishReasonForApi(out.finish), "stop");
}

TEST_F(ManualEngineTest, MaxTokensAndContextEndGeneration) {
  auto engine = Make(1, 8, /*context=*/12);
  const std::vector<int32_t> prompt = Encode(f_, "Once upon a time");
  ASSERT_LT(prompt.size(), 12u);
  CompletionRequest r = Greedy(prompt, 3);
  r.stop_at_eog = false;
  auto c = engine->Submit(r);
  ASSERT_TRUE(c.ok());
  CompletionOutput out = RunUntilDone(*engine, **c);
  EXPECT_EQ(out.finish, CompletionFinish::kLength);
  EXPECT_EQ(out.completion_tokens, 3);
  EXPECT_EQ(out.tokens.size(), 3u);

  r.max_tokens = 1000;
  auto c2 = engine->Submit(r);
  ASSERT_TRUE(c2.ok());
  out = RunUntilDone(*engine, **c2);
  EXPECT_EQ(out.finish, CompletionFinish::kContextFull);
  // Positions 0..11 hold the prompt and all generated tokens but the last, which is sampled from
  // the logits at position 11.
  EXPECT_EQ(out.completion_tokens, 12 - static_cast<int64_t>(prompt.size()) + 1);
  EXPECT_EQ(FinishReasonForApi(out.finish), "length");
}

TEST_F(ManualEngineTest, CancelFreesTheSlotForTheNextRequest) {
  auto engine = Make(1);
  auto a = engine->Submit(Greedy(Encode(f_, "Once upon a time"), 1000));
  auto b = engine->Submit(Greedy(Encode(f_, "The cat sat"), 4));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 5; ++i) engine->Step();
  EXPECT_EQ(engine->Stats().active, 1);
  EXPECT_EQ(engine->Stats().queued, 1);
  CompletionOutput out;
  EXPECT_FALSE((*b)->Take(&out));
  (*a)->Cancel();
  engine->Step();  // frees a's slot and admits b in the same step
  EXPECT_EQ(engine->Stats().queued, 0);
  CompletionOutput a_out;
  ASSERT_TRUE((*a)->Take(&a_out));
  EXPECT_EQ(a_out.finish, CompletionFinish::kCancelled);
  EXPECT_EQ(FinishReasonForApi(a_out.finish), "cancelled");
  const CompletionOutput b_out = RunUntilDone(*engine, **b);
  EXPECT_TRUE(b_out.done);
  EXPECT_EQ(b_out.completion_tokens, 4);
}

TEST_F(ManualEngineTest, FullQueueRefusesWithResourceExhausted) {
  auto engine = Make(1, /*max_queue=*/1);
  auto a = engine->Submit(Greedy(Encode(f_, "Once"), 100));
  ASSERT_TRUE(a.ok());
  engine->Step();  // a takes the slot
  auto b = engine->Submit(Greedy(Encode(f_, "Once"), 100));
  ASSERT_TRUE(b.ok());  // waits
  auto c = engine->Submit(Greedy(Encode(f_, "Once"), 100));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("queue limit 1"), std::string::npos) << c.status().message();
  // A waiting request whose client left no longer holds its place.
  (*b)->Cancel();
  auto d = engine->Submit(Greedy(Encode(f_, "Once"), 100));
  EXPECT_TRUE(d.ok()) << d.status().ToString();
}

TEST_F(ManualEngineTest, RejectsBadRequests) {
  auto engine = Make(1, 8, /*context=*/16);
  auto code = [&](CompletionRequest r) {
    auto c = engine->Submit(std::move(r));
    return c.ok() ? StatusCode::kOk : c.status().code();
  };
  EXPECT_EQ(code(Greedy({}, 4)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Greedy(std::vector<int32_t>(16, 5), 4)), StatusCode::kOutOfRange);
  EXPECT_EQ(code(Greedy({1, 512}, 4)), StatusCode::kOutOfRange);
  EXPECT_EQ(code(Greedy({1, -1}, 4)), StatusCode::kOutOfRange);
  EXPECT_EQ(code(Greedy({1, 5}, 0)), StatusCode::kInvalidArgument);
  CompletionRequest r = Greedy({1, 5}, 4);
  r.sampling.temperature = 1;
  r.sampling.top_p = 2;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r = Greedy({1, 5}, 4);
  r.stop = {""};
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r.stop = std::vector<std::string>(kMaxStopStrings + 1, "x");
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r = Greedy({1, 5}, 4);
  r.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Stats().queued, 0);
}

TEST_F(ManualEngineTest, LogprobsDescribeTheChosenTokenAndTheLikeliestOthers) {
  auto engine = Make(1);
  CompletionRequest r = Greedy(Encode(f_, "Once upon a time"), 8);
  r.top_logprobs = 5;
  auto c = engine->Submit(r);
  ASSERT_TRUE(c.ok());
  const CompletionOutput out = RunUntilDone(*engine, **c);
  ASSERT_FALSE(out.tokens.empty());
  for (const GeneratedToken& tok : out.tokens) {
    ASSERT_EQ(tok.n_top, 5);
    EXPECT_EQ(tok.top[0].id, tok.id);  // greedy picks the most likely token
    EXPECT_FLOAT_EQ(tok.top[0].logprob, tok.logprob);
    EXPECT_LE(tok.logprob, 0.0f);
    double mass = 0;
    for (int i = 0; i < tok.n_top; ++i) {
      mass += std::exp(static_cast<double>(tok.top[i].logprob));
      if (i > 0) {
        EXPECT_LE(tok.top[i].logprob, tok.top[i - 1].logprob);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
  // Without the request, no log-probabilities are computed.
  auto c2 = engine->Submit(Greedy(Encode(f_, "Once upon a time"), 2));
  ASSERT_TRUE(c2.ok());
  const CompletionOutput plain = RunUntilDone(*engine, **c2);
  ASSERT_FALSE(plain.tokens.empty());
  EXPECT_EQ(plain.tokens[0].n_top, 0);
  EXPECT_EQ(plain.tokens[0].logprob, 0.0f);
}

TEST_F(ManualEngineTest, ForcedTokensAreScoredAsTheGenerationWouldHaveBeen) {
  auto engine = Make(1);
  // The greedy run, with log-probabilities.
  CompletionRequest g = Greedy(Encode(f_, "Once upon a time"), 12);
  g.top_logprobs = 1;
  auto c = engine->Submit(g);
  ASSERT_TRUE(c.ok());
  const CompletionOutput greedy = RunUntilDone(*engine, **c);
  ASSERT_EQ(greedy.tokens.size(), 12u);
  // Scoring its tokens gives the same tokens and the same log-probabilities, bit for bit.
  CompletionRequest score = g;
  for (const GeneratedToken& t : greedy.tokens) score.forced.push_back(t.id);
  auto s = engine->Submit(score);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const CompletionOutput scored = RunUntilDone(*engine, **s);
  ASSERT_EQ(scored.tokens.size(), greedy.tokens.size());
  for (size_t i = 0; i < scored.tokens.size(); ++i) {
    EXPECT_EQ(scored.tokens[i].id, greedy.tokens[i].id);
    EXPECT_EQ(scored.tokens[i].logprob, greedy.tokens[i].logprob);
    EXPECT_EQ(scored.tokens[i].top[0].logprob, greedy.tokens[i].top[0].logprob);
  }
  // Other tokens are taken as they are, each scored below the likeliest one, even at a
  // temperature that would sample (the sampler is not asked) and past end-of-text.
  CompletionRequest other = g;
  other.sampling.temperature = 1;
  other.stop_at_eog = false;
  other.forced = {7, 300, 2, 9};
  other.max_tokens = 4;
  auto o = engine->Submit(other);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  const CompletionOutput forced = RunUntilDone(*engine, **o);
  ASSERT_EQ(forced.tokens.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(forced.tokens[i].id, other.forced[i]);
    EXPECT_LE(forced.tokens[i].logprob, forced.tokens[i].top[0].logprob);
  }
  // Forced ids are checked like the prompt's, and max_tokens may not exceed them.
  other.forced = {1, 512};
  other.max_tokens = 2;
  EXPECT_EQ(engine->Submit(other).status().code(), StatusCode::kOutOfRange);
  other.forced = {1, 5};
  other.max_tokens = 3;
  EXPECT_EQ(engine->Submit(other).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ManualEngineTest, StopFinishesQueuedAndRunningRequests) {
  auto engine = Make(1);
  auto a = engine->Submit(Greedy(Encode(f_, "Once"), 100));
  auto b = engine->Submit(Greedy(Encode(f_, "Once"), 100));
  ASSERT_TRUE(a.ok() && b.ok());
  engine->Step();
  engine->Stop();
  for (Completion* c : {a->get(), b->get()}) {
    CompletionOutput out;
    ASSERT_TRUE(c->Take(&out));
    EXPECT_EQ(out.finish, CompletionFinish::kError);
    EXPECT_EQ(out.error.code(), StatusCode::kUnavailable);
  }
  auto late = engine->Submit(Greedy(Encode(f_, "Once"), 1));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
}

TEST_F(ManualEngineTest, DecodeStepsDoNotAllocate) {
  auto engine = Make(2);
  CompletionRequest r = Greedy(Encode(f_, "Once upon a time"), 200);
  r.stop_at_eog = false;
  r.stop = {"\x01\x02"};
  r.top_logprobs = 2;
  auto a = engine->Submit(r);
  r.prompt = Encode(f_, "The cat");
  auto b = engine->Submit(r);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 8; ++i) engine->Step();  // prompts done, buffers grown
  ASSERT_EQ(engine->Stats().active, 2);
  g_allocations = 0;
  g_count_allocations = true;
  for (int i = 0; i < 32; ++i) engine->Step();
  g_count_allocations = false;
  EXPECT_EQ(g_allocations, 0);
  CompletionOutput out;
  (*a)->Take(&out);
  EXPECT_GE(out.completion_tokens, 32);
}

}  // namespace
}  // namespace loom::engine
