#include "loom/serve/exchange.h"

namespace loom::serve {

void Exchange::Respond(int status, std::string_view content_type, std::string body,
                       net::Headers headers) {
  if (status_ != 0) return;
  status_ = status;
  responder_->Respond(status, content_type, std::move(body), std::move(headers));
}

void Exchange::BeginStream(int status, std::string_view content_type, net::Headers headers) {
  if (status_ != 0) return;
  status_ = status;
  responder_->BeginStream(status, content_type, std::move(headers));
}

}  // namespace loom::serve
