// SerializeFrame: the fields of each frame and sub-object written as JSON (the reading side,
// ParseFrame and its checks, is in frames.cc).
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "loom/network/protocol/frames.h"

namespace loom::network::protocol {
namespace {

using json = nlohmann::json;

json ToJson(const ModelInfo& m) {
  return {{"name", m.name},
          {"sha256", m.sha256},
          {"weight_bytes", m.weight_bytes},
          {"kv_bytes_per_token", m.kv_bytes_per_token},
          {"context", m.context},
          {"loaded", m.loaded}};
}

json ToJson(const std::vector<ModelInfo>& models) {
  json out = json::array();
  for (const ModelInfo& m : models) out.push_back(ToJson(m));
  return out;
}

void WriteFields(const Hello& f, json& j) { j["node_id"] = f.node_id; }

void WriteFields(const Challenge& f, json& j) {
  j["nonce"] = f.nonce;
  j["hub_id"] = f.hub_id;
}

void WriteFields(const Register& f, json& j) {
  j["node_id"] = f.node_id;
  j["signature"] = f.signature;
  j["facts"] = {{"mem_total_bytes", f.facts.mem_total_bytes},
                {"mem_free_bytes", f.facts.mem_free_bytes},
                {"cores", f.facts.cores},
                {"simd", f.facts.simd},
                {"mem_bandwidth_gbps", f.facts.mem_bandwidth_gbps},
                {"os", f.facts.os},
                {"version", f.facts.version}};
  if (!f.facts.chip.empty()) j["facts"]["chip"] = f.facts.chip;
  j["models"] = ToJson(f.models);
  if (f.pod) j["pod"] = {{"tp", f.pod->tp}, {"pp", f.pod->pp}};
  j["max_concurrency"] = f.max_concurrency;
  if (f.slot) {
    j["slot"] = {{"model", f.slot->model},
                 {"begin_minute", f.slot->begin_minute},
                 {"end_minute", f.slot->end_minute}};
  }
  if (f.location) j["location"] = {{"lat", f.location->lat}, {"lon", f.location->lon}};
}

void WriteFields(const Welcome& f, json& j) {
  j["node_id"] = f.node_id;
  j["heartbeat_ms"] = f.heartbeat_ms;
}

void WriteFields(const Heartbeat& f, json& j) {
  j["running"] = f.running;
  j["waiting"] = f.waiting;
  j["mem_free_bytes"] = f.mem_free_bytes;
  j["draining"] = f.draining;
  j["paused"] = f.paused;
  j["loaded"] = f.loaded;
}

void WriteFields(const Capacity& f, json& j) {
  j["models"] = ToJson(f.models);
  j["max_concurrency"] = f.max_concurrency;
  j["mem_free_bytes"] = f.mem_free_bytes;
}

void WriteFields(const Assign& f, json& j) {
  j["attempt_id"] = f.attempt_id;
  j["model"] = f.model;
  j["endpoint"] = f.endpoint;
  j["request"] = f.request;
  j["first_token_deadline_ms"] = f.first_token_deadline_ms;
}

void WriteFields(const Accepted& f, json& j) {
  j["attempt_id"] = f.attempt_id;
  j["prompt_token_ids"] = f.prompt_token_ids;
}

void WriteFields(const Chunk& f, json& j) {
  j["attempt_id"] = f.attempt_id;
  j["index"] = f.index;
  j["text"] = f.text;
  j["token_ids"] = f.token_ids;
  if (!f.logprobs.empty()) j["logprobs"] = f.logprobs;
  if (!f.best_logprobs.empty()) j["best_logprobs"] = f.best_logprobs;
}

void WriteFields(const Complete& f, json& j) {
  j["attempt_id"] = f.attempt_id;
  j["finish_reason"] = f.finish_reason;
  j["prompt_tokens"] = f.prompt_tokens;
  j["completion_tokens"] = f.completion_tokens;
}

void WriteFields(const Error& f, json& j) {
  if (f.attempt_id) j["attempt_id"] = *f.attempt_id;
  j["code"] = f.code;
  j["message"] = f.message;
  j["status"] = f.status;
}

void WriteFields(const Cancel& f, json& j) { j["attempt_id"] = f.attempt_id; }
void WriteFields(const Drain&, json&) {}
void WriteFields(const LoadModel& f, json& j) { j["model"] = f.model; }
void WriteFields(const UnloadModel& f, json& j) { j["model"] = f.model; }

void WriteFields(const Standing& f, json& j) {
  j["pending_micro"] = f.pending_micro;
  j["available_micro"] = f.available_micro;
  json recent = json::array();
  for (const Earning& e : f.recent) {
    recent.push_back({{"kind", e.kind}, {"ref", e.ref}, {"model", e.model}, {"tokens", e.tokens},
                      {"micro", e.micro}, {"at_ms", e.at_ms}});
  }
  j["recent"] = std::move(recent);
  j["idle_reasons"] = f.idle_reasons;
  j["slot"] = f.slot;
}

}  // namespace

std::string SerializeFrame(const Frame& frame) {
  json j = {{"v", kProtocolVersion}, {"type", std::string(FrameTypeName(frame))}};
  std::visit([&j](const auto& f) { WriteFields(f, j); }, frame);
  // Invalid UTF-8 in a string built by the caller becomes U+FFFD instead of throwing.
  return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

std::string_view FrameTypeName(const Frame& frame) {
  return std::visit([](const auto& f) { return std::decay_t<decltype(f)>::kType; }, frame);
}

}  // namespace loom::network::protocol
