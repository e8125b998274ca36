#include "loom/serve/server.h"

#include <boost/asio/post.hpp>
#include <ctime>
#include <exception>

#include "loom/base/clock.h"
#include "loom/serve/api_error.h"

namespace loom::serve {

StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options,
                                                 engine::BatchEngine& engine,
                                                 const text::Tokenizer& tokenizer,
                                                 const model::TokenizerSpec& spec) {
  if (options.model_id.empty()) return InvalidArgumentError("serve: the model needs a name");
  std::unique_ptr<Server> s(new Server(options));
  s->ctx_.engine = &engine;
  s->ctx_.tokenizer = &tokenizer;
  s->ctx_.tokenizer_spec = &spec;
  s->ctx_.model_id = options.model_id;
  s->ctx_.created = static_cast<int64_t>(std::time(nullptr));
  s->ctx_.metrics = &s->metrics_;
  s->ctx_.wakes = WakeQueue::Create(s->io_);
  AddCompletionRoutes(s->router_, s->ctx_);
  AddChatRoutes(s->router_, s->ctx_);
  AddModelRoutes(s->router_, s->ctx_);
  AddHealthRoutes(s->router_, s->ctx_);
  AddStaticRoutes(s->router_);
  Server* self = s.get();
  auto http = net::HttpServer::Start(
      s->io_, options.http,
      [self](net::Request request, std::shared_ptr<net::Responder> responder) {
        self->Handle(std::move(request), std::move(responder));
      },
      /*upgrade=*/nullptr);
  if (!http.ok()) return http.status().WithContext("serve");
  s->http_ = std::move(*http);
  s->ctx_.http = s->http_.get();
  return s;
}

void Server::Handle(net::Request request, std::shared_ptr<net::Responder> responder) {
  auto exchange = std::make_shared<Exchange>(std::move(request), std::move(responder));
  // The callback holds the exchange until the net layer runs and releases it: when the response
  // is written, or the connection closes first (at the latest when the server stops).
  exchange->SetOnDone([this, exchange](bool completed) {
    // 499 (as nginx logs it): the client closed the connection before the response ended.
    metrics_.CountRequest(exchange->route(), completed ? exchange->status() : 499,
                          base::NowSeconds() - exchange->received_at());
  });
  try {
    router_.Handle(exchange);
  } catch (const std::exception& e) {
    // Handlers report expected failures as responses; this is a bug, not a client error.
    ApiError error;
    error.status = 500;
    error.type = "server_error";
    error.message = std::string("internal error: ") + e.what();
    RespondError(*exchange, error);
  }
}

void Server::Start() {
  if (thread_.joinable() || stopped_) return;
  thread_ = std::thread([this] { io_.run(); });
}

void Server::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    // The io_context runs out of work once the server's connections are closed.
    boost::asio::post(io_, [this] { http_->Stop(); });
    thread_.join();
  } else {
    http_->Stop();
  }
  ctx_.wakes->Close();
}

Server::~Server() {
  if (http_ != nullptr) Stop();
}

}  // namespace loom::serve
