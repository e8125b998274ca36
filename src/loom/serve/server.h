// `loom serve`'s server: the OpenAI-compatible API, /health, /metrics and the chat page over net's
// HTTP server (plain or TLS), in front of a BatchEngine.  The engine (and the ForwardPass under
// it) is built by the caller, so that a pod's distributed forward pass can stand where a local
// Transformer does.
//
// Threads: one thread of the server's own runs its io_context: the HTTP server, every route
// handler and every completion's pump.  The engine's thread hands new output to it through a
// WakeQueue (without allocating); nothing else crosses threads.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>

#include "loom/base/status.h"
#include "loom/engine/batch_engine.h"
#include "loom/model/model_file.h"
#include "loom/net/http_server.h"
#include "loom/serve/metrics.h"
#include "loom/serve/router.h"
#include "loom/serve/routes.h"
#include "loom/serve/wake_queue.h"
#include "loom/text/tokenizer.h"

namespace loom::serve {

struct ServerOptions {
  net::ServerOptions http;  // host, port, TLS, size limits, timeouts, max_connections
  std::string api_key;      // "" = no key needed
  std::string model_id;     // the name clients pass as "model"
};

class Server {
 public:
  // `engine`, `tokenizer` and `spec` must outlive the server.  Binds the port; connections wait
  // in the listen queue until Start().
  static StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options,
                                                  engine::BatchEngine& engine,
                                                  const text::Tokenizer& tokenizer,
                                                  const model::TokenizerSpec& spec);
  ~Server();  // Stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return http_->port(); }
  // Serves on the server's thread.
  void Start();
  // Closes every connection (cancelling their completions) and joins the thread.  Idempotent;
  // call from one thread other than the server's.
  void Stop();

 private:
  explicit Server(const ServerOptions& options) : router_(options.api_key) {}
  void Handle(net::Request request, std::shared_ptr<net::Responder> responder);  // io thread

  boost::asio::io_context io_;
  ServeContext ctx_;
  Metrics metrics_;
  Router router_;
  std::unique_ptr<net::HttpServer> http_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace loom::serve
