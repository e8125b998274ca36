// ParseFrame: a received frame checked field by field (syntax, then each field of each frame and
// sub-object); the writing side, SerializeFrame, is in frames_writer.cc.
#include "loom/network/protocol/frames.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <utility>

#include "loom/network/protocol/identity.h"

namespace loom::network::protocol {
namespace {

using json = nlohmann::json;

// "frame 'chunk': " once the type is known, "frame: " before.
std::string FramePrefix(std::string_view frame) {
  return frame.empty() ? std::string("frame: ") : StrCat("frame '", frame, "': ");
}

// A string for an error message: quoted and escaped to ASCII, long ones cut (at a UTF-8 character
// boundary) so a peer cannot make us echo megabytes.
std::string Quote(std::string_view s) {
  constexpr size_t kShown = 40;
  const auto escape = [](std::string_view part) {
    return json(std::string(part))
        .dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  };
  if (s.size() <= kShown) return escape(s);
  size_t cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return StrCat(escape(s.substr(0, cut)), "... (", s.size(), " bytes)");
}

// What a received value was, for "(got ...)".
std::string Describe(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return Quote(v.get_ref<const std::string&>());
    case json::value_t::array:
      return StrCat("an array of ", v.size(), " items");
    case json::value_t::object:
      return "an object";
    default:
      return v.dump();  // null, booleans and numbers are short
  }
}

// ---- First pass: syntax, nesting depth and duplicate keys, before any DOM is built ----

// A SAX handler that only checks.  nlohmann keeps the last of duplicate keys silently; two peers
// (or a proxy and us) reading one frame differently is a classic source of bugs, so duplicates are
// refused.  Deep nesting is refused because dump() and operator== on json recurse.
class Prescan {
 public:
  const std::string& error() const { return error_; }

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(size_t) {
    keys_.emplace_back();
    return Enter();
  }
  bool key(std::string& key) {
    if (keys_.back().insert(key).second) return true;
    error_ = StrCat("frame: duplicate key ", Quote(key));
    return false;
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(size_t) { return Enter(); }
  bool end_array() {
    --depth_;
    return true;
  }
  bool parse_error(size_t position, const std::string&, const json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 3: ..." and may
    // quote raw input bytes: keep the part after the tag, printable ASCII only, bounded.
    std::string_view what = e.what();
    if (const size_t tag_end = what.find("] "); tag_end != std::string_view::npos) {
      what.remove_prefix(tag_end + 2);
    }
    std::string reason(what.substr(0, 200));
    for (char& c : reason) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    error_ = StrCat("frame: not valid JSON (byte ", position, "): ", reason);
    return false;
  }

 private:
  bool Enter() {
    if (++depth_ <= kMaxJsonDepth) return true;
    error_ = StrCat("frame: JSON nested deeper than ", kMaxJsonDepth, " levels");
    return false;
  }

  std::string error_;
  int64_t depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // keys seen in each open object
};

// ---- Then the DOM, field by field ----

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("._:/@+-").find(c) != std::string_view::npos;
}

bool IsId(std::string_view s) {
  if (s.empty() || static_cast<int64_t>(s.size()) > kMaxIdBytes) return false;
  for (char c : s) {
    if (!IsIdChar(c)) return false;
  }
  return true;
}

bool IsLabel(std::string_view s) {
  if (static_cast<int64_t>(s.size()) > kMaxLabelBytes) return false;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

bool IsSha256Hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The integer in `v` if it is a JSON integer (not 1.0, not 1.5) within [min, max].
enum class IntCheck { kOk, kNotInt, kTooSmall, kTooBig };
IntCheck CheckInt(const json& v, int64_t min, int64_t max, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) return IntCheck::kTooBig;
    *out = static_cast<int64_t>(u);
    if (*out < min) return IntCheck::kTooSmall;
    return IntCheck::kOk;
  }
  if (!v.is_number_integer()) return IntCheck::kNotInt;
  *out = v.get<int64_t>();
  if (*out < min) return IntCheck::kTooSmall;
  if (*out > max) return IntCheck::kTooBig;
  return IntCheck::kOk;
}

