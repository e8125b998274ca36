// The whole server in one process over loopback sockets, on a synthetic model held in memory:
// completions equal the single-sequence Generator's, streamed chat chunks add up to the
// non-streamed reply, keys are checked, a client that leaves frees its slot, a full queue answers
// 503 with Retry-After, Stop() ends running streams, the transport's own refusals reach /metrics,
// and the same over TLS.  (tests/serve runs the real binary with the official OpenAI client.)
#include "loom/serve/server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "loom/engine/generator.h"
#include "loom/model/synth.h"
#include "loom/model/transformer.h"
#include "loom/net/http_client.h"
#include "loom/net/net_testing.h"
#include "loom/net/tls.h"
#include "loom/text/tokenizer_loader.h"

namespace loom::serve {
namespace {

using json = nlohmann::json;
using net::testing::BodyOf;
using net::testing::RawClient;
using net::testing::StatusOf;
using net::testing::Unchunk;

std::string Post(std::string_view path, std::string_view body,
                 std::string_view extra_headers = "") {
  return "POST " + std::string(path) +
         " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
         std::string(extra_headers) + "Content-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + std::string(body);
}

std::string Get(std::string_view path, std::string_view extra_headers = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: t\r\n" + std::string(extra_headers) +
         "\r\n";
}

// Slows every forward pass down, so that a test can act while a completion is still running.
class SlowForward : public model::ForwardPass {
 public:
  explicit SlowForward(model::ForwardPass& inner) : inner_(inner) {}
  Status Forward(const model::Batch& batch, float* logits) override {
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    return inner_.Forward(batch, logits);
  }
  const model::HParams& hparams() const override { return inner_.hparams(); }
  int64_t context() const override { return inner_.context(); }
  int64_t max_batch() const override { return inner_.max_batch(); }
  int64_t n_slots() const override { return inner_.n_slots(); }
  std::atomic<int> delay_ms{0};

 private:
  model::ForwardPass& inner_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model::SynthOptions options;
    options.shape = *model::FindSynthShape("tiny");
    options.type = kernels::DType::kQ8_0;
    options.threads = 1;
    ASSERT_TRUE(model::WriteSynthModelToMemory(options, &bytes_).ok());
    auto file = model::OpenModelFromBytes(bytes_, "tiny");
    ASSERT_TRUE(file.ok());
    file_ = std::move(*file);
    auto tok = text::LoadTokenizerForModel(*file_, "");
    ASSERT_TRUE(tok.ok());
    tokenizer_ = std::move(*tok);
    auto w = model::BindWeights(*file_);
    ASSERT_TRUE(w.ok());
    weights_ = std::make_unique<model::TransformerWeights>(std::move(*w));
    pool_ = std::make_unique<base::ThreadPool>(2);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (engine_) engine_->Stop();
  }

  void StartServer(int64_t n_slots, int64_t max_queue = 8, std::string api_key = "",
                   std::shared_ptr<boost::asio::ssl::context> tls = nullptr) {
    model::TransformerOptions t;
    t.n_slots = n_slots;
    t.max_batch = 64;
    auto tr = model::Transformer::Create(*weights_, t, *pool_);
    ASSERT_TRUE(tr.ok());
    transformer_ = std::move(*tr);
    slow_ = std::make_unique<SlowForward>(*transformer_);
    engine::BatchEngineOptions eo;
    eo.max_queue = max_queue;
    auto e = engine::BatchEngine::Create(*slow_, *tokenizer_, eo);
    ASSERT_TRUE(e.ok());
    engine_ = std::move(*e);
    ServerOptions so;
    so.http.host = "127.0.0.1";
    so.http.port = 0;
    so.http.tls = std::move(tls);
    so.model_id = "tiny";
    so.api_key = std::move(api_key);
    auto s = Server::Create(so, *engine_, *tokenizer_, file_->tokenizer);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    server_->Start();
  }

  // One request on a fresh connection; returns the raw response.
  std::string Ask(const std::string& request) {
    RawClient c(server_->port());
    EXPECT_TRUE(c.Send(request));
    return c.ReadResponse(30);
  }

