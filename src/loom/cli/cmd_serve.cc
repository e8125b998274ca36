// `loom serve`: an OpenAI-compatible HTTP server (chat and text completions, streaming, models,
// health, Prometheus metrics) with continuous batching and a web chat page at /, over plain HTTP
// or TLS.
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/cli/pod.h"
#include "loom/comm/config.h"
#include "loom/engine/batch_engine.h"
#include "loom/engine/loaded_model.h"
#include "loom/net/tls.h"
#include "loom/serve/server.h"

namespace loom::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::string tokenizer;
  std::string name;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string tls_cert;
  std::string tls_key;
  bool insecure = false;
  int64_t parallel = 4;
  int64_t context = 0;
  model::KvType kv_type = model::KvType::kF32;
  int64_t queue = 64;
  engine::WeightPlacement weights = engine::WeightPlacement::kAuto;
  int threads = 0;
  int64_t batch = 256;
  int64_t prefill_chunk = 64;
  double read_timeout = 10;
  int64_t max_body = 4 << 20;
  int64_t max_connections = 1024;
  PodFlags pod;
};

// The model the server runs: a ForwardPass with its tokenizer, either a local Transformer holding
// --parallel sequences or, with --tp/--pp, a pod driven from rank 0 (the only rank that serves
// HTTP; the others follow its steps in RunFollower).
struct ServeBackend {
  engine::LoadedModel local;
  std::unique_ptr<PodSession> pod;
  model::ForwardPass* forward = nullptr;
  const text::Tokenizer* tokenizer = nullptr;
  const model::TokenizerSpec* tokenizer_spec = nullptr;
  int threads = 0;
};

StatusOr<std::unique_ptr<ServeBackend>> OpenBackend(const ServeOptions& o) {
  engine::LoadOptions load;
  load.model_path = o.model;
  load.tokenizer_path = o.tokenizer;
  load.threads = o.threads;
  load.weights = o.weights;
  load.context = o.context;
  load.kv_type = o.kv_type;
  load.n_slots = o.parallel;
  load.max_batch = std::max(o.batch, o.parallel);  // every sequence decodes in each step
  auto b = std::make_unique<ServeBackend>();
  if (o.pod.distributed()) {
    LOOM_ASSIGN_OR_RETURN(b->pod, JoinPod(o.pod, load));
    const engine::LoadedModel& m = b->pod->model;
    b->forward = b->pod->driver.get();  // null on the following ranks
    b->tokenizer = m.tokenizer.get();
    b->tokenizer_spec = &m.file->tokenizer;
    b->threads = m.pool->size();
    return b;
  }
  LOOM_ASSIGN_OR_RETURN(b->local, engine::LoadModel(load));
  b->forward = b->local.transformer.get();
  b->tokenizer = b->local.tokenizer.get();
  b->tokenizer_spec = &b->local.file->tokenizer;
  b->threads = b->local.pool->size();
  return b;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]";
}

std::string ModelName(const ServeOptions& o) {
  if (!o.name.empty()) return o.name;
  return std::filesystem::path(o.model).stem().string();
}

// Beyond loopback the server needs TLS (else keys and prompts cross the network in the clear) and
// an API key (else anyone who reaches it may use it), unless --insecure says otherwise.  Returns
// why it refuses, "" when it does not.
std::string WhyRefused(const ServeOptions& o) {
  const bool tls = !o.tls_cert.empty();
  if (IsLoopback(o.host) || o.insecure || (tls && !o.api_key.empty())) return "";
  std::string missing;
  if (!tls) {
    missing += "TLS (--tls-cert FILE --tls-key FILE; without it API keys and prompts cross the "
               "network in the clear)";
  }
  if (o.api_key.empty()) {
    if (!missing.empty()) missing += " and ";
    missing += "--api-key KEY (clients send 'Authorization: Bearer KEY'; without it anyone who "
               "can reach the server may use it)";
  }
  return StrCat("refusing to listen on ", o.host,
                ", beyond this machine, without ", missing,
                ". Give them, or --insecure on a network you trust");
}