std::string IntMustBe(int64_t min, int64_t max, IntCheck failure) {
  if (min != 0) return StrCat("an integer in [", min, ", ", max, "]");
  if (failure == IntCheck::kTooBig) return StrCat("a non-negative integer at most ", max);
  return "a non-negative integer";
}

class Reader;
Status ReadFields(Reader& r, ModelInfo* m);
Status ReadFields(Reader& r, NodeFacts* f);
Status ReadFields(Reader& r, PodInfo* p);
Status ReadFields(Reader& r, Earning* e);
Status ReadFields(Reader& r, SlotOffer* s);
Status ReadFields(Reader& r, Location* l);

// Reads the fields of one JSON object, remembering which it read so that Finish can name the first
// field nobody asked for.  `path` prefixes field names in messages ("facts.", "models[2].").
class Reader {
 public:
  Reader(const json& object, std::string_view frame, std::string path)
      : object_(object), frame_(frame), path_(std::move(path)) {}

  Status Int(std::string_view key, int64_t min, int64_t max, int64_t* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, Require(key));
    const IntCheck check = CheckInt(*v, min, max, out);
    if (check != IntCheck::kOk) return Fail(key, IntMustBe(min, max, check), *v);
    return OkStatus();
  }
  Status Int(std::string_view key, int64_t min, int64_t max, int32_t* out) {
    int64_t wide = 0;
    LOOM_RETURN_IF_ERROR(Int(key, min, max, &wide));  // (callers' bounds fit in int32)
    *out = static_cast<int32_t>(wide);
    return OkStatus();
  }
  Status Bool(std::string_view key, bool* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, Require(key));
    if (!v->is_boolean()) return Fail(key, "true or false", *v);
    *out = v->get<bool>();
    return OkStatus();
  }
  Status Number(std::string_view key, double min, double max, double* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, Require(key));
    const double d = v->is_number() ? v->get<double>() : NAN;
    if (!(d >= min && d <= max)) {
      // (bounds printed through json so that 1e6 reads "1000000.0", not "1e+06")
      return Fail(key, StrCat("a number in [", json(min).dump(), ", ", json(max).dump(), "]"), *v);
    }
    *out = d;
    return OkStatus();
  }
  Status Id(std::string_view key, std::string* out) { return String(key, IsId, IdMustBe(), out); }
  Status OptionalId(std::string_view key, std::optional<std::string>* out) {
    const json* v = Take(key);
    if (v == nullptr || v->is_null()) {
      out->reset();
      return OkStatus();
    }
    if (!v->is_string() || !IsId(v->get_ref<const std::string&>())) {
      return Fail(key, IdMustBe(), *v);
    }
    *out = v->get<std::string>();
    return OkStatus();
  }
  // An optional label: absent reads as "".
  Status OptionalLabel(std::string_view key, std::string* out) {
    if (object_.find(key) == object_.end()) {
      out->clear();
      return OkStatus();
    }
    return Label(key, out);
  }
  Status Label(std::string_view key, std::string* out) {
    return String(
        key, IsLabel,
        StrCat("a string of at most ", kMaxLabelBytes, " bytes without control characters"), out);
  }
  Status Text(std::string_view key, int64_t max_bytes, std::string* out) {
    const auto fits = [max_bytes](std::string_view s) {
      return static_cast<int64_t>(s.size()) <= max_bytes;
    };
    return String(key, fits, StrCat("a string of at most ", max_bytes, " bytes"), out);
  }
  Status OneOf(std::string_view key, std::initializer_list<std::string_view> allowed,
               std::string* out) {
    std::string must_be;
    for (std::string_view a : allowed) {
      must_be += StrCat(must_be.empty() ? "" : " or ", "'", a, "'");
    }
    const auto known = [allowed](std::string_view s) {
      for (std::string_view a : allowed) {
        if (s == a) return true;
      }
      return false;
    };
    return String(key, known, must_be, out);
  }
  Status Sha256(std::string_view key, std::string* out) {
    return String(key, IsSha256Hex, "64 lowercase hex digits", out);
  }
  Status Base64Of(std::string_view key, int64_t n_bytes, std::string* out) {
    const auto decodes = [n_bytes](std::string_view s) {
      // (checked before decoding so a huge string is not decoded just to be refused)
      if (static_cast<int64_t>(s.size()) != (n_bytes + 2) / 3 * 4) return false;
      const StatusOr<std::string> raw = Base64Decode(s);
      return raw.ok() && static_cast<int64_t>(raw->size()) == n_bytes;
    };
    return String(key, decodes, StrCat("base64 of ", n_bytes, " bytes"), out);
  }
  Status TokenIds(std::string_view key, std::vector<int32_t>* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, RequireArray(key, kMaxTokenIds));
    out->clear();
    out->reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      int64_t id = 0;
      const IntCheck check = CheckInt((*v)[i], 0, kMaxTokenCount, &id);
      if (check != IntCheck::kOk) {
        return Fail(StrCat(key, "[", i, "]"), IntMustBe(0, kMaxTokenCount, check), (*v)[i]);
      }
      out->push_back(static_cast<int32_t>(id));
    }
    return OkStatus();
  }
  // An optional list of numbers in [min, max] (absent or null: empty).
  Status OptionalNumbers(std::string_view key, double min, double max, std::vector<double>* out) {
    out->clear();
    const json* v = Take(key);
    if (v == nullptr || v->is_null()) return OkStatus();
    if (!v->is_array() || static_cast<int64_t>(v->size()) > kMaxTokenIds) {
      return Fail(key, StrCat("an array of at most ", kMaxTokenIds, " numbers"), *v);
    }
    for (size_t i = 0; i < v->size(); ++i) {
      const json& item = (*v)[i];
      const double d = item.is_number() ? item.get<double>() : NAN;
      if (!(d >= min && d <= max)) {
        return Fail(StrCat(key, "[", i, "]"),
                    StrCat("a number in [", json(min).dump(), ", ", json(max).dump(), "]"), item);
      }
      out->push_back(d);
    }
    return OkStatus();
  }
  // Fails unless `list` (a field read before) is empty or has `n` items.
  Status SameLength(std::string_view key, size_t got, size_t n, std::string_view other) {
    if (got == 0 || got == n) return OkStatus();
    return InvalidArgumentError(FramePrefix(frame_), "field '", path_, key, "' has ", got,
                                " items but '", other, "' has ", n);
  }
  // A list of distinct ids (model names).
  Status IdList(std::string_view key, int64_t max_items, std::vector<std::string>* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, RequireArray(key, max_items));
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      const json& item = (*v)[i];
      if (!item.is_string() || !IsId(item.get_ref<const std::string&>())) {
        return Fail(StrCat(key, "[", i, "]"), IdMustBe(), item);
      }
      out->push_back(item.get<std::string>());
    }
    return Distinct(key, *out, [](const std::string& s) -> const std::string& { return s; });
  }
  Status TextList(std::string_view key, int64_t max_items, int64_t max_bytes,
                  std::vector<std::string>* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, RequireArray(key, max_items));
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      const json& item = (*v)[i];
      if (!item.is_string() || static_cast<int64_t>(item.get_ref<const std::string&>().size()) > max_bytes) {
        return Fail(StrCat(key, "[", i, "]"), StrCat("a string of at most ", max_bytes, " bytes"),
                    item);
      }
      out->push_back(item.get<std::string>());
    }
    return OkStatus();
  }
  // Any JSON object, kept as it is.
  Status Object(std::string_view key, json* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, Require(key));
    if (!v->is_object()) return Fail(key, "an object", *v);
    *out = *v;
    return OkStatus();
  }
  // A sub-object read by ReadFields(Reader&, T*).
  template <class T>
  Status Struct(std::string_view key, T* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, Require(key));
    return ReadStruct(key, *v, out);
  }
  template <class T>
  Status OptionalStruct(std::string_view key, std::optional<T>* out) {
    const json* v = Take(key);
    if (v == nullptr || v->is_null()) {
      out->reset();
      return OkStatus();
    }
    return ReadStruct(key, *v, &out->emplace());
  }
  template <class T>
  Status StructList(std::string_view key, int64_t max_items, std::vector<T>* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, RequireArray(key, max_items));
    out->clear();
    out->resize(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      LOOM_RETURN_IF_ERROR(ReadStruct(StrCat(key, "[", i, "]"), (*v)[i], &(*out)[i]));
    }
    return OkStatus();
  }
  // Fails if two items of `items` have the same name(item).
  template <class T, class Name>
  Status Distinct(std::string_view key, const std::vector<T>& items, Name name) {
    std::set<std::string_view> seen;
    for (const T& item : items) {
      if (!seen.insert(name(item)).second) {
        return InvalidArgumentError(FramePrefix(frame_), "field '", path_, key, "' lists ",
                                    Quote(name(item)), " twice");
      }
    }
    return OkStatus();
  }

  // Fails on the first field that no read asked for.
  Status Finish() const {
    if (taken_.size() == object_.size()) return OkStatus();
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool known = false;
      for (std::string_view k : taken_) known = known || k == it.key();
      if (!known) {
        return InvalidArgumentError(FramePrefix(frame_), "unknown field ", Quote(path_ + it.key()));
      }
    }
    return OkStatus();
  }

  // A field whose value is well formed but does not fit with the others.
  Status Invalid(std::string_view field, std::string_view why) const {
    return InvalidArgumentError(FramePrefix(frame_), "field '", path_, field, "' ", why);
  }

  Status Fail(std::string_view field, std::string_view must_be, const json& got) const {
    return InvalidArgumentError(FramePrefix(frame_), "field '", path_, field, "' must be ", must_be,
                                " (got ", Describe(got), ")");
  }

  // The field's value, or nullptr when absent; marks it read.
  const json* Take(std::string_view key) {
    const auto it = object_.find(key);
    if (it == object_.end()) return nullptr;
    taken_.push_back(key);
    return &*it;
  }

 private:
  static std::string IdMustBe() {
    return StrCat("1-", kMaxIdBytes, " bytes of [A-Za-z0-9._:/@+-]");
  }

  StatusOr<const json*> Require(std::string_view key) {
    const json* v = Take(key);
    if (v == nullptr) {
      return InvalidArgumentError(FramePrefix(frame_), "missing field '", path_, key, "'");
    }
    return v;
  }
  StatusOr<const json*> RequireArray(std::string_view key, int64_t max_items) {
    LOOM_ASSIGN_OR_RETURN(const json* v, Require(key));
    if (!v->is_array() || static_cast<int64_t>(v->size()) > max_items) {
      return Fail(key, StrCat("an array of at most ", max_items, " items"), *v);
    }
    return v;
  }
  template <class Check>
  Status String(std::string_view key, Check check, std::string_view must_be, std::string* out) {
    LOOM_ASSIGN_OR_RETURN(const json* v, Require(key));
    if (!v->is_string() || !check(v->get_ref<const std::string&>())) {
      return Fail(key, must_be, *v);
    }
    *out = v->get<std::string>();
    return OkStatus();
  }
  template <class T>
  Status ReadStruct(std::string_view field, const json& v, T* out) {
    if (!v.is_object()) return Fail(field, "an object", v);
    Reader sub(v, frame_, StrCat(path_, field, "."));
    LOOM_RETURN_IF_ERROR(ReadFields(sub, out));
    return sub.Finish();
  }

  const json& object_;
  std::string_view frame_;
  std::string path_;
  std::vector<std::string_view> taken_;  // keys read, pointing at the callers' literals
};

