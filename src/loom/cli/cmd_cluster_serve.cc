// `loom cluster serve -m MODEL [--tp T --pp P] [loom serve options...]`: an OpenAI-compatible
// endpoint in front of a pod the daemons start (as `loom cluster run` does, rank 0 a `loom serve`
// child on loopback).  When a member of the pod leaves (the daemon's view says so) or rank 0 dies,
// the pod is planned again on the members that are still up and started again, and every request
// in flight goes on as a continuation: a completion whose prompt is the request's prompt tokens
// plus the tokens already streamed, with the tokens left to generate and the same sampling — the
// client's stream just pauses.  Greedy output equals an uninterrupted run (the hub's failover
// does the same across nodes: docs/network.md).  One thread; (re)starting a pod blocks it.
#include <CLI/CLI.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/cli/cluster_common.h"
#include "loom/cli/common.h"
#include "loom/cluster/daemon.h"
#include "loom/net/http_client.h"
#include "loom/net/http_server.h"
#include "loom/net/url.h"

namespace loom::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kCarried[] = {"temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                    "ignore_eos", "repetition_penalty"};

struct ServeClusterOptions {
  std::string model, control, host = "127.0.0.1", api_key;
  int port = 8080, tp = 0, ep = 0, pp = 0;
  bool insecure = false;
  double wait_s = 60;
  PlanSpeeds speeds;
  std::vector<std::string> serve_args;  // the rest, for `loom serve`
};

// One client request, across the pods that serve it.
struct Job {
  uint64_t id = 0;
  bool chat = false, stream = false;
  json request;                     // as the client sent it
  std::shared_ptr<net::Responder> client;
  std::shared_ptr<net::ClientCall> call;
  std::string buffer;               // the internal stream, not yet split into events
  int status = 0;                   // of the current internal response
  std::string error_body;
  std::vector<int32_t> prompt_ids;  // as the first pod tokenized the prompt
  std::vector<int32_t> generated;   // every token streamed so far
  std::string text;                 // and its text
  std::string finish;
  std::string public_id;
  int64_t created = 0;
  int64_t max_tokens = 256;
  bool started = false;             // the client has its first byte
  bool done = false;
};

class Supervisor {
 public:
  Supervisor(boost::asio::io_context& io, const ServeClusterOptions& o)
      : io_(io), o_(o), tick_(io) {
    path_ = o.control.empty() ? cluster::DefaultControlPath() : o.control;
    std::random_device rd;
    key_ = std::to_string(rd()) + std::to_string(rd()) + std::to_string(rd());
  }

  Status Start() {
    LOOM_RETURN_IF_ERROR(StartPod());
    net::ServerOptions so;
    so.host = o_.host;
    so.port = o_.port;
    so.idle_timeout_s = 600;
    auto server = net::HttpServer::Start(
        io_, so, [this](net::Request r, std::shared_ptr<net::Responder> w) { Handle(r, w); },
        nullptr);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    std::fprintf(stderr, "loom cluster serve: listening on http://%s:%d\n", o_.host.c_str(),
                 server_->port());
    Tick();
    return OkStatus();
  }

  void Stop() {
    stopping_ = true;
    tick_.cancel();
    if (server_) server_->Stop();
    StopPod();
  }

 private:
  // ---- the pod ----

