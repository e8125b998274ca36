#include "loom/serve/openai_request.h"

#include <cmath>
#include <limits>
#include <random>

#include "loom/engine/batch_engine.h"

namespace loom::serve {
namespace {

using json = nlohmann::json;
using Error = std::optional<ApiError>;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

ApiError WrongType(const std::string& param, const char* expected, const json& v) {
  return BadParam(param, "'" + param + "' must be " + expected + ", not " + TypeName(v),
                  "invalid_type");
}

// The value of `key`, or null when absent.
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Error GetBool(const json& obj, const char* key, bool* out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return {};
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  *out = v->get<bool>();
  return {};
}

Error GetNumber(const json& obj, const char* key, double lo, double hi, double* out,
                bool* given = nullptr) {
  const json* v = Field(obj, key);
  if (v == nullptr) return {};
  if (!v->is_number()) return WrongType(key, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    return BadParam(key,
                    "'" + std::string(key) + "' must be between " + json(lo).dump() + " and " +
                        json(hi).dump() + " (got " + v->dump() + ")",
                    "invalid_value");
  }
  *out = x;
  if (given != nullptr) *given = true;
  return {};
}

Error GetInt(const json& obj, const char* key, int64_t lo, int64_t hi, int64_t* out,
             bool* given = nullptr) {
  const json* v = Field(obj, key);
  if (v == nullptr) return {};
  int64_t x = 0;
  if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
            ? std::numeric_limits<int64_t>::max()
            : static_cast<int64_t>(u);
  } else if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e18) {
    x = static_cast<int64_t>(v->get<double>());  // 5.0 from clients that only have floats
  } else {
    return WrongType(key, "an integer", *v);
  }
  if (x < lo || x > hi) {
    return BadParam(key,
                    "'" + std::string(key) + "' must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + " (got " + v->dump() + ")",
                    "invalid_value");
  }
  *out = x;
  if (given != nullptr) *given = true;
  return {};
}

ApiError Unsupported(const std::string& param, const std::string& what) {
  return BadParam(param, what + " is not supported by this server", "unsupported_parameter");
}

Error ParseStop(const json& obj, std::vector<std::string>* out) {
  const json* v = Field(obj, "stop");
  if (v == nullptr) return {};
  auto add = [&](const json& s) -> Error {
    if (!s.is_string()) return WrongType("stop", "a string or an array of strings", s);
    const std::string& text = s.get_ref<const std::string&>();
    if (static_cast<int64_t>(text.size()) > engine::kMaxStopStringBytes) {
      return BadParam(
          "stop",
          "stop strings may have at most " + std::to_string(engine::kMaxStopStringBytes) + " bytes",
          "invalid_value");
    }
    if (!text.empty()) out->push_back(text);
    return {};
  };
  if (v->is_string()) return add(*v);
  if (!v->is_array()) return WrongType("stop", "a string or an array of strings", *v);
  if (static_cast<int64_t>(v->size()) > engine::kMaxStopStrings) {
    return BadParam("stop",
                    "at most " + std::to_string(engine::kMaxStopStrings) + " stop strings (got " +
                        std::to_string(v->size()) + ")",
                    "invalid_value");
  }
  for (const json& s : *v) {
    if (Error e = add(s)) return e;
  }
  return {};
}