// ---- The fields of each frame and sub-object ----

Status ReadFields(Reader& r, ModelInfo* m) {
  LOOM_RETURN_IF_ERROR(r.Id("name", &m->name));
  LOOM_RETURN_IF_ERROR(r.Sha256("sha256", &m->sha256));
  LOOM_RETURN_IF_ERROR(r.Int("weight_bytes", 0, kMaxByteCount, &m->weight_bytes));
  LOOM_RETURN_IF_ERROR(r.Int("kv_bytes_per_token", 0, kMaxKvBytesPerToken, &m->kv_bytes_per_token));
  LOOM_RETURN_IF_ERROR(r.Int("context", 1, kMaxContext, &m->context));
  return r.Bool("loaded", &m->loaded);
}

Status ReadFields(Reader& r, NodeFacts* f) {
  LOOM_RETURN_IF_ERROR(r.Int("mem_total_bytes", 0, kMaxByteCount, &f->mem_total_bytes));
  LOOM_RETURN_IF_ERROR(r.Int("mem_free_bytes", 0, f->mem_total_bytes, &f->mem_free_bytes));
  LOOM_RETURN_IF_ERROR(r.Int("cores", 1, kMaxCores, &f->cores));
  LOOM_RETURN_IF_ERROR(r.Label("simd", &f->simd));
  LOOM_RETURN_IF_ERROR(
      r.Number("mem_bandwidth_gbps", 0, kMaxMemBandwidthGbps, &f->mem_bandwidth_gbps));
  LOOM_RETURN_IF_ERROR(r.Label("os", &f->os));
  LOOM_RETURN_IF_ERROR(r.Label("version", &f->version));
  return r.OptionalLabel("chip", &f->chip);
}

