#include "loom/serve/server.h"

#include <ctime>

#include "loom/base/clock.h"

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
  AddCompletionRoutes(s->router_, s->ctx_);
  AddChatRoutes(s->router_, s->ctx_);
  AddModelRoutes(s->router_, s->ctx_);
  AddHealthRoutes(s->router_, s->ctx_);
  AddStaticRoutes(s->router_);
  Server* self = s.get();
  LOOM_ASSIGN_OR_RETURN(
      s->http_,
      HttpServer::Create(
          options.http, [self](const std::shared_ptr<Exchange>& ex) { self->router_.Handle(ex); },
          [self](const Exchange& ex, bool completed) {
            // 499 (as nginx logs it): the client closed the connection before the response ended.
            self->metrics_.CountRequest(ex.route(), completed ? ex.status() : 499,
                                        base::NowSeconds() - ex.received_at());
          }));
  s->ctx_.http = s->http_.get();
  return s;
}

Server::~Server() {
  if (http_ != nullptr) http_->Stop();
}

}  // namespace loom::serve