// Fields common to both endpoints; `max_top_logprobs` differs (chat 20, completions 5).
Error ParseGeneration(const json& body, bool chat, GenerationParams* g) {
  const json* model = Field(body, "model");
  if (model == nullptr) {
    return BadParam("model", "you must provide a model parameter", "missing_required_parameter");
  }
  if (!model->is_string()) return WrongType("model", "a string", *model);
  g->model = model->get<std::string>();

  if (Error e = GetBool(body, "stream", &g->stream)) return e;
  if (const json* so = Field(body, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (!g->stream) {
      return BadParam("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    if (Error e = GetBool(*so, "include_usage", &g->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }

  int64_t max_tokens = 0;
  bool have_max = false;
  // Bounded by the context later; here only absurd values are refused.
  constexpr int64_t kHuge = int64_t{1} << 40;
  if (Error e = GetInt(body, "max_tokens", 1, kHuge, &max_tokens, &have_max)) return e;
  if (Error e = GetInt(body, "max_completion_tokens", 1, kHuge, &max_tokens, &have_max)) return e;
  if (have_max) g->max_tokens = max_tokens;

  text::SamplerConfig& s = g->sampling;
  s.temperature = 1.0f;
  s.top_k = 0;
  s.top_p = 1.0f;
  s.min_p = 0.0f;
  s.repeat_penalty = 1.0f;
  double temperature = 1.0;
  if (Error e = GetNumber(body, "temperature", 0.0, 2.0, &temperature)) return e;
  s.temperature = static_cast<float>(temperature);
  double top_p = 1.0;
  if (Error e = GetNumber(body, "top_p", 0.0, 1.0, &top_p)) return e;
  if (top_p <= 0.0) {
    s.temperature = 0;  // the nucleus shrinks to the most likely token
  } else {
    s.top_p = static_cast<float>(top_p);
  }
  // Extensions that llama.cpp-style clients send.
  int64_t top_k = 0;
  if (Error e = GetInt(body, "top_k", 0, 1 << 30, &top_k)) return e;
  s.top_k = static_cast<int32_t>(top_k);
  double min_p = 0.0;
  if (Error e = GetNumber(body, "min_p", 0.0, 1.0, &min_p)) return e;
  s.min_p = static_cast<float>(min_p);
  double repeat = 1.0;
  if (Error e = GetNumber(body, "repetition_penalty", 0.01, 100.0, &repeat)) return e;
  if (Error e = GetNumber(body, "repeat_penalty", 0.01, 100.0, &repeat)) return e;
  s.repeat_penalty = static_cast<float>(repeat);

  int64_t seed = 0;
  if (Error e = GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max(), &seed, &g->seed_given)) {
    return e;
  }
  s.seed = g->seed_given
               ? static_cast<uint64_t>(seed)
               : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();

  if (Error e = ParseStop(body, &g->stop)) return e;
  if (Error e = GetBool(body, "ignore_eos", &g->ignore_eos)) return e;
  if (Error e = GetBool(body, "return_token_ids", &g->return_token_ids)) return e;

  for (const char* penalty : {"frequency_penalty", "presence_penalty"}) {
    double p = 0;
    if (Error e = GetNumber(body, penalty, -2.0, 2.0, &p)) return e;
    if (p != 0) return Unsupported(penalty, std::string("a non-zero '") + penalty + "'");
  }
  int64_t n = 1;
  if (Error e = GetInt(body, "n", 1, 128, &n)) return e;
  if (n != 1) return Unsupported("n", "n > 1 (several choices per request)");
  if (const json* bias = Field(body, "logit_bias")) {
    if (!bias->is_object()) return WrongType("logit_bias", "an object", *bias);
    if (!bias->empty()) return Unsupported("logit_bias", "'logit_bias'");
  }
  if (const json* user = Field(body, "user"); user != nullptr && !user->is_string()) {
    return WrongType("user", "a string", *user);
  }

  if (chat) {
    if (Error e = GetBool(body, "logprobs", &g->logprobs)) return e;
    int64_t top = 0;
    bool top_given = false;
    if (Error e = GetInt(body, "top_logprobs", 0, 20, &top, &top_given)) return e;
    if (top_given && !g->logprobs) {
      return BadParam("top_logprobs", "'top_logprobs' needs 'logprobs' to be true");
    }
    g->top_logprobs = static_cast<int32_t>(top);
    if (const json* rf = Field(body, "response_format")) {
      if (!rf->is_object()) return WrongType("response_format", "an object", *rf);
      const json* type = Field(*rf, "type");
      if (type != nullptr && (!type->is_string() || type->get<std::string>() != "text")) {
        return Unsupported("response_format", "a response_format other than {\"type\": \"text\"}");
      }
    }
    for (const char* key : {"tools", "functions"}) {
      if (const json* t = Field(body, key)) {
        if (!t->is_array()) return WrongType(key, "an array", *t);
        if (!t->empty()) return Unsupported(key, std::string("'") + key + "' (tool calls)");
      }
    }
    if (const json* tc = Field(body, "tool_choice")) {
      if (!(tc->is_string() && tc->get<std::string>() == "none")) {
        return Unsupported("tool_choice", "'tool_choice' other than \"none\"");
      }
    }
  } else {
    int64_t lp = 0;
    bool lp_given = false;
    if (Error e = GetInt(body, "logprobs", 0, 5, &lp, &lp_given)) return e;
    g->logprobs = lp_given;
    g->top_logprobs = static_cast<int32_t>(lp);
    bool echo = false;
    if (Error e = GetBool(body, "echo", &echo)) return e;
    if (echo) return Unsupported("echo", "'echo'");
    int64_t best_of = 1;
    if (Error e = GetInt(body, "best_of", 1, 128, &best_of)) return e;
    if (best_of != 1) return Unsupported("best_of", "best_of > 1");
    if (const json* suffix = Field(body, "suffix")) {
      if (!suffix->is_string()) return WrongType("suffix", "a string", *suffix);
      if (!suffix->get<std::string>().empty()) return Unsupported("suffix", "'suffix'");
    }
  }
  return {};
}

Error ParseContent(const json& content, size_t index, std::string* out) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) {
    *out = content.get<std::string>();
    return {};
  }
  if (!content.is_array())
    return WrongType(param, "a string or an array of content parts", content);
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_param = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return WrongType(part_param, "an object", part);
    const json* type = Field(part, "type");
    if (type == nullptr || !type->is_string()) {
      return BadParam(part_param + ".type", "content parts need a string 'type'");
    }
    if (type->get<std::string>() != "text") {
      return Unsupported(part_param + ".type",
                         "content of type '" + type->get<std::string>() + "'");
    }
    const json* text = Field(part, "text");
    if (text == nullptr || !text->is_string()) {
      return BadParam(part_param + ".text", "a text part needs a string 'text'");
    }
    *out += text->get<std::string>();
  }
  return {};
}

