#include "loom/serve/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace loom::serve {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.Observe(v);
  std::string out;
  h.Render("x_seconds", "help text", &out);
  EXPECT_TRUE(Has(out, "# HELP x_seconds help text"));
  EXPECT_TRUE(Has(out, "# TYPE x_seconds histogram"));
  EXPECT_TRUE(Has(out, "x_seconds_bucket{le=\"1\"} 2"));
  EXPECT_TRUE(Has(out, "x_seconds_bucket{le=\"2\"} 3"));
  EXPECT_TRUE(Has(out, "x_seconds_bucket{le=\"5\"} 4"));
  EXPECT_TRUE(Has(out, "x_seconds_bucket{le=\"+Inf\"} 5"));
  EXPECT_TRUE(Has(out, "x_seconds_sum 16"));
  EXPECT_TRUE(Has(out, "x_seconds_count 5"));
  EXPECT_EQ(h.count(), 5);
}

TEST(MetricsTest, RendersRequestsTokensAndEngineState) {
  Metrics m;
  m.CountRequest("/v1/chat/completions", 200, 0.2);
  m.CountRequest("/v1/chat/completions", 200, 0.3);
  m.CountRequest("/v1/chat/completions", 503, 0.001);
  m.ObserveFirstToken(0.04);
  m.ObserveCompletion(10, 21, 2.0);
  engine::EngineStats e;
  e.slots = 4;
  e.active = 3;
  e.queued = 7;
  e.max_queue = 64;
  e.steps = 100;
  e.generated_tokens = 300;
  net::ServerStats h;
  h.open_connections = 9;
  const std::string out = m.Render(e, h);
  EXPECT_TRUE(Has(out, "loom_http_requests_total{route=\"/v1/chat/completions\",code=\"200\"} 2"));
  EXPECT_TRUE(Has(out, "loom_http_requests_total{route=\"/v1/chat/completions\",code=\"503\"} 1"));
  EXPECT_TRUE(Has(out, "loom_prompt_tokens_total 10"));
  EXPECT_TRUE(Has(out, "loom_generation_tokens_total 21"));
  EXPECT_TRUE(Has(out, "loom_time_to_first_token_seconds_count 1"));
  EXPECT_TRUE(Has(out, "loom_decode_tokens_per_second_sum 10"));  // 20 tokens in 2 s
  EXPECT_TRUE(Has(out, "loom_queue_depth 7"));
  EXPECT_TRUE(Has(out, "loom_active_sequences 3"));
  EXPECT_TRUE(Has(out, "loom_slots 4"));
  EXPECT_TRUE(Has(out, "loom_http_connections 9"));
  EXPECT_TRUE(Has(out, "# TYPE loom_generation_tokens_per_second gauge"));
  // Every sample line belongs to a declared metric.
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t eol = out.find('\n', pos);
    const std::string line = out.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    std::string base = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (base.size() > s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0 &&
          out.find("# TYPE " + base.substr(0, base.size() - s.size()) + " histogram") !=
              std::string::npos) {
        base = base.substr(0, base.size() - s.size());
      }
    }
    EXPECT_NE(out.find("# TYPE " + base + " "), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace loom::serve
