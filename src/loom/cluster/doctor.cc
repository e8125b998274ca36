// `loom doctor`'s sections: this machine, its chip (Apple Silicon), the cluster's links.  The model
// section is in doctor_model.cc, the text rendering in doctor_text.cc.
#include "loom/cluster/doctor.h"

#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <map>
#include <utility>

#include "loom/cluster/daemon.h"

namespace loom::cluster {
namespace {

using json = nlohmann::json;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// The chip table.  Source: ../shared/docs/APPLE.md (from what the project was built from and
// Apple's specifications): Thunderbolt 5 on M4 Pro, M4 Max, M3 Ultra and later Pro, Max and Ultra
// chips (Mac mini with M4 Pro or M5 Pro included), RDMA over it on macOS 26.2 or later; the base
// M4 and the other chips Thunderbolt 4 (APPLE.md groups the older chips so; the first M1 Macs'
// ports are Thunderbolt 3 / USB 4, which is the same here: no RDMA), TCP only.  Memory bandwidth
// only where APPLE.md lists Apple's figure (the higher bin's where there are two).
enum class Tier : uint8_t { kBase, kPro, kMax, kUltra };

struct ChipRow {
  int generation;  // the N of MN
  Tier tier;
  int thunderbolt;
  double memory_gbytes_per_s;
  const char* memory_note;
};

constexpr std::array<ChipRow, 18> kChips = {{
    {1, Tier::kBase, 4, 0, ""},
    {1, Tier::kPro, 4, 0, ""},
    {1, Tier::kMax, 4, 0, ""},
    {1, Tier::kUltra, 4, 0, ""},
    {2, Tier::kBase, 4, 0, ""},
    {2, Tier::kPro, 4, 0, ""},
    {2, Tier::kMax, 4, 0, ""},
    {2, Tier::kUltra, 4, 800, ""},
    {3, Tier::kBase, 4, 0, ""},
    {3, Tier::kPro, 4, 0, ""},
    {3, Tier::kMax, 4, 400, "300 / 400 GB/s by GPU bin"},
    {3, Tier::kUltra, 5, 819, ""},
    {4, Tier::kBase, 4, 120, ""},
    {4, Tier::kPro, 5, 273, ""},
    {4, Tier::kMax, 5, 546, "410 / 546 GB/s by bin"},
    {5, Tier::kBase, 4, 153, ""},
    {5, Tier::kPro, 5, 0, ""},
    {5, Tier::kMax, 5, 0, ""},
}};

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kBase:
      return "";
    case Tier::kPro:
      return " Pro";
    case Tier::kMax:
      return " Max";
    case Tier::kUltra:
      return " Ultra";
  }
  return "";
}

