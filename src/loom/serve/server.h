// `loom serve`'s server: the OpenAI-compatible API, /health, /metrics and the chat page over one
// HTTP server, in front of a BatchEngine.  The engine (and the ForwardPass under it) is built by
// the caller, so that a pod's distributed forward pass can stand where a local Transformer does.
#pragma once

#include <memory>
#include <string>

#include "loom/base/status.h"
#include "loom/engine/batch_engine.h"
#include "loom/model/model_file.h"
#include "loom/serve/http_server.h"
#include "loom/serve/metrics.h"
#include "loom/serve/router.h"
#include "loom/serve/routes.h"
#include "loom/text/tokenizer.h"

namespace loom::serve {

struct ServerOptions {
  HttpServerOptions http;
  std::string api_key;   // "" = no key needed
  std::string model_id;  // the name clients pass as "model"
};

class Server {
 public:
  // `engine`, `tokenizer` and `spec` must outlive the server.  Binds the port.
  static StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options,
                                                  engine::BatchEngine& engine,
                                                  const text::Tokenizer& tokenizer,
                                                  const model::TokenizerSpec& spec);
  ~Server();

  int port() const { return http_->port(); }
  void Start() { http_->Start(); }
  // Closes all connections (cancelling their completions) and stops the HTTP threads.
  void Stop() { http_->Stop(); }

 private:
  Server(const ServerOptions& options) : router_(options.api_key) {}

  ServeContext ctx_;
  Metrics metrics_;
  Router router_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace loom::serve