Status ReadFields(Reader& r, PodInfo* p) {
  LOOM_RETURN_IF_ERROR(r.Int("tp", 1, kMaxPodDegree, &p->tp));
  return r.Int("pp", 1, kMaxPodDegree, &p->pp);
}

Status ReadFields(Reader& r, SlotOffer* s) {
  LOOM_RETURN_IF_ERROR(r.Id("model", &s->model));
  LOOM_RETURN_IF_ERROR(r.Int("begin_minute", 0, 1439, &s->begin_minute));
  LOOM_RETURN_IF_ERROR(r.Int("end_minute", 1, 1440, &s->end_minute));
  if (s->begin_minute == s->end_minute) {
    return r.Invalid("end_minute", "must differ from 'begin_minute' (0 and 1440: all day)");
  }
  return OkStatus();
}

Status ReadFields(Reader& r, Location* l) {
  LOOM_RETURN_IF_ERROR(r.Number("lat", -90, 90, &l->lat));
  return r.Number("lon", -180, 180, &l->lon);
}

const std::string& ModelName(const ModelInfo& m) { return m.name; }

Status ReadFields(Reader& r, Hello* f) { return r.Id("node_id", &f->node_id); }

Status ReadFields(Reader& r, Challenge* f) {
  LOOM_RETURN_IF_ERROR(r.Base64Of("nonce", kNonceBytes, &f->nonce));
  return r.Id("hub_id", &f->hub_id);
}