// "apple m4 max ..." -> generation 4, Max; false when the name is no M-series chip.
bool ParseChip(std::string_view name, int* generation, Tier* tier) {
  std::string s = Lower(name);
  size_t i = 0;
  auto skip_spaces = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  skip_spaces();
  if (s.compare(i, 5, "apple") == 0) i += 5;
  skip_spaces();
  if (i >= s.size() || s[i] != 'm') return false;
  ++i;
  int gen = 0, digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && digits < 3) {
    gen = gen * 10 + (s[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || gen == 0) return false;
  if (i < s.size() && std::isalnum(static_cast<unsigned char>(s[i]))) return false;  // "m4x"
  skip_spaces();
  size_t end = i;
  while (end < s.size() && std::isalpha(static_cast<unsigned char>(s[end]))) ++end;
  const std::string word = s.substr(i, end - i);
  if (word.empty()) {
    *tier = Tier::kBase;
  } else if (word == "pro") {
    *tier = Tier::kPro;
  } else if (word == "max") {
    *tier = Tier::kMax;
  } else if (word == "ultra") {
    *tier = Tier::kUltra;
  } else {
    return false;  // "M4 Maxx", "M4 Turbo": not a chip we know the shape of
  }
  if (end < s.size() && std::isalnum(static_cast<unsigned char>(s[end]))) return false;
  *generation = gen;
  return true;
}

// Accessors that never throw on a daemon's answer of an unexpected shape.
std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double Num(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

const json& Arr(const json& j, const char* key) {
  static const json kEmpty = json::array();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

}  // namespace

bool IsAppleName(std::string_view cpu) { return Lower(cpu).rfind("apple", 0) == 0; }

AppleChip LookupAppleChip(std::string_view name) {
  AppleChip c;
  c.query = std::string(name);
  int generation = 0;
  Tier tier = Tier::kBase;
  if (!ParseChip(name, &generation, &tier)) return c;
  c.chip = "Apple M" + std::to_string(generation) + TierName(tier);
  const ChipRow* row = nullptr;
  for (const ChipRow& r : kChips) {
    if (r.generation == generation && r.tier == tier) row = &r;
  }
  if (row != nullptr) {
    c.in_table = true;
    c.thunderbolt = row->thunderbolt;
    c.memory_gbytes_per_s = row->memory_gbytes_per_s;
    c.memory_note = row->memory_note;
  } else if (generation >= 3) {
    // Not listed (a chip newer than the table, or an Ultra of a generation without one listed):
    // the rule says Pro, Max and Ultra chips from the M3 Ultra on have Thunderbolt 5, base ones
    // Thunderbolt 4.
    c.thunderbolt = tier == Tier::kBase ? 4 : 5;
  }
  c.rdma = c.thunderbolt == 5;
  return c;
}

MacOsVersion MacOsFromUname(std::string_view os) {
  MacOsVersion v;
  if (os.rfind("Darwin ", 0) != 0) return v;
  int darwin = 0, minor = 0;
  if (std::sscanf(std::string(os.substr(7)).c_str(), "%d.%d", &darwin, &minor) < 1) return v;
  if (darwin >= 25) {  // Darwin 25 is macOS 26 (the year-numbered releases)
    v.major = darwin + 1;
  } else if (darwin >= 20) {  // Darwin 20..24: macOS 11..15
    v.major = darwin - 9;
  } else if (darwin >= 4) {  // Mac OS X 10.0..10.15
    v.major = 10;
    minor = darwin - 4;
  } else {
    return v;
  }
  v.minor = minor;
  return v;
}

std::string ThisChipName(const std::string& cpu) {
#if defined(__APPLE__)
  char brand[256] = {};
  size_t size = sizeof(brand) - 1;
  if (::sysctlbyname("machdep.cpu.brand_string", brand, &size, nullptr, 0) == 0 && brand[0]) {
    return brand;
  }
#endif
  return cpu;
}

json MachineSection(const Facts& f, double all_cores_bytes_per_s) {
  json ifs = json::array();
  for (const Interface& i : f.interfaces) {
    ifs.push_back({{"name", i.name}, {"address", i.address}, {"prefix", i.prefix}});
  }
  json advice = json::array();
  if (f.rdma.empty()) {
    advice.push_back("RDMA devices: none: tensor parallelism between machines will use TCP.");
  } else {
    std::string names;
    for (const std::string& d : f.rdma) names += (names.empty() ? "" : ", ") + d;
    advice.push_back("RDMA devices: " + names +
                     ". Loom has no RDMA transport yet, so its pods still use TCP between "
                     "machines.");
  }
  if (f.read_bytes_per_s > 0) {
    advice.push_back(
        "Generating a token reads every weight once, so memory read bandwidth bounds generation: "
        "a model of 10 GB generates at most " +
        Fixed(std::max(f.read_bytes_per_s, all_cores_bytes_per_s) / 1e10, 1) +
        " tokens/s on this machine alone.");
  }
  return {{"name", f.name},
          {"os", f.os},
          {"cpu", f.cpu},
          {"simd", f.simd},
          {"cores", f.cores},
          {"memory_total_bytes", f.memory_total},
          {"memory_available_bytes", f.memory_available},
          {"read_gbytes_per_s",
           {{"one_thread", f.read_bytes_per_s / 1e9}, {"all_cores", all_cores_bytes_per_s / 1e9}}},
          {"rdma_devices", f.rdma},
          {"interfaces", ifs},
          {"advice", advice}};
}

json ChipSection(const AppleChip& c, bool given, MacOsVersion macos) {
  json advice = json::array();
  const std::string label = c.chip.empty() ? "'" + c.query + "'" : c.chip;
  if (c.thunderbolt == 0) {
    advice.push_back("Loom's chip table does not know " + label +
                     " (it knows the Apple M1 to M5 chips), so its Thunderbolt generation and "
                     "RDMA capability are unknown. Without RDMA over Thunderbolt 5, Macs link "
                     "over TCP.");
  } else {
    const std::string source =
        c.in_table ? ""
                   : " (not in the table: inferred from the rule that Pro, Max and Ultra chips "
                     "from the M3 Ultra on have Thunderbolt 5 and base chips Thunderbolt 4)";
    if (c.rdma) {
      advice.push_back(label +
                       " has Thunderbolt 5 (80 Gbit/s each way), which carries RDMA "
                       "between Macs on macOS 26.2 or later" +
                       source + ".");
    } else {
      advice.push_back(label +
                       " has Thunderbolt 4 (40 Gbit/s) and no RDMA: Macs with it link "
                       "over TCP, through a Thunderbolt bridge or Ethernet" +
                       source + ".");
    }
  }
  if (c.rdma && !given && macos.major > 0) {
    const std::string version = std::to_string(macos.major) + "." + std::to_string(macos.minor);
    if (macos.major > 26 || (macos.major == 26 && macos.minor >= 2)) {
      advice.push_back("This Mac runs macOS " + version +
                       ", new enough for RDMA over "
                       "Thunderbolt 5 once it is enabled.");
    } else {
      advice.push_back("This Mac runs macOS " + version +
                       ": RDMA over Thunderbolt 5 needs "
                       "macOS 26.2 or later, so until then its links are TCP.");
    }
  }
  if (c.memory_gbytes_per_s > 0) {
    advice.push_back("Apple publishes " + Fixed(c.memory_gbytes_per_s, 0) +
                     " GB/s of unified memory bandwidth for it" +
                     (c.memory_note.empty() ? "" : " (" + c.memory_note + ")") + ".");
  }
  advice.push_back(
      "What that means: tensor parallelism across Macs needs RDMA over Thunderbolt 5 "
      "(remote direct memory access: one Mac writes into another's memory without the network "
      "stack, which lowers latency between Macs from about 300 us to under 50 us); over TCP "
      "links prefer a pipeline split.");
  if (c.rdma) {
    advice.push_back(
        "Loom's pods use TCP between machines today (an RDMA transport is still to "
        "come); the model advice below shows what an RDMA-class link would give.");
  }
  json out = {{"name", c.query},
              {"source", given ? "--chip" : "this machine"},
              {"chip", c.chip.empty() ? json(nullptr) : json(c.chip)},
              {"known", c.thunderbolt != 0},
              {"in_table", c.in_table},
              {"thunderbolt", c.thunderbolt == 0 ? json(nullptr) : json(c.thunderbolt)},
              {"rdma_capable", c.rdma},
              {"rdma_needs", "macOS 26.2 or later"},
              {"memory_gbytes_per_s",
               c.memory_gbytes_per_s > 0 ? json(c.memory_gbytes_per_s) : json(nullptr)},
              {"advice", advice}};
  if (!c.memory_note.empty()) out["memory_note"] = c.memory_note;
  if (!given && macos.major > 0) {
    out["macos"] = std::to_string(macos.major) + "." + std::to_string(macos.minor);
  }
  return out;
}

json ClusterSection(const StatusOr<json>& view, const std::string& control_path) {
  const std::string start =
      "run `loom cluster join --secret S` on each machine (the same secret on every one; add "
      "`--peer HOST:" +
      std::to_string(kDefaultPort) + "` where multicast does not pass), then `loom doctor` again";
  if (!view.ok()) {
    return {{"daemon", false},
            {"control", control_path},
            {"detail", view.status().message()},
            {"advice", json::array({"No cluster daemon answers at " + control_path +
                                    ", so no links are measured. To measure the links to other "
                                    "machines, " +
                                    start + "."})}};
  }
  const json& v = *view;
  json members = json::array();
  std::map<std::string, std::string> names;
  for (const json& m : Arr(v, "members")) {
    const json facts = m.is_object() && m.contains("facts") ? m["facts"] : json::object();
    names[Str(m, "id")] = Str(m, "name");
    members.push_back(
        {{"id", Str(m, "id").substr(0, 8)},
         {"name", Str(m, "name")},
         {"self", Str(m, "state") == "self"},
         {"address", Str(m, "address")},
         {"cores", static_cast<int64_t>(Num(facts, "cores"))},
         {"memory_available_bytes", static_cast<int64_t>(Num(facts, "memory_available"))},
         {"read_gbytes_per_s", Num(facts, "read_gbytes_per_s")},
         {"simd", Str(facts, "simd")}});
  }
  // The measured links by pair of members, the daemon's fastest per pair marked.
  auto key = [](const json& l) { return std::minmax(Str(l, "a"), Str(l, "b")); };
  auto same = [](const json& x, const json& y) {
    for (const char* k : {"a", "b", "interface", "a_host", "b_host"}) {
      if (Str(x, k) != Str(y, k)) return false;
    }
    return true;
  };
  std::map<std::pair<std::string, std::string>, json> pairs;
  for (const json& l : Arr(v, "links")) {
    bool fastest = false;
    for (const json& f : Arr(v, "fastest")) fastest = fastest || same(f, l);
    json& p = pairs[key(l)];
    if (p.is_null()) {
      p = {{"a", Str(l, "a_name")}, {"b", Str(l, "b_name")}, {"links", json::array()}};
    }
    json link = {{"interface", Str(l, "interface")},
                 {"a_host", Str(l, "a_host")},
                 {"b_host", Str(l, "b_host")},
                 {"latency_us", Num(l, "latency_us")},
                 {"gbytes_per_s", Num(l, "gbytes_per_s")},
                 {"fastest", fastest}};
    if (fastest) p["fastest"] = link;
    p["links"].push_back(std::move(link));
  }
  json pair_list = json::array();
  for (auto& [k, p] : pairs) pair_list.push_back(std::move(p));

  json advice = json::array();
  const size_t n = members.size();
  const bool measuring =
      (v.contains("probing") && v["probing"].is_boolean() && v["probing"].get<bool>()) ||
      Num(v, "probes_pending") > 0;
  if (n <= 1) {
    advice.push_back("The cluster daemon runs, but no other machine has joined it yet: " + start +
                     ".");
  } else {
    const size_t want = n * (n - 1) / 2;
    if (Arr(v, "fastest").size() < want || measuring) {
      advice.push_back("Links are still being measured (" +
                       std::to_string(Arr(v, "fastest").size()) + " of " + std::to_string(want) +
                       " pairs done); run `loom doctor` again in a few seconds.");
    }
    double worst = 0;
    std::string worst_pair;
    for (const json& p : pair_list) {
      if (!p.contains("fastest")) continue;
      const double lat = Num(p["fastest"], "latency_us");
      if (lat >= worst) {
        worst = lat;
        worst_pair = Str(p, "a") + " and " + Str(p, "b");
      }
    }
    if (!worst_pair.empty()) {
      advice.push_back("The slowest pair is " + worst_pair + ": " + Fixed(worst, 0) +
                       " us one-way on its fastest link. A tensor-parallel split waits for two "
                       "such messages per layer and token, a pipeline split for one per stage "
                       "(the model advice, with -m, has the numbers).");
    }
  }
  if (v.contains("refused_by") && v["refused_by"].is_object()) {
    for (const auto& [peer, why] : v["refused_by"].items()) {
      advice.push_back("The member at " + peer + " refused this one: " +
                       (why.is_string() ? why.get<std::string>() : std::string("no reason")) +
                       " (is the secret the same?).");
    }
  }
  for (const json& d : Arr(v, "departed")) {
    advice.push_back(Str(d, "name") + " left the cluster " + Fixed(Num(d, "left_s_ago"), 0) +
                     " s ago: " + Str(d, "why") + ".");
  }
  return {{"daemon", true},     {"control", control_path}, {"name", Str(v, "name")},
          {"members", members}, {"pairs", pair_list},      {"measuring", measuring},
          {"advice", advice}};
}

json DoctorReport(json machine, json chip, json cluster, json model) {
  json out = {{"v", kDoctorVersion}, {"machine", std::move(machine)}};
  if (!chip.is_null()) out["chip"] = std::move(chip);
  if (!cluster.is_null()) out["cluster"] = std::move(cluster);
  if (!model.is_null()) out["model"] = std::move(model);
  return out;
}

}  // namespace loom::cluster
