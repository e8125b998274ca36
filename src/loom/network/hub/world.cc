#include "loom/network/hub/world.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cmath>

#include "loom/base/status.h"
#include "loom/network/protocol/identity.h"

namespace loom::network::hub::world {
namespace {

using json = nlohmann::json;

constexpr std::array<std::string_view, 64> kAdjectives = {
    "amber",  "azure",  "bold",   "brave",  "brisk",  "calm",   "clever", "coral",
    "crisp",  "dapper", "deft",   "eager",  "early",  "fair",   "fancy",  "fleet",
    "frank",  "gentle", "glad",   "golden", "grand",  "happy",  "hardy",  "hazel",
    "honest", "ivory",  "jade",   "jolly",  "keen",   "kind",   "lively", "lucky",
    "mellow", "merry",  "mighty", "misty",  "noble",  "olive",  "patient", "plucky",
    "polite", "proud",  "quick",  "quiet",  "rapid",  "ready",  "rosy",   "royal",
    "rustic", "sage",   "scarlet", "sharp", "silver", "sleek",  "snowy",  "sturdy",
    "sunny",  "swift",  "tidy",   "tranquil", "vivid", "warm",  "witty",  "zesty"};
constexpr std::array<std::string_view, 64> kAnimals = {
    "badger",  "beaver", "bison",  "bobcat",  "camel",  "caribou", "cheetah", "condor",
    "cougar",  "coyote", "crane",  "dingo",   "dolphin", "eagle",  "egret",   "falcon",
    "ferret",  "finch",  "fox",    "gazelle", "gecko",  "heron",   "ibex",    "ibis",
    "jackal",  "jaguar", "koala",  "lemur",   "leopard", "lynx",   "magpie",  "marmot",
    "marten",  "mink",   "moose",  "narwhal", "newt",   "ocelot",  "orca",    "osprey",
    "otter",   "owl",    "panda",  "panther", "pelican", "puffin", "quail",   "rabbit",
    "raven",   "robin",  "salmon", "seal",    "shrike", "sparrow", "stoat",   "swan",
    "tapir",   "tern",   "tiger",  "toucan",  "walrus", "weasel",  "wombat",  "yak"};

constexpr int64_t kTiersGb[] = {1,  2,  4,   8,   12,  16,  24,  32,   48,   64,
                                96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};

int HexDigit(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

}  // namespace

std::string Pseudonym(std::string_view node_id) {
  // Keyed by a fixed label so that the name is not the plain hash of the id; 6 + 6 + ~13.3 bits.
  const std::string h = protocol::Sha256Hex(StrCat("loom world pseudonym v1\n", node_id));
  uint64_t v = 0;
  for (int i = 0; i < 16; ++i) v = (v << 4) | static_cast<uint64_t>(HexDigit(h[i]));
  const std::string_view adjective = kAdjectives[v & 63];
  const std::string_view animal = kAnimals[(v >> 6) & 63];
  char digits[8];
  std::snprintf(digits, sizeof(digits), "%04u", static_cast<unsigned>((v >> 12) % 10000));
  return StrCat(adjective, "-", animal, "-", digits);
}

int64_t MemoryTierGb(int64_t bytes) {
  const double gb = static_cast<double>(bytes) / double(int64_t{1} << 30);
  if (!(gb >= 0.5)) return 0;
  int64_t best = 1;
  double best_distance = 1e300;
  auto consider = [&](int64_t tier) {
    const double d = std::fabs(std::log(gb / static_cast<double>(tier)));
    if (d < best_distance) best_distance = d, best = tier;
  };
  for (int64_t t : kTiersGb) consider(t);
  if (gb > 2048) consider(std::max<int64_t>(1, std::llround(gb / 1024)) * 1024);
  return best;
}

protocol::Location RoundLocation(const protocol::Location& exact) {
  const double step = kLocationStepDegrees;
  protocol::Location r;
  r.lat = std::clamp(std::round(exact.lat / step) * step, -90.0, 90.0);
  r.lon = std::round(exact.lon / step) * step;
  if (r.lon >= 180) r.lon -= 360;  // 180 and -180 are one meridian
  if (r.lon < -180) r.lon = -180;
  // (-0.0 prints as "-0.0": make it 0)
  if (r.lat == 0) r.lat = 0;
  if (r.lon == 0) r.lon = 0;
  return r;
}

std::string_view StateName(State s) {
  switch (s) {
    case State::kOnline: return "online";
    case State::kServing: return "serving";
    case State::kSuspect: return "suspect";
    case State::kOffline: return "offline";
  }
  return "offline";
}

namespace {

// `s` as a JSON string (UTF-8 passed through; frames and the store hold only valid UTF-8).  Runs
// that need no escape are appended whole.
void AppendString(std::string_view s, std::string* out) {
  out->push_back('"');
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u != 0x7f && u != '"' && u != '\\') continue;
    out->append(s.substr(run, i - run));
    if (u == '"' || u == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(u));
    } else {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", u);
      out->append(esc);
    }
    run = i + 1;
  }
  out->append(s.substr(run));
  out->push_back('"');
}