  Status StartPod() {
    LOOM_ASSIGN_OR_RETURN(json view, WaitForSettledView(path_, o_.wait_s));
    int tp = o_.tp, ep = o_.ep, pp = o_.pp;
    const int64_t given = static_cast<int64_t>(std::max(tp, 1)) * std::max(ep, 1) * std::max(pp, 1);
    if ((tp > 0 || ep > 0 || pp > 0) && given > static_cast<int64_t>(view["members"].size())) {
      tp = ep = pp = 0;  // the split given no longer fits the members up: plan one
    }
    LOOM_ASSIGN_OR_RETURN(PodChoice pod,
                          ChoosePod(o_.model, view, tp, ep, pp,
                                    speeds_.decode_gbs > 0 ? speeds_ : o_.speeds));
    // Re-plans reuse this machine's measured speeds (measuring takes seconds).
    if (pod.predicted > 0) speeds_ = pod.measured;
    const std::vector<std::string>& ids = pod.members;
    pod_members_ = std::set<std::string>(ids.begin(), ids.end());
    std::vector<std::string> args = {"serve"};
    args.insert(args.end(), o_.serve_args.begin(), o_.serve_args.end());
    args.insert(args.end(), {"-m", o_.model});
    for (std::string& a : pod.SplitArgs()) args.push_back(std::move(a));
    args.insert(args.end(), {"--host", "127.0.0.1", "--port", "0", "--api-key", key_});
    std::fprintf(stderr, "loom cluster serve: pod %d: %s on %s\n", ++generation_,
                 pod.Describe().c_str(), pod.names.c_str());
    auto rank0 = StartServeRankZero(path_, ids, args);
    if (!rank0.ok()) return rank0.status();
    pid_ = rank0->pid;
    internal_port_ = rank0->port;
    ready_ = true;
    std::fprintf(stderr, "loom cluster serve: pod %d ready\n", generation_);
    return OkStatus();
  }