Status ReadFields(Reader& r, Register* f) {
  LOOM_RETURN_IF_ERROR(r.Id("node_id", &f->node_id));
  LOOM_RETURN_IF_ERROR(r.Base64Of("signature", kSignatureBytes, &f->signature));
  LOOM_RETURN_IF_ERROR(r.Struct("facts", &f->facts));
  LOOM_RETURN_IF_ERROR(r.StructList("models", kMaxModels, &f->models));
  LOOM_RETURN_IF_ERROR(r.Distinct("models", f->models, ModelName));
  LOOM_RETURN_IF_ERROR(r.OptionalStruct("pod", &f->pod));
  LOOM_RETURN_IF_ERROR(r.Int("max_concurrency", 1, kMaxConcurrency, &f->max_concurrency));
  LOOM_RETURN_IF_ERROR(r.OptionalStruct("location", &f->location));
  LOOM_RETURN_IF_ERROR(r.OptionalStruct("slot", &f->slot));
  if (f->slot && std::none_of(f->models.begin(), f->models.end(), [&](const ModelInfo& m) {
        return m.name == f->slot->model;
      })) {
    return r.Invalid("slot", StrCat("names model ", Quote(f->slot->model),
                                    ", which is not one of the node's models"));
  }
  return OkStatus();
}

Status ReadFields(Reader& r, Welcome* f) {
  LOOM_RETURN_IF_ERROR(r.Id("node_id", &f->node_id));
  return r.Int("heartbeat_ms", 100, 600000, &f->heartbeat_ms);
}