  engine::GenerationResult Alone(const std::string& prompt, int64_t n) {
    auto t = model::Transformer::Create(*weights_, {}, *pool_);
    engine::Generator gen(**t, *tokenizer_);
    engine::GenerateOptions o;
    o.max_new_tokens = n;
    o.sampling.temperature = 0;
    auto ids = tokenizer_->Encode(prompt, tokenizer_->add_bos_default());
    auto r = gen.Generate(*ids, o);
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }

  std::vector<std::byte> bytes_;
  std::unique_ptr<model::ModelFile> file_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<model::TransformerWeights> weights_;
  std::unique_ptr<base::ThreadPool> pool_;
  std::unique_ptr<model::Transformer> transformer_;
  std::unique_ptr<SlowForward> slow_;
  std::unique_ptr<engine::BatchEngine> engine_;
  std::unique_ptr<Server> server_;
};

// Parses an SSE body into its data payloads.
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t start = body.find("data: ", pos);
    if (start == std::string::npos) break;
    const size_t end = body.find("\n\n", start);
    out.push_back(body.substr(start + 6, end - start - 6));
    pos = end;
  }
  return out;
}

TEST_F(ServerTest, GreedyCompletionEqualsTheGenerator) {
  StartServer(2);
  const engine::GenerationResult want = Alone("Once upon a time", 20);
  const std::string r =
      Ask(Post("/v1/completions", R"({"model": "tiny", "prompt": "Once upon a time",
      "max_tokens": 20, "temperature": 0, "logprobs": 2})"));
  ASSERT_EQ(StatusOf(r), 200) << r;
  const json j = json::parse(BodyOf(r));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], want.text);
  EXPECT_EQ(j["usage"]["completion_tokens"], want.generated.size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], want.timings.prompt_tokens);
  EXPECT_EQ(j["usage"]["total_tokens"], want.timings.prompt_tokens + want.generated.size());
  EXPECT_EQ(j["choices"][0]["finish_reason"],
            want.finish == engine::FinishReason::kEndOfText ? "stop" : "length");
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), want.generated.size());
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  std::string joined;
  for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, want.text);
}

TEST_F(ServerTest, StreamedChatAddsUpToTheWholeReply) {
  StartServer(2);
  const std::string chat = R"("model": "tiny", "messages": [{"role": "user", "content": "The cat"}],
      "max_tokens": 16, "temperature": 0)";
  const std::string whole = Ask(Post("/v1/chat/completions", "{" + chat + "}"));
  ASSERT_EQ(StatusOf(whole), 200) << whole;
  const json w = json::parse(BodyOf(whole));
  EXPECT_EQ(w["object"], "chat.completion");
  EXPECT_EQ(w["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(w["choices"][0]["message"]["content"], Alone("The cat", 16).text);

  const std::string streamed =
      Ask(Post("/v1/chat/completions",
               "{" + chat + R"(, "stream": true, "stream_options": {"include_usage": true}})"));
  ASSERT_EQ(StatusOf(streamed), 200) << streamed;
  EXPECT_NE(streamed.find("Content-Type: text/event-stream"), std::string::npos);
  const std::vector<std::string> events = Events(Unchunk(BodyOf(streamed)));
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events.front());
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], first["id"]);
    EXPECT_TRUE(c["usage"].is_null());
    const json& choice = c["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(text, w["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, w["choices"][0]["finish_reason"]);
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], w["usage"]);
}

