// One request to `loom serve` and its answer: net's Responder with what the routes and the metrics
// need besides (the request, the route label, the status sent).  Everything runs on the thread of
// the io_context that serves HTTP (the route handlers, and the completions' pumps woken through a
// WakeQueue), so an Exchange needs no lock.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "loom/net/http_server.h"

namespace loom::serve {

class Exchange {
 public:
  Exchange(net::Request request, std::shared_ptr<net::Responder> responder)
      : request_(std::move(request)), responder_(std::move(responder)) {}

  const net::Request& request() const { return request_; }
  double received_at() const { return request_.received_at; }  // base::NowSeconds(), head arrived

  // A whole response.  Only the first Respond()/BeginStream() counts; later calls are ignored.
  void Respond(int status, std::string_view content_type, std::string body,
               net::Headers headers = {});
  // A streamed (chunked) response: BeginStream, Send as often as needed, End.
  void BeginStream(int status, std::string_view content_type, net::Headers headers = {});
  void Send(std::string data) { responder_->Send(std::move(data)); }
  void End() { responder_->End(); }

  // Whether the client went away (or the server is stopping) before the response ended.
  bool closed() const { return responder_->closed(); }
  // The status of the response, 0 before one was started.
  int status() const { return status_; }
  // A label for metrics (the route pattern, not the raw path).
  void SetRoute(std::string_view route) { route_ = std::string(route); }
  const std::string& route() const { return route_; }
  // Runs `on_close` once if the connection closes before the response ended (at once when it
  // already has).
  void SetOnClose(std::function<void()> on_close) { responder_->OnClose(std::move(on_close)); }
  // See net::Responder::OnDone.
  void SetOnDone(std::function<void(bool completed)> on_done) {
    responder_->OnDone(std::move(on_done));
  }

 private:
  const net::Request request_;
  const std::shared_ptr<net::Responder> responder_;
  int status_ = 0;
  std::string route_;
};

}  // namespace loom::serve