Status ReadFields(Reader& r, Heartbeat* f) {
  LOOM_RETURN_IF_ERROR(r.Int("running", 0, kMaxConcurrency, &f->running));
  LOOM_RETURN_IF_ERROR(r.Int("waiting", 0, kMaxWaiting, &f->waiting));
  LOOM_RETURN_IF_ERROR(r.Int("mem_free_bytes", 0, kMaxByteCount, &f->mem_free_bytes));
  LOOM_RETURN_IF_ERROR(r.Bool("draining", &f->draining));
  LOOM_RETURN_IF_ERROR(r.Bool("paused", &f->paused));
  return r.IdList("loaded", kMaxModels, &f->loaded);
}

Status ReadFields(Reader& r, Capacity* f) {
  LOOM_RETURN_IF_ERROR(r.StructList("models", kMaxModels, &f->models));
  LOOM_RETURN_IF_ERROR(r.Distinct("models", f->models, ModelName));
  LOOM_RETURN_IF_ERROR(r.Int("max_concurrency", 1, kMaxConcurrency, &f->max_concurrency));
  return r.Int("mem_free_bytes", 0, kMaxByteCount, &f->mem_free_bytes);
}

Status ReadFields(Reader& r, Assign* f) {
  LOOM_RETURN_IF_ERROR(r.Id("attempt_id", &f->attempt_id));
  LOOM_RETURN_IF_ERROR(r.Id("model", &f->model));
  LOOM_RETURN_IF_ERROR(r.OneOf("endpoint", {"chat", "completion"}, &f->endpoint));
  LOOM_RETURN_IF_ERROR(r.Object("request", &f->request));
  return r.Int("first_token_deadline_ms", 1, 3600000, &f->first_token_deadline_ms);
}

Status ReadFields(Reader& r, Accepted* f) {
  LOOM_RETURN_IF_ERROR(r.Id("attempt_id", &f->attempt_id));
  return r.TokenIds("prompt_token_ids", &f->prompt_token_ids);
}

Status ReadFields(Reader& r, Chunk* f) {
  LOOM_RETURN_IF_ERROR(r.Id("attempt_id", &f->attempt_id));
  LOOM_RETURN_IF_ERROR(r.Int("index", 0, kMaxTokenCount, &f->index));
  LOOM_RETURN_IF_ERROR(r.Text("text", kMaxChunkTextBytes, &f->text));
  LOOM_RETURN_IF_ERROR(r.TokenIds("token_ids", &f->token_ids));
  LOOM_RETURN_IF_ERROR(r.OptionalNumbers("logprobs", kMinLogprob, kMaxLogprob, &f->logprobs));
  LOOM_RETURN_IF_ERROR(
      r.OptionalNumbers("best_logprobs", kMinLogprob, kMaxLogprob, &f->best_logprobs));
  const size_t n = f->token_ids.size();
  LOOM_RETURN_IF_ERROR(r.SameLength("logprobs", f->logprobs.size(), n, "token_ids"));
  return r.SameLength("best_logprobs", f->best_logprobs.size(), n, "token_ids");
}

Status ReadFields(Reader& r, Complete* f) {
  LOOM_RETURN_IF_ERROR(r.Id("attempt_id", &f->attempt_id));
  LOOM_RETURN_IF_ERROR(r.OneOf("finish_reason", {"stop", "length"}, &f->finish_reason));
  LOOM_RETURN_IF_ERROR(r.Int("prompt_tokens", 0, kMaxTokenCount, &f->prompt_tokens));
  return r.Int("completion_tokens", 0, kMaxTokenCount, &f->completion_tokens);
}

Status ReadFields(Reader& r, Error* f) {
  LOOM_RETURN_IF_ERROR(r.OptionalId("attempt_id", &f->attempt_id));
  LOOM_RETURN_IF_ERROR(r.Id("code", &f->code));
  LOOM_RETURN_IF_ERROR(r.Text("message", kMaxMessageBytes, &f->message));
  return r.Int("status", 100, 599, &f->status);
}

Status ReadFields(Reader& r, Cancel* f) { return r.Id("attempt_id", &f->attempt_id); }
Status ReadFields(Reader&, Drain*) { return OkStatus(); }
Status ReadFields(Reader& r, LoadModel* f) { return r.Id("model", &f->model); }
Status ReadFields(Reader& r, UnloadModel* f) { return r.Id("model", &f->model); }