TEST_F(ServerTest, ApiKeyGuardsTheApiButNotThePageOrHealth) {
  StartServer(1, 8, "sk-test");
  EXPECT_EQ(StatusOf(Ask(Get("/v1/models"))), 401);
  const std::string wrong = Ask(Get("/v1/models", "Authorization: Bearer sk-nope\r\n"));
  EXPECT_EQ(StatusOf(wrong), 401);
  EXPECT_EQ(json::parse(BodyOf(wrong))["error"]["code"], "invalid_api_key");
  EXPECT_EQ(StatusOf(Ask(Get("/metrics"))), 401);
  const std::string ok = Ask(Get("/v1/models", "Authorization: Bearer sk-test\r\n"));
  ASSERT_EQ(StatusOf(ok), 200);
  EXPECT_EQ(json::parse(BodyOf(ok))["data"][0]["id"], "tiny");
  EXPECT_EQ(StatusOf(Ask(Get("/health"))), 200);
  const std::string page = Ask(Get("/"));
  EXPECT_EQ(StatusOf(page), 200);
  EXPECT_NE(page.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(page.find("/app.js"), std::string::npos);
  EXPECT_EQ(StatusOf(Ask(Get("/app.js"))), 200);
  EXPECT_EQ(StatusOf(Ask(Get("/style.css"))), 200);
}

TEST_F(ServerTest, AClientThatLeavesMidStreamFreesItsSlot) {
  StartServer(1);
  slow_->delay_ms = 20;
  {
    RawClient c(server_->port());
    ASSERT_TRUE(c.Send(Post("/v1/completions", R"({"model": "tiny", "prompt": "Once",
        "max_tokens": 400, "ignore_eos": true, "stream": true})")));
    std::string first;
    ASSERT_TRUE(c.ReadUntil(&first, "data: {", 10)) << first;
    EXPECT_EQ(engine_->Stats().active, 1);
  }
  for (int i = 0; i < 200 && engine_->Stats().active != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_->Stats().active, 0);
  EXPECT_EQ(engine_->Stats().requests_cancelled, 1);
  slow_->delay_ms = 0;
  const std::string r =
      Ask(Post("/v1/completions", R"({"model": "tiny", "prompt": "Once", "max_tokens": 3})"));
  EXPECT_EQ(StatusOf(r), 200);
  const std::string metrics = BodyOf(Ask(Get("/metrics")));
  EXPECT_NE(metrics.find("loom_requests_cancelled_total 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("loom_http_requests_total{route=\"/v1/completions\",code=\"499\"} 1"),
            std::string::npos)
      << metrics;
}

TEST_F(ServerTest, AFullQueueAnswers503WithRetryAfter) {
  StartServer(1, /*max_queue=*/1);
  slow_->delay_ms = 20;
  const std::string long_request = Post("/v1/completions", R"({"model": "tiny", "prompt": "Once",
      "max_tokens": 200, "ignore_eos": true, "stream": true})");
  RawClient running(server_->port());
  ASSERT_TRUE(running.Send(long_request));
  std::string head;
  ASSERT_TRUE(running.ReadUntil(&head, "data: {", 10));  // holds the slot
  RawClient waiting(server_->port());
  ASSERT_TRUE(waiting.Send(long_request));
  for (int i = 0; i < 200 && engine_->Stats().queued != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(engine_->Stats().queued, 1);
  const std::string refused = Ask(long_request);
  EXPECT_EQ(StatusOf(refused), 503) << refused;
  EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos);
  const json e = json::parse(BodyOf(refused));
  EXPECT_EQ(e["error"]["code"], "server_busy");
  EXPECT_EQ(e["error"]["type"], "server_error");
}

TEST_F(ServerTest, BadRequestsGetOpenAiShapedErrors) {
  StartServer(1);
  struct Case {
    std::string request;
    int status;
    std::string param;  // "" = null
    std::string code;
  };
  const std::vector<Case> cases = {
      {Post("/v1/chat/completions", "{nope"), 400, "", "invalid_json"},
      {Post("/v1/chat/completions",
            R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})"),
       404, "model", "model_not_found"},
      {Post("/v1/completions", R"({"model": "tiny", "prompt": "x", "max_tokens": 100000})"), 400,
       "max_tokens", "invalid_value"},
      {Post("/v1/completions", R"({"model": "tiny", "prompt": ")" + std::string(3000, 'a') + "\"}"),
       400, "prompt", "context_length_exceeded"},
      {Post("/v1/completions", R"({"model": "tiny", "prompt": [1, 100000]})"), 400, "prompt", ""},
      {Post("/v1/completions", R"({"model": "tiny", "prompt": "x", "temperature": "warm"})"), 400,
       "temperature", "invalid_type"},
      {Get("/v1/chat/completions"), 405, "", "method_not_allowed"},
      {Get("/v1/nothing"), 404, "", "unknown_url"},
      {Get("/v1/models/gpt-4"), 404, "model", "model_not_found"},
  };
  for (const Case& c : cases) {
    const std::string r = Ask(c.request);
    EXPECT_EQ(StatusOf(r), c.status) << c.request << "\n" << r;
    const json j = json::parse(BodyOf(r), nullptr, false);
    ASSERT_TRUE(j.is_object()) << r;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string());
    EXPECT_TRUE(e["type"].is_string());
    EXPECT_EQ(e["param"], c.param.empty() ? json(nullptr) : json(c.param)) << c.request;
    if (!c.code.empty()) {
      EXPECT_EQ(e["code"], c.code) << c.request;
    }
  }
  EXPECT_EQ(StatusOf(Ask(Get("/v1/models/tiny"))), 200);
  EXPECT_EQ(engine_->Stats().active, 0);
}