// Nesting depth of a JSON text, counted outside strings (a cheap guard before the parser).
int JsonDepth(std::string_view text) {
  int depth = 0;
  int max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

std::optional<ApiError> ParseJsonObject(std::string_view body, nlohmann::json* out) {
  if (JsonDepth(body) > kMaxJsonDepth) {
    return BadParam(
        "", "the request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    return BadParam("", "the request body is not valid JSON (expected a JSON object)",
                    "invalid_json");
  }
  if (!out->is_object()) {
    return BadParam("",
                    std::string("the request body must be a JSON object, not ") + TypeName(*out));
  }
  return {};
}

std::optional<ApiError> ParseChatRequest(const nlohmann::json& body, ChatParams* out) {
  if (Error e = ParseGeneration(body, /*chat=*/true, &out->gen)) return e;
  const json* messages = Field(body, "messages");
  if (messages == nullptr) {
    return BadParam("messages", "you must provide 'messages'", "missing_required_parameter");
  }
  if (!messages->is_array()) return WrongType("messages", "an array", *messages);
  if (messages->empty()) return BadParam("messages", "'messages' must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return WrongType(param, "an object", m);
    const json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return BadParam(param + ".role", "each message needs a string 'role'");
    }
    text::ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      return BadParam(
          param + ".role",
          "unknown role '" + msg.role + "' (expected system, developer, user, assistant or tool)",
          "invalid_value");
    }
    const json* content = Field(m, "content");
    if (content == nullptr) {
      if (msg.role != "assistant") {
        return BadParam(param + ".content", "a " + msg.role + " message needs 'content'");
      }
    } else if (Error e = ParseContent(*content, i, &msg.content)) {
      return e;
    }
    if (const json* name = Field(m, "name"); name != nullptr && !name->is_string()) {
      return WrongType(param + ".name", "a string", *name);
    }
    out->messages.push_back(std::move(msg));
  }
  return {};
}

namespace {

// A JSON array of token ids (non-negative 32-bit integers) into *out.
Error ParseTokenIds(const json& v, const std::string& param, std::vector<int32_t>* out) {
  if (!v.is_array()) return WrongType(param, "an array of token ids", v);
  for (const json& id : v) {
    if (!id.is_number_integer() && !id.is_number_unsigned()) {
      return WrongType(param, "an array of token ids", v);
    }
    const int64_t x = id.is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(id.get<uint64_t>(), 1ull << 40))
                          : id.get<int64_t>();
    if (x < 0 || x > std::numeric_limits<int32_t>::max()) {
      return BadParam(param, "token id " + id.dump() + " is out of range", "invalid_value");
    }
    out->push_back(static_cast<int32_t>(x));
  }
  return {};
}

}  // namespace

std::optional<ApiError> ParseCompletionRequest(const nlohmann::json& body, CompletionParams* out) {
  if (Error e = ParseGeneration(body, /*chat=*/false, &out->gen)) return e;
  if (const json* score = Field(body, "score_token_ids")) {
    if (Error e = ParseTokenIds(*score, "score_token_ids", &out->gen.score_token_ids)) return e;
    if (out->gen.score_token_ids.empty()) {
      return BadParam("score_token_ids", "there are no tokens to score");
    }
    if (!out->gen.logprobs) {
      return BadParam("score_token_ids", "'score_token_ids' needs 'logprobs'");
    }
  }
  const json* prompt = Field(body, "prompt");
  if (prompt == nullptr) {
    return BadParam("prompt", "you must provide a 'prompt'", "missing_required_parameter");
  }
  const json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    p = &(*p)[0];  // a batch of one prompt
  }
  if (p->is_string()) {
    out->prompt_text = p->get<std::string>();
    return {};
  }
  if (!p->is_array()) {
    return WrongType("prompt", "a string or an array of token ids", *prompt);
  }
  if (p->empty()) return BadParam("prompt", "the prompt is empty");
  out->prompt_is_ids = true;
  for (const json& id : *p) {
    if (id.is_string() || id.is_array()) {
      return Unsupported("prompt", "a batch of several prompts");
    }
    if (!id.is_number_integer() && !id.is_number_unsigned()) {
      return WrongType("prompt", "a string or an array of token ids", *prompt);
    }
    const int64_t v = id.is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(id.get<uint64_t>(), 1ull << 40))
                          : id.get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      return BadParam("prompt", "token id " + id.dump() + " is out of range", "invalid_value");
    }
    out->prompt_ids.push_back(static_cast<int32_t>(v));
  }
  return {};
}

}  // namespace loom::serve