Status ReadFields(Reader& r, Earning* e) {
  LOOM_RETURN_IF_ERROR(r.OneOf("kind", {"tokens", "slot"}, &e->kind));
  LOOM_RETURN_IF_ERROR(r.Id("ref", &e->ref));
  LOOM_RETURN_IF_ERROR(r.Id("model", &e->model));
  LOOM_RETURN_IF_ERROR(r.Int("tokens", 0, kMaxByteCount, &e->tokens));
  LOOM_RETURN_IF_ERROR(r.Int("micro", 0, kMaxByteCount, &e->micro));
  return r.Int("at_ms", 0, INT64_MAX, &e->at_ms);
}

Status ReadFields(Reader& r, Standing* f) {
  LOOM_RETURN_IF_ERROR(r.Int("pending_micro", 0, kMaxByteCount, &f->pending_micro));
  LOOM_RETURN_IF_ERROR(r.Int("available_micro", 0, kMaxByteCount, &f->available_micro));
  LOOM_RETURN_IF_ERROR(r.StructList("recent", kMaxEarnings, &f->recent));
  LOOM_RETURN_IF_ERROR(r.TextList("idle_reasons", kMaxReasons, kMaxMessageBytes, &f->idle_reasons));
  return r.Text("slot", kMaxMessageBytes, &f->slot);
}

// ---- Dispatch on "type" over the alternatives of Frame ----

template <class T>
StatusOr<Frame> ParseAs(const json& object) {
  T frame;
  Reader r(object, T::kType, "");
  r.Take("v");  // (checked by ParseFrame)
  r.Take("type");
  LOOM_RETURN_IF_ERROR(ReadFields(r, &frame));
  LOOM_RETURN_IF_ERROR(r.Finish());
  return Frame(std::move(frame));
}

using ParseFn = StatusOr<Frame> (*)(const json&);
struct FrameKind {
  std::string_view type;
  ParseFn parse;
};

template <size_t... I>
constexpr std::array<FrameKind, sizeof...(I)> MakeKinds(std::index_sequence<I...>) {
  return {FrameKind{std::variant_alternative_t<I, Frame>::kType,
                    &ParseAs<std::variant_alternative_t<I, Frame>>}...};
}
constexpr auto kKinds = MakeKinds(std::make_index_sequence<std::variant_size_v<Frame>>());

std::string KnownTypes() {
  std::string out;
  for (const FrameKind& k : kKinds) out += StrCat(out.empty() ? "" : ", ", k.type);
  return out;
}

}  // namespace

StatusOr<Frame> ParseFrame(std::string_view text) {
  if (static_cast<int64_t>(text.size()) > kMaxFrameBytes) {
    return InvalidArgumentError("frame: ", text.size(), " bytes is over the limit of ",
                                kMaxFrameBytes);
  }
  Prescan prescan;
  if (!json::sax_parse(text.begin(), text.end(), &prescan)) {
    return InvalidArgumentError(prescan.error());
  }
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgumentError("frame: not valid JSON");
  if (!root.is_object()) {
    return InvalidArgumentError("frame: must be a JSON object (got ", Describe(root), ")");
  }

  Reader top(root, "", "");
  int64_t version = 0;
  const json* v = top.Take("v");
  if (v == nullptr) return InvalidArgumentError("frame: missing field 'v' (the protocol version)");
  if (CheckInt(*v, 0, INT64_MAX, &version) != IntCheck::kOk) {
    return top.Fail("v", "a non-negative integer", *v);
  }
  if (version != kProtocolVersion) {
    return UnimplementedError("frame: protocol version ", version,
                              " is not supported (this build understands version ",
                              kProtocolVersion, ")");
  }
  const json* type = top.Take("type");
  if (type == nullptr) return InvalidArgumentError("frame: missing field 'type'");
  if (!type->is_string()) return top.Fail("type", "a string", *type);
  const std::string& name = type->get_ref<const std::string&>();
  for (const FrameKind& kind : kKinds) {
    if (kind.type == name) return kind.parse(root);
  }
  return InvalidArgumentError("frame: unknown type ", Quote(name), " (known: ", KnownTypes(), ")");
}

}  // namespace loom::network::protocol