void AppendInt(int64_t v, std::string* out) {
  char b[24];
  const auto r = std::to_chars(b, b + sizeof(b), v);
  out->append(b, r.ptr);
}

// `v` with `decimals` (1 or 3) digits after the point, without printf (10,000 rows a second).
void AppendFixed(double v, int decimals, std::string* out) {
  const int64_t scale = decimals == 1 ? 10 : 1000;
  if (!std::isfinite(v) || std::fabs(v) > 1e15) v = 0;
  int64_t n = std::llround(v * static_cast<double>(scale));
  if (n < 0) {
    out->push_back('-');
    n = -n;
  }
  AppendInt(n / scale, out);
  out->push_back('.');
  char b[8];
  int64_t frac = n % scale;
  for (int i = decimals - 1; i >= 0; --i, frac /= 10) b[i] = static_cast<char>('0' + frac % 10);
  out->append(b, static_cast<size_t>(decimals));
}

}  // namespace

void AppendMachineJson(const Machine& m, std::string* out) {
  out->append("{\"name\":");
  AppendString(m.name, out);
  out->append(",\"state\":\"").append(StateName(m.state)).append("\",\"chip\":");
  if (m.chip.empty()) out->append("null");
  else AppendString(m.chip, out);
  out->append(",\"memory_gb\":");
  if (m.memory_gb < 0) out->append("null");
  else AppendInt(m.memory_gb, out);
  out->append(",\"slot\":");
  AppendString(m.slot, out);
  out->append(",\"models\":[");
  for (size_t i = 0; i < m.models.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendString(m.models[i], out);
  }
  out->append("],\"tokens_per_s\":");
  AppendFixed(m.tokens_per_s, 1, out);
  out->append(",\"reliability_30d\":");
  if (m.reliability) AppendFixed(*m.reliability, 3, out);
  else out->append("null");
  out->append(",\"verification_pass_rate\":");
  if (m.verification_pass_rate) AppendFixed(*m.verification_pass_rate, 3, out);
  else out->append("null");
  out->append(",\"tokens_served_30d\":");
  AppendInt(m.tokens_served, out);
  out->append(",\"location\":");
  if (m.location) {
    out->push_back('[');
    AppendFixed(m.location->lat, 1, out);
    out->push_back(',');
    AppendFixed(m.location->lon, 1, out);
    out->push_back(']');
  } else {
    out->append("null");
  }
  out->append(",\"pod\":");
  if (m.pod) {
    out->append(StrCat("{\"tp\":", m.pod->tp, ",\"pp\":", m.pod->pp,
                       ",\"ranks\":", m.pod->tp * m.pod->pp, "}"));
  } else {
    out->append("null");
  }
  out->push_back('}');
}

std::string MachineJson(const Machine& m) {
  std::string out;
  AppendMachineJson(m, &out);
  return out;
}

json TotalsJson(const Totals& t, const std::vector<ModelLine>& models) {
  json list = json::array();
  for (const ModelLine& m : models) {
    list.push_back(json{{"name", m.name},
                        {"holders", m.holders},
                        {"loaded", m.loaded},
                        {"tokens_per_s", std::round(m.tokens_per_s * 10) / 10},
                        {"requests_last_hour", m.requests_last_hour},
                        {"queued", m.queued}});
  }
  return json{{"machines_online", t.machines_online},
              {"machines_serving", t.machines_serving},
              {"machines_offline", t.machines_offline},
              {"memory_bytes", t.memory_bytes},
              {"tokens_per_day", t.tokens_per_day},
              {"models", list}};
}

std::optional<double> Reliability(int64_t connected_ms, int64_t enrolled_ms, int64_t now_ms) {
  const int64_t window = std::min(kReliabilityWindowMs, now_ms - enrolled_ms);
  if (window <= 0) return std::nullopt;
  return std::clamp(static_cast<double>(connected_ms) / static_cast<double>(window), 0.0, 1.0);
}

}  // namespace loom::network::hub::world