  void StopPod() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGTERM);
      ::kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 50 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, WNOHANG);
    }
    pid_ = -1;
    ready_ = false;
  }

  // The pod failed: plan and start another on the members still up, then continue every request.
  void Replan(const std::string& why) {
    if (stopping_ || replanning_) return;
    replanning_ = true;
    std::fprintf(stderr, "loom cluster serve: pod %d %s (%s); planning again\n", generation_,
                 why == "rebalance requested" ? "ends" : "failed", why.c_str());
    const auto t0 = Clock::now();
    for (auto& [id, job] : jobs_) {
      if (job.call) job.call->Cancel();
      job.call.reset();
    }
    StopPod();
    Status s = StartPod();
    for (int attempt = 0; !s.ok() && attempt < 3 && !stopping_; ++attempt) {
      std::fprintf(stderr, "loom cluster serve: %s; trying again\n",
                   std::string(s.message()).c_str());
      std::this_thread::sleep_for(std::chrono::seconds(2));
      s = StartPod();
    }
    replanning_ = false;
    if (!s.ok()) {
      std::fprintf(stderr, "loom cluster serve: cannot serve: %s\n",
                   std::string(s.message()).c_str());
      for (auto& [id, job] : jobs_) Fail(job, 503, std::string(s.message()));
      jobs_.clear();
      return;
    }
    std::fprintf(stderr, "loom cluster serve: serving again after %.1f s\n",
                 std::chrono::duration<double>(Clock::now() - t0).count());
    std::vector<uint64_t> ids;
    for (auto& [id, job] : jobs_) ids.push_back(id);
    for (uint64_t id : ids) Forward(jobs_.at(id));
  }

  // Every 0.5 s: rank 0 still running, every member of the pod still up.
  void Tick() {
    tick_.expires_after(std::chrono::milliseconds(500));
    tick_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopping_) return;
      int status = 0;
      if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        Replan("rank 0 exited");
      } else if (auto v = cluster::QueryDaemon(path_, 2); v.ok()) {
        std::set<std::string> up;
        for (const json& m : (*v)["members"]) up.insert(m["id"].get<std::string>());
        for (const std::string& id : pod_members_) {
          if (!up.count(id)) {
            Replan("member " + id.substr(0, 8) + " left");
            break;
          }
        }
      }
      Tick();
    });
  }

  // ---- requests ----

  void Handle(const net::Request& r, const std::shared_ptr<net::Responder>& w) {
    if (!o_.api_key.empty() && r.Header("authorization") != "Bearer " + o_.api_key) {
      return w->Respond(401, "application/json", ErrorBody("invalid API key", "invalid_api_key"));
    }
    if (r.method == "POST" && r.path == "/cluster/rebalance") {
      // `loom cluster rebalance`: plan again with the members up now (a machine that joined is
      // folded in if the plan wants it); requests in flight continue on the new pod.
      Replan("rebalance requested");
      return w->Respond(ready_ ? 200 : 503, "application/json",
                        json{{"generation", generation_}, {"ready", ready_}}.dump());
    }
    const bool chat = r.path == "/v1/chat/completions";
    if (r.method != "POST" || (!chat && r.path != "/v1/completions")) {
      if (r.method == "GET" && r.path == "/health") {
        return w->Respond(ready_ ? 200 : 503, "application/json",
                          json{{"status", ready_ ? "ok" : "starting"}}.dump());
      }
      return w->Respond(404, "application/json",
                        ErrorBody("loom cluster serve answers /v1/completions, "
                                  "/v1/chat/completions and /health", "not_found"));
    }
    json body = json::parse(r.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return w->Respond(400, "application/json", ErrorBody("the body is not a JSON object",
                                                           "invalid_request"));
    }
    Job job;
    job.id = ++next_id_;
    job.chat = chat;
    job.stream = body.value("stream", false);
    job.request = body;
    job.client = w;
    job.created = std::time(nullptr);
    job.public_id = (chat ? "chatcmpl-cluster-" : "cmpl-cluster-") + std::to_string(job.id);
    if (body.contains("max_tokens") && body["max_tokens"].is_number_integer()) {
      job.max_tokens = body["max_tokens"].get<int64_t>();
    }
    const uint64_t id = job.id;
    w->OnClose([this, id] {
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return;
      if (it->second.call) it->second.call->Cancel();
      jobs_.erase(it);
    });
    auto [it, inserted] = jobs_.emplace(id, std::move(job));
    if (ready_) Forward(it->second);
  }

  // Starts the job's request on the current pod: the client's own request the first time, a
  // continuation after a pod failed mid-stream.
  void Forward(Job& job) {
    json req;
    std::string target;
    if (job.generated.empty() && job.prompt_ids.empty()) {
      req = job.request;
      target = job.chat ? "/v1/chat/completions" : "/v1/completions";
    } else {
      std::vector<int32_t> prompt = job.prompt_ids;
      prompt.insert(prompt.end(), job.generated.begin(), job.generated.end());
      req = {{"prompt", prompt},
             {"max_tokens", job.max_tokens - static_cast<int64_t>(job.generated.size())}};
      for (const char* f : kCarried) {
        if (job.request.contains(f)) req[f] = job.request[f];
      }
      if (job.request.contains("model")) req["model"] = job.request["model"];
      target = "/v1/completions";
    }
    req["stream"] = true;
    req["return_token_ids"] = true;
    req.erase("stream_options");
    job.buffer.clear();
    job.status = 0;
    job.error_body.clear();
    net::ClientRequest cr;
    cr.method = "POST";
    cr.url.scheme = "http";
    cr.url.host = "127.0.0.1";
    cr.url.port = internal_port_;
    cr.url.target = target;
    cr.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer " + key_}};
    cr.body = req.dump(-1, ' ', false, json::error_handler_t::replace);
    cr.timeout_s = 600;
    const uint64_t id = job.id;
    const int generation = generation_;
    job.call = net::StartRequest(
        io_, std::move(cr), nullptr,
        [this, id](int status, const auto&) {
          if (auto it = jobs_.find(id); it != jobs_.end()) it->second.status = status;
        },
        [this, id](std::string_view data) { OnData(id, data); },
        [this, id, generation](Status s) { OnDone(id, generation, s); });
  }

  void OnData(uint64_t id, std::string_view data) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    Job& job = it->second;
    if (job.status != 200) {
      if (job.error_body.size() < 65536) job.error_body.append(data);
      return;
    }
    job.buffer.append(data);
    size_t end;
    while ((end = job.buffer.find("\n\n")) != std::string::npos) {
      const std::string event = job.buffer.substr(0, end);
      job.buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) OnEvent(job, std::string_view(event).substr(6));
      if (job.done) return;
    }
  }

  void OnEvent(Job& job, std::string_view data) {
    if (data == "[DONE]") return Finish(job);
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    if (j.contains("error")) {
      // An error mid-stream is the pod's (the request's own errors come as a 4xx before it): a
      // rank died or a link broke.  The next pod continues the request.
      const std::string why = j["error"].is_object() ? j["error"].value("message", "")
                                                     : std::string("generation failed");
      if (job.call) job.call->Cancel();
      job.call.reset();
      return Replan(why.empty() ? "generation failed" : why);
    }
    if (j.contains("prompt_token_ids") && job.prompt_ids.empty()) {
      for (const json& t : j["prompt_token_ids"]) job.prompt_ids.push_back(t.get<int32_t>());
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const json& c = j["choices"][0];
    std::string piece;
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
        c["delta"]["content"].is_string()) {
      piece = c["delta"]["content"];
    } else if (c.contains("text") && c["text"].is_string()) {
      piece = c["text"];
    }
    if (c.contains("token_ids") && c["token_ids"].is_array()) {
      for (const json& t : c["token_ids"]) job.generated.push_back(t.get<int32_t>());
    }
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) job.finish = c["finish_reason"];
    job.text += piece;
    if (!job.stream) return;
    if (!job.started) {
      job.client->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      job.started = true;
      if (job.chat) job.client->Send(Chunk(job, "", nullptr, /*role=*/true));
    }
    if (!piece.empty()) job.client->Send(Chunk(job, piece, nullptr, false));
  }

  void OnDone(uint64_t id, int generation, const Status& s) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    Job& job = it->second;
    job.call.reset();
    if (job.done) return;
    if (generation != generation_ || replanning_) return;  // a new pod continues it
    if (s.ok() && job.status != 200 && job.status != 0) {
      // The pod answered with an error of the request's own (a 4xx): pass it on.
      json e = json::parse(job.error_body, nullptr, false);
      const std::string message = !e.is_discarded() && e.contains("error")
                                      ? e["error"].value("message", "error")
                                      : job.error_body;
      return Fail(job, job.status, message);
    }
    if (s.code() == StatusCode::kCancelled) return;
    // The stream broke: the pod is gone or going.
    Replan(s.ok() ? "the stream ended early" : std::string(s.message()));
  }

  void Finish(Job& job) {
    job.done = true;
    const json finish = job.finish.empty() ? json("stop") : json(job.finish);
    const json usage = {{"prompt_tokens", job.prompt_ids.size()},
                        {"completion_tokens", job.generated.size()},
                        {"total_tokens", job.prompt_ids.size() + job.generated.size()}};
    if (job.stream) {
      if (!job.started) {
        job.client->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
        if (job.chat) job.client->Send(Chunk(job, "", nullptr, true));
      }
      job.client->Send(Chunk(job, "", finish, false));
      job.client->Send("data: [DONE]\n\n");
      job.client->End();
    } else {
      json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
      if (job.chat) {
        choice["message"] = {{"role", "assistant"}, {"content", job.text}};
      } else {
        choice["text"] = job.text;
      }
      json out = {{"id", job.public_id},
                  {"object", job.chat ? "chat.completion" : "text_completion"},
                  {"created", job.created},
                  {"model", job.request.value("model", o_.model)},
                  {"choices", json::array({choice})},
                  {"usage", usage}};
      job.client->Respond(200, "application/json",
                          out.dump(-1, ' ', false, json::error_handler_t::replace));
    }
    if (job.call) job.call->Cancel();
    jobs_.erase(job.id);
  }

  void Fail(Job& job, int status, const std::string& message) {
    job.done = true;
    if (job.started) {
      job.client->Send("data: " + json{{"error", {{"message", message}}}}.dump() + "\n\n");
      job.client->End();
    } else {
      job.client->Respond(status, "application/json", ErrorBody(message, "cluster_error"));
    }
    if (job.call) job.call->Cancel();
    jobs_.erase(job.id);
  }

  std::string Chunk(const Job& job, const std::string& text, const json& finish, bool role) {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (job.chat) {
      json delta = json::object();
      if (role) delta["role"] = "assistant";
      if (!text.empty() || role) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    const json c = {{"id", job.public_id},
                    {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", job.created},
                    {"model", job.request.value("model", o_.model)},
                    {"choices", json::array({choice})}};
    return "data: " + c.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  }

  static std::string ErrorBody(const std::string& message, const std::string& code) {
    return json{{"error", {{"message", message}, {"type", "invalid_request_error"},
                           {"param", nullptr}, {"code", code}}}}
        .dump();
  }

  boost::asio::io_context& io_;
  const ServeClusterOptions& o_;
  boost::asio::steady_timer tick_;
  std::string path_, key_;
  std::unique_ptr<net::HttpServer> server_;
  PlanSpeeds speeds_;
  std::set<std::string> pod_members_;
  int generation_ = 0, pid_ = -1, internal_port_ = 0;
  bool ready_ = false, replanning_ = false, stopping_ = false;
  uint64_t next_id_ = 0;
  std::map<uint64_t, Job> jobs_;
};

int ServeCluster(const ServeClusterOptions& o) {
  const bool loopback = o.host == "127.0.0.1" || o.host == "localhost" || o.host == "::1";
  if (!loopback && (o.api_key.empty() || !o.insecure)) {
    return Fail("cluster serve",
                InvalidArgumentError("--host ", o.host, " is reachable from other machines: give "
                                     "--api-key KEY and --insecure (this endpoint has no TLS yet; "
                                     "put a TLS proxy in front of it)"));
  }
  boost::asio::io_context io;
  Supervisor s(io, o);
  if (Status st = s.Start(); !st.ok()) return Fail("cluster serve", st);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) s.Stop();
  });
  io.run();
  return 0;
}

