// Prometheus metrics of the server, rendered in the text exposition format (version 0.0.4):
//   loom_http_requests_total{route,code}       finished HTTP exchanges (499: client gone first)
//   loom_http_request_duration_seconds         histogram, request received -> response written
//   loom_prompt_tokens_total, loom_generation_tokens_total   tokens of finished completions
//   loom_time_to_first_token_seconds           histogram, request received -> first token sent
//   loom_decode_tokens_per_second              histogram, per completion
//   loom_generation_tokens_per_second          gauge, all completions, since the previous scrape
//   loom_queue_depth, loom_active_sequences, loom_slots, loom_queue_limit   gauges
//   loom_engine_steps_total, loom_engine_batch_tokens_total, loom_engine_busy_seconds_total
//   loom_requests_cancelled_total              completions whose client left
//   loom_http_connections, loom_http_connections_refused_total, loom_http_timeouts_total
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/engine/batch_engine.h"
#include "loom/net/http_server.h"

namespace loom::serve {

// A cumulative histogram with fixed upper bounds.  Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Appends # HELP / # TYPE and the _bucket/_sum/_count lines.
  void Render(std::string_view name, std::string_view help, std::string* out) const;
  int64_t count() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<int64_t> counts_;  // (bounds + 1): the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  void CountRequest(std::string_view route, int status, double seconds);
  void ObserveFirstToken(double seconds);
  // A completion finished: its token counts and decode speed.
  void ObserveCompletion(int64_t prompt_tokens, int64_t completion_tokens, double decode_seconds);

  std::string Render(const engine::EngineStats& engine, const net::ServerStats& http);

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  int64_t completions_ = 0;
  double last_scrape_time_ = 0;
  int64_t last_scrape_generated_ = 0;
  double last_rate_ = 0;
  Histogram request_seconds_;
  Histogram first_token_seconds_;
  Histogram decode_rate_;
};

}  // namespace loom::serve
