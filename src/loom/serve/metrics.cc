#include "loom/serve/metrics.h"

#include <cstdio>

#include "loom/base/clock.h"

namespace loom::serve {
namespace {

std::string Number(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

void Header(std::string_view name, std::string_view help, std::string_view type, std::string* out) {
  out->append("# HELP ").append(name).append(" ").append(help).append("\n");
  out->append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Scalar(std::string_view name, std::string_view help, std::string_view type, double value,
            std::string* out) {
  Header(name, help, type, out);
  out->append(name).append(" ").append(Number(value)).append("\n");
}

// Label values are route patterns we chose, but escape anyway.
std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::Render(std::string_view name, std::string_view help, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  Header(name, help, "histogram", out);
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? Number(bounds_[i]) : "+Inf";
    out->append(name).append("_bucket{le=\"").append(le).append("\"} ");
    out->append(std::to_string(cumulative)).append("\n");
  }
  out->append(name).append("_sum ").append(Number(sum_)).append("\n");
  out->append(name).append("_count ").append(std::to_string(count_)).append("\n");
}

Metrics::Metrics()
    : last_scrape_time_(base::NowSeconds()),
      request_seconds_({0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}),
      first_token_seconds_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      decode_rate_({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}) {}

void Metrics::CountRequest(std::string_view route, int status, double seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_[{std::string(route), status}];
  }
  request_seconds_.Observe(seconds);
}

void Metrics::ObserveFirstToken(double seconds) { first_token_seconds_.Observe(seconds); }

void Metrics::ObserveCompletion(int64_t prompt_tokens, int64_t completion_tokens,
                                double decode_seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    prompt_tokens_ += prompt_tokens;
    generation_tokens_ += completion_tokens;
    ++completions_;
  }
  // Tokens after the first, over the time they took.
  if (completion_tokens > 1 && decode_seconds > 0) {
    decode_rate_.Observe(static_cast<double>(completion_tokens - 1) / decode_seconds);
  }
}

std::string Metrics::Render(const engine::EngineStats& engine, const net::ServerStats& http) {
  std::string out;
  out.reserve(8192);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Header("loom_http_requests_total",
           "HTTP exchanges by route and status (499: the client left first)", "counter", &out);
    for (const auto& [key, count] : requests_) {
      out.append("loom_http_requests_total{route=\"").append(Escape(key.first));
      out.append("\",code=\"").append(std::to_string(key.second)).append("\"} ");
      out.append(std::to_string(count)).append("\n");
    }
    Scalar("loom_prompt_tokens_total", "Prompt tokens of finished completions", "counter",
           static_cast<double>(prompt_tokens_), &out);
    Scalar("loom_generation_tokens_total", "Generated tokens of finished completions", "counter",
           static_cast<double>(generation_tokens_), &out);
    Scalar("loom_completions_total", "Finished completions", "counter",
           static_cast<double>(completions_), &out);
    // Aggregate generation speed since the previous scrape (from the engine's live counter).
    const double now = base::NowSeconds();
    const double dt = now - last_scrape_time_;
    if (dt >= 0.5) {
      last_rate_ = static_cast<double>(engine.generated_tokens - last_scrape_generated_) / dt;
      last_scrape_time_ = now;
      last_scrape_generated_ = engine.generated_tokens;
    }
    Scalar("loom_generation_tokens_per_second",
           "Tokens generated per second over all sequences since the previous scrape", "gauge",
           last_rate_, &out);
  }
  request_seconds_.Render("loom_http_request_duration_seconds",
                          "Time from a request's arrival to its response's end", &out);
  first_token_seconds_.Render("loom_time_to_first_token_seconds",
                              "Time from a completion request's arrival to its first token", &out);
  decode_rate_.Render("loom_decode_tokens_per_second",
                      "Generation speed of each completion after its first token", &out);
  Scalar("loom_queue_depth", "Requests waiting for a slot", "gauge",
         static_cast<double>(engine.queued), &out);
  Scalar("loom_queue_limit", "Requests that may wait before new ones are refused", "gauge",
         static_cast<double>(engine.max_queue), &out);
  Scalar("loom_active_sequences", "Sequences holding a slot", "gauge",
         static_cast<double>(engine.active), &out);
  Scalar("loom_slots", "Sequences the model holds at once", "gauge",
         static_cast<double>(engine.slots), &out);
  Scalar("loom_engine_steps_total", "Batched forward passes", "counter",
         static_cast<double>(engine.steps), &out);
  Scalar("loom_engine_batch_tokens_total", "Tokens run in batched forward passes", "counter",
         static_cast<double>(engine.batch_tokens), &out);
  Scalar("loom_engine_busy_seconds_total", "Time spent in forward passes", "counter",
         engine.busy_seconds, &out);
  Scalar("loom_requests_cancelled_total", "Completions cancelled because their client left",
         "counter", static_cast<double>(engine.requests_cancelled), &out);
  Scalar("loom_engine_generated_tokens_total", "Tokens sampled by the engine", "counter",
         static_cast<double>(engine.generated_tokens), &out);
  Scalar("loom_http_connections", "Open HTTP connections", "gauge",
         static_cast<double>(http.open_connections), &out);
  Scalar("loom_http_connections_refused_total", "Connections refused over the limit", "counter",
         static_cast<double>(http.refused), &out);
  Scalar("loom_http_timeouts_total", "Connections closed for read, idle or write timeouts",
         "counter", static_cast<double>(http.timed_out), &out);
  Scalar("loom_http_bad_requests_total", "Requests refused by the HTTP parser", "counter",
         static_cast<double>(http.bad_requests), &out);
  return out;
}

}  // namespace loom::serve
