#include "loom/cluster/profiles.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/cluster/profiles_builtin.h"

namespace loom::cluster {

namespace {

using nlohmann::json;

StatusOr<json> ParseObject(std::string_view text, const std::string& origin,
                           std::string_view kind) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(origin, ": not valid JSON");
  if (!j.is_object()) return InvalidArgumentError(origin, ": a profile is a JSON object");
  auto k = j.find("kind");
  if (k == j.end() || !k->is_string()) {
    return InvalidArgumentError(origin, ": missing field \"kind\" (\"machine\" or \"link\")");
  }
  if (k->get<std::string>() != kind) {
    return InvalidArgumentError(origin, ": a ", k->get<std::string>(), " profile where a ", kind,
                                " profile is needed");
  }
  return j;
}

StatusOr<std::string> Text(const json& j, const char* field, const std::string& origin) {
  auto it = j.find(field);
  if (it == j.end()) return InvalidArgumentError(origin, ": missing field \"", field, "\"");
  if (!it->is_string() || it->get<std::string>().empty()) {
    return InvalidArgumentError(origin, ": field \"", field, "\" must be a non-empty string");
  }
  return it->get<std::string>();
}

// {"value": positive number, "source": non-empty text}; the source is appended to `sources`.
StatusOr<double> Number(const json& j, const char* field, const std::string& origin,
                        std::vector<std::string>* sources) {
  auto it = j.find(field);
  if (it == j.end()) return InvalidArgumentError(origin, ": missing field \"", field, "\"");
  if (!it->is_object()) {
    return InvalidArgumentError(origin, ": field \"", field,
                                "\" must be an object {\"value\": number, \"source\": text}");
  }
  auto v = it->find("value");
  if (v == it->end() || !v->is_number()) {
    return InvalidArgumentError(origin, ": field \"", field, "\" has no numeric \"value\"");
  }
  const double value = v->get<double>();
  if (!std::isfinite(value) || value <= 0) {
    return InvalidArgumentError(origin, ": field \"", field, "\" must be positive (got ", value,
                                ")");
  }
  auto s = it->find("source");
  if (s == it->end() || !s->is_string() || s->get<std::string>().empty()) {
    return InvalidArgumentError(origin, ": field \"", field,
                                "\" has no \"source\" (say where the number comes from, or "
                                "\"assumed: ...\")");
  }
  sources->push_back(std::string(field) + ": " + s->get<std::string>());
  return value;
}

std::string Optional(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// The built-in profile's text, or a file's; `origin` becomes what errors name.
StatusOr<std::string> ProfileText(const std::string& name_or_file, std::string_view kind,
                                  std::string* origin) {
  for (const BuiltinProfile& p : BuiltinProfiles()) {
    if (p.name == name_or_file) {
      *origin = "profile " + name_or_file;
      return std::string(p.json);
    }
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name_or_file, ec)) {
    std::string known;
    for (const std::string& n : BuiltinProfileNames(kind)) known += (known.empty() ? "" : ", ") + n;
    return NotFoundError("no ", kind, " profile named '", name_or_file,
                         "' and no such file; built-in ", kind, " profiles: ", known);
  }
  std::ifstream in(name_or_file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) return NotFoundError(name_or_file, ": cannot read the profile");
  *origin = name_or_file;
  return text.str();
}

}  // namespace

RankFacts MachineProfile::Facts() const {
  RankFacts f;
  f.memory_bytes = memory_bytes;
  f.decode_bytes_per_s = memory_bytes_per_s * decode_efficiency;
  f.decode_bytes_per_s_shared = 0;  // one rank per machine
  f.prompt_flops = prompt_flops;
  return f;
}

StatusOr<MachineProfile> ParseMachineProfile(std::string_view text, const std::string& origin) {
  LOOM_ASSIGN_OR_RETURN(const json j, ParseObject(text, origin, "machine"));
  MachineProfile p;
  LOOM_ASSIGN_OR_RETURN(p.name, Text(j, "name", origin));
  p.description = Optional(j, "description");
  LOOM_ASSIGN_OR_RETURN(const double memory, Number(j, "memory_bytes", origin, &p.sources));
  if (memory < 1 << 20 || memory > 1e15) {
    return InvalidArgumentError(origin, ": memory_bytes ", memory,
                                " is not a plausible memory size (1 MiB to 1 PB)");
  }
  p.memory_bytes = static_cast<int64_t>(memory);
  LOOM_ASSIGN_OR_RETURN(const double gbs, Number(j, "memory_gb_per_s", origin, &p.sources));
  p.memory_bytes_per_s = gbs * 1e9;
  LOOM_ASSIGN_OR_RETURN(p.decode_efficiency, Number(j, "decode_efficiency", origin, &p.sources));
  if (p.decode_efficiency > 1) {
    return InvalidArgumentError(origin, ": decode_efficiency ", p.decode_efficiency,
                                " is above 1 (a share of the memory bandwidth)");
  }
  LOOM_ASSIGN_OR_RETURN(const double tflops, Number(j, "prompt_tflops", origin, &p.sources));
  p.prompt_flops = tflops * 1e12;
  return p;
}

StatusOr<LinkProfile> ParseLinkProfile(std::string_view text, const std::string& origin) {
  LOOM_ASSIGN_OR_RETURN(const json j, ParseObject(text, origin, "link"));
  LinkProfile p;
  LOOM_ASSIGN_OR_RETURN(p.name, Text(j, "name", origin));
  p.description = Optional(j, "description");
  LOOM_ASSIGN_OR_RETURN(const double us, Number(j, "latency_us", origin, &p.sources));
  p.latency_s = us * 1e-6;
  LOOM_ASSIGN_OR_RETURN(const double gbps, Number(j, "gbit_per_s", origin, &p.sources));
  p.bytes_per_s = gbps * 1e9 / 8;
  return p;
}

StatusOr<MachineProfile> LoadMachineProfile(const std::string& name_or_file) {
  std::string origin;
  LOOM_ASSIGN_OR_RETURN(const std::string text, ProfileText(name_or_file, "machine", &origin));
  return ParseMachineProfile(text, origin);
}

StatusOr<LinkProfile> LoadLinkProfile(const std::string& name_or_file) {
  std::string origin;
  LOOM_ASSIGN_OR_RETURN(const std::string text, ProfileText(name_or_file, "link", &origin));
  return ParseLinkProfile(text, origin);
}

std::vector<std::string> BuiltinProfileNames(std::string_view kind) {
  std::vector<std::string> names;
  for (const BuiltinProfile& p : BuiltinProfiles()) {
    const json j = json::parse(p.json, nullptr, false);
    if (j.is_object() && j.value("kind", "") == kind) names.push_back(std::string(p.name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace loom::cluster