TEST_F(ServerTest, StopEndsRunningStreamsAndCancelsTheirCompletions) {
  StartServer(1);
  slow_->delay_ms = 20;
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Post("/v1/completions", R"({"model": "tiny", "prompt": "Once",
      "max_tokens": 400, "ignore_eos": true, "stream": true})")));
  std::string got;
  ASSERT_TRUE(c.ReadUntil(&got, "data: {", 10)) << got;
  server_->Stop();
  c.ReadUntilClose(5);
  EXPECT_TRUE(c.eof());
  for (int i = 0; i < 200 && engine_->Stats().active != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_->Stats().active, 0);
  EXPECT_EQ(engine_->Stats().requests_cancelled, 1);
  server_->Stop();  // idempotent
}

TEST_F(ServerTest, TheTransportsOwnRefusalsReachTheMetrics) {
  StartServer(1);
  RawClient bad(server_->port());
  ASSERT_TRUE(bad.Send("GET / HTTP/1.1\r\nBad Header\r\n\r\n"));
  const std::string r = bad.ReadUntilClose(5);
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_EQ(json::parse(BodyOf(r))["error"]["code"], "bad_request");
  EXPECT_EQ(StatusOf(Ask(Get("/nowhere"))), 404);
  const std::string metrics = BodyOf(Ask(Get("/metrics")));
  EXPECT_NE(metrics.find("loom_http_bad_requests_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("loom_http_requests_total{route=\"unknown\",code=\"404\"} 1\n"),
            std::string::npos)
      << metrics;
}

TEST_F(ServerTest, ServesStreamsOverTls) {
  net::testing::TempDir dir;
  const std::string cert = dir.File("cert.pem"), key = dir.File("key.pem");
  ASSERT_TRUE(net::testing::MakeSelfSignedCert(cert, key)) << "the openssl CLI failed";
  auto server_tls = net::MakeServerTls(cert, key);
  ASSERT_TRUE(server_tls.ok()) << server_tls.status().ToString();
  StartServer(2, 8, "", *server_tls);
  auto client_tls = net::MakeClientTls(cert);
  ASSERT_TRUE(client_tls.ok()) << client_tls.status().ToString();
  net::ClientRequest request;
  request.method = "POST";
  request.url = *net::ParseUrl("https://127.0.0.1:" + std::to_string(server_->port()) +
                               "/v1/completions");
  request.headers = {{"Content-Type", "application/json"}};
  request.body = R"({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 12,
      "temperature": 0, "stream": true})";
  auto r = net::Fetch(request, *client_tls);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  const std::vector<std::string> events = Events(r->body);
  ASSERT_GE(events.size(), 2u) << r->body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, Alone("Once upon a time", 12).text);
  // Plain HTTP to the TLS port gets no HTTP answer.
  RawClient plain(server_->port());
  ASSERT_TRUE(plain.Send(Get("/health")));
  EXPECT_EQ(plain.ReadUntilClose(5).find("HTTP/1.1"), std::string::npos);
}

}  // namespace
}  // namespace loom::serve