int Rebalance(const std::string& url, const std::string& api_key) {
  auto parsed = net::ParseUrl(url);
  if (!parsed.ok()) return Fail("cluster rebalance", parsed.status());
  net::ClientRequest req;
  req.method = "POST";
  req.url = *parsed;
  req.url.target = "/cluster/rebalance";
  if (!api_key.empty()) req.headers.push_back({"Authorization", "Bearer " + api_key});
  req.timeout_s = 600;
  auto r = net::Fetch(req, nullptr);
  if (!r.ok()) return Fail("cluster rebalance", r.status());
  if (r->status != 200) {
    return Fail("cluster rebalance",
                UnavailableError("the server answered ", r->status, ": ", r->body));
  }
  std::printf("%s\n", r->body.c_str());
  return 0;
}

}  // namespace

void AddClusterServeCommand(CLI::App& cluster, std::function<int()>* action) {
  auto o = std::make_shared<ServeClusterOptions>();
  CLI::App* serve = cluster.add_subcommand(
      "serve",
      "Serve a model split over the cluster's members (OpenAI API); when a member leaves, plan "
      "again on the others and continue the requests in flight (options not listed here go to "
      "`loom serve`)");
  serve->add_option("-m,--model", o->model, "Model file, directory or pulled name")->required();
  auto* tp = serve->add_option("--tp", o->tp, "Tensor-parallel ranks (default: the plan's)")
                 ->check(CLI::Range(1, 64));
  serve->add_option("--ep", o->ep,
                    "Expert-parallel ranks, mixtures of experts (default: the plan's)")
      ->check(CLI::Range(1, 64))
      ->excludes(tp);
  serve->add_option("--pp", o->pp, "Pipeline stages (default: the plan's)")
      ->check(CLI::Range(1, 64));
  serve->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  serve->add_option("--port", o->port, "TCP port; 0 picks a free one (printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  serve->add_option("--api-key", o->api_key, "Clients send 'Authorization: Bearer KEY'");
  serve->add_flag("--insecure", o->insecure, "Allow a non-loopback --host without TLS");
  serve->add_option("--control", o->control, "The daemon's Unix socket (as for join)");
  serve->add_option("--wait", o->wait_s, "Seconds to wait for the daemon and its measurements")
      ->capture_default_str();
  serve->add_option("--decode-gbs", o->speeds.decode_gbs,
                    "Weight GB/s of one rank's decode for the plan (default: measured here)");
  serve->add_option("--prompt-gflops", o->speeds.prompt_gflops,
                    "GFLOP/s of one rank's batched products for the plan (default: measured here)");
  serve->allow_extras();
  serve->callback([o, serve, action] {
    o->serve_args = serve->remaining();
    *action = [o] { return ServeCluster(*o); };
  });

  auto url = std::make_shared<std::string>("http://127.0.0.1:8080");
  auto key = std::make_shared<std::string>();
  CLI::App* rebalance = cluster.add_subcommand(
      "rebalance",
      "Ask a running `loom cluster serve` to plan again with the members up now (folds in a "
      "machine that joined); requests in flight continue on the new pod");
  rebalance->add_option("--url", *url, "The cluster serve endpoint")->capture_default_str();
  rebalance->add_option("--api-key", *key, "Its API key, if it has one");
  rebalance->callback([url, key, action] { *action = [url, key] { return Rebalance(*url, *key); }; });
}

}  // namespace loom::cli