int RunServe(const ServeOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    std::fprintf(stderr, "loom serve: --tls-cert and --tls-key go together\n");
    return 2;
  }
  if (const std::string why = WhyRefused(o); !why.empty()) {
    std::fprintf(stderr, "loom serve: %s\n", why.c_str());
    return 2;
  }
  std::shared_ptr<boost::asio::ssl::context> tls;
  if (!o.tls_cert.empty()) {
    // Before the model loads: a wrong file fails at once.
    auto made = net::MakeServerTls(o.tls_cert, o.tls_key);
    if (!made.ok()) return Fail("serve", made.status());
    tls = *made;
  }
  if (NeedsSelfLaunch(o.pod)) return SelfLaunch(o.pod, "serve");
  // Signals are taken by sigwait() below: block them before any thread starts, so that every
  // thread inherits the mask and none is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Every client holds a descriptor: allow as many as the hard limit does (up to 65536).
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, 65536);
    setrlimit(RLIMIT_NOFILE, &files);
  }

  auto backend = OpenBackend(o);
  if (!backend.ok()) return Fail("serve", backend.status());
  ServeBackend& b = **backend;
  if (b.pod != nullptr && !b.pod->is_driver()) {
    // A following rank: runs rank 0's steps until it shuts the pod down (or fails).
    const Status st = parallel::RunFollower(b.pod->rank());
    return st.ok() ? 0 : Fail("serve", st.WithContext(StrCat("rank ", b.pod->world->rank())));
  }

  engine::BatchEngineOptions eo;
  eo.max_queue = o.queue;
  eo.prefill_chunk = o.prefill_chunk;
  if (b.pod != nullptr) {
    // The other ranks wait for each step with the group's deadline: ping well within it.
    auto config = comm::GroupConfigFromEnvironment();
    if (config.ok()) eo.keep_alive_seconds = std::min(5.0, config->options.timeout_seconds / 4);
  }
  auto engine = engine::BatchEngine::Create(*b.forward, *b.tokenizer, eo);
  if (!engine.ok()) return Fail("serve", engine.status());

  serve::ServerOptions so;
  so.http.host = o.host;
  so.http.port = o.port;
  so.http.tls = tls;
  so.http.read_timeout_s = o.read_timeout;
  so.http.max_body_bytes = o.max_body;
  so.http.max_connections = o.max_connections;
  so.api_key = o.api_key;
  so.model_id = ModelName(o);
  auto server = serve::Server::Create(so, **engine, *b.tokenizer, *b.tokenizer_spec);
  if (!server.ok()) return Fail("serve", server.status());
  (*server)->Start();

  const std::string host =
      o.host.find(':') != std::string::npos && o.host.front() != '[' ? "[" + o.host + "]" : o.host;
  const std::string pod =
      b.pod != nullptr ? StrCat(" per rank, ", o.pod.Describe()) : std::string();
  std::printf("loom serve: %s://%s:%d/ (model %s, %lld slots, context %lld, %d threads%s%s)\n",
              tls ? "https" : "http", host.c_str(), (*server)->port(), so.model_id.c_str(),
              static_cast<long long>(b.forward->n_slots()),
              static_cast<long long>(b.forward->context()), b.threads, pod.c_str(),
              o.api_key.empty() ? "" : ", API key required");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "loom serve: %s, stopping\n", sig == SIGINT ? "interrupted" : "terminated");
  (*server)->Stop();
  (*engine)->Stop();
  if (b.pod != nullptr) {
    const Status st = b.pod->driver->Shutdown();
    if (!st.ok()) return Fail("serve", st);
  }
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, Action* action) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* sub = app.add_subcommand(
      "serve",
      "Serve a model over HTTP (HTTPS with --tls-cert/--tls-key): OpenAI-compatible "
      "/v1/chat/completions, /v1/completions and "
      "/v1/models (streaming included), /health, /metrics, and a chat page at /");
  sub->add_option("-m,--model", o->model,
                  "Model: GGUF or llama2.c file, model directory, or a name in the cache")
      ->required();
  sub->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer file (default: the model's own, or tokenizer.bin beside a llama2.c "
                  "checkpoint)");
  sub->add_option("--model-name", o->name,
                  "Name clients pass as \"model\" (default: the file name without extension)");
  sub->add_option("--host", o->host,
                  "Address to listen on; anything but loopback needs TLS and --api-key, or "
                  "--insecure")
      ->capture_default_str();
  sub->add_option("--port", o->port, "TCP port; 0 picks a free one (printed when ready)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* and /metrics");
  sub->add_option("--tls-cert", o->tls_cert,
                  "PEM certificate chain (leaf first): serve HTTPS (HTTP/1.1 over TLS 1.2+)");
  sub->add_option("--tls-key", o->tls_key, "PEM private key of --tls-cert");
  sub->add_flag("--insecure", o->insecure,
                "Allow a non-loopback --host without TLS or without an API key (on a network you "
                "trust: others on it may read the traffic, or use the server)");
  sub->add_option("--parallel", o->parallel,
                  "Sequences generated at once (KV-cache slots); more requests wait in the queue")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sub->add_option("--ctx", o->context,
                  "Context length of each slot (default: the model's); KV memory grows with "
                  "--parallel x --ctx")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  sub->add_option("--queue", o->queue,
                  "Requests that may wait for a slot; beyond that the server answers 503 with "
                  "Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  AddWeightsFlag(*sub, o->weights);
  AddKvTypeFlag(*sub, o->kv_type);
  sub->add_option("--threads", o->threads, "Compute threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--batch", o->batch, "Tokens per forward pass (at least --parallel)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  sub->add_option("--prefill-chunk", o->prefill_chunk,
                  "Prompt tokens per step while other requests are generating (lower: steadier "
                  "generation for them, slower first token for new requests)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  sub->add_option("--read-timeout", o->read_timeout,
                  "Seconds a client may take to send a request, head and body, from its first "
                  "byte (slower: 408), and to finish the TLS handshake")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--max-body", o->max_body, "Largest request body in bytes (larger: 413)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  sub->add_option("--max-connections", o->max_connections,
                  "Connections open at once; beyond, a new one is closed at once (after a 503 with "
                  "Retry-After over plain HTTP)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  AddPodFlags(*sub, o->pod);
  sub->callback([o, action] { *action = [o] { return RunServe(*o); }; });
}

}  // namespace loom::cli
