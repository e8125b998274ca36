#include "loom/network/node/node_facts.h"

#include <sys/stat.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <hwy/targets.h>
#include <nlohmann/json.hpp>

#include "loom/base/mapped_file.h"
#include "loom/base/sysinfo.h"
#include "loom/model/model_cache.h"
#include "loom/model/model_file.h"
#include "loom/network/protocol/identity.h"

namespace loom::network::node {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// SHA-256 of a file's bytes, read through its mapping.
StatusOr<std::string> HashFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(base::MappedFile file, base::MappedFile::Open(path));
  return protocol::Sha256Hex(
      std::string_view(reinterpret_cast<const char*>(file.data()), static_cast<size_t>(file.size())));
}

// The files whose bytes make up a model: the file itself, or a directory's weight files.
std::vector<std::string> ModelFiles(const std::string& path) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file(ec) && (ext == ".safetensors" || ext == ".gguf")) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string StemName(const std::string& spec, const std::string& path) {
  if (!fs::exists(spec)) return spec;  // a pulled ORG/NAME keeps its name
  fs::path p(path);
  if (fs::is_directory(p)) return p.filename().string();
  return p.stem().string();
}

// The hash of all files, each hashed once per (path, size, mtime) and remembered in `cache`.
StatusOr<std::string> HashModel(const std::vector<std::string>& files, const std::string& cache) {
  json known = json::object();
  if (!cache.empty()) {
    std::ifstream in(cache);
    if (in) {
      known = json::parse(in, nullptr, false);
      if (known.is_discarded() || !known.is_object()) known = json::object();
    }
  }
  bool changed = false;
  std::string combined;
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) return NotFoundError("model file ", f, " is missing");
    const std::string key = StrCat(fs::absolute(f).string(), "|", st.st_size, "|",
                                   st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
    std::string hex;
    if (known.contains(key) && known[key].is_string()) {
      hex = known[key].get<std::string>();
    } else {
      LOOM_ASSIGN_OR_RETURN(hex, HashFile(f));
      known[key] = hex;
      changed = true;
    }
    combined += hex;
  }
  if (changed && !cache.empty()) {
    const std::string tmp = cache + ".tmp";
    std::ofstream out(tmp);
    out << known.dump(1);
    out.close();
    if (out) fs::rename(tmp, cache);
  }
  if (files.size() == 1) return combined;
  // Several files: the hash of their hashes in name order.
  return protocol::Sha256Hex(combined);
}

}  // namespace

StatusOr<LocalModel> DescribeModel(const std::string& spec, int64_t ctx,
                                   const std::string& hash_cache) {
  LOOM_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(spec));
  StatusOr<std::unique_ptr<model::ModelFile>> m = model::OpenModel(path);
  if (!m.ok()) return m.status().WithContext("node: model " + spec);
  const model::HParams& hp = (*m)->hparams;
  LocalModel out;
  out.name = StemName(spec, path);
  out.path = path;
  const std::vector<std::string> files = ModelFiles(path);
  if (files.empty()) return NotFoundError("node: model ", spec, " has no weight files");
  int64_t bytes = 0;
  for (const std::string& f : files) {
    std::error_code ec;
    bytes += static_cast<int64_t>(fs::file_size(f, ec));
  }
  out.info.name = out.name;
  out.info.weight_bytes = bytes;
  // The engine's KV cache: keys and values in f32, every layer (model/kv_cache.h).
  out.info.kv_bytes_per_token = 2 * hp.n_layers * hp.n_kv_heads * hp.head_dim *
                                static_cast<int64_t>(sizeof(float));
  out.info.context = ctx > 0 && hp.context_length > 0 ? std::min(ctx, hp.context_length)
                                                      : std::max<int64_t>(1, hp.context_length);
  LOOM_ASSIGN_OR_RETURN(out.info.sha256, HashModel(files, hash_cache));
  return out;
}

protocol::NodeFacts MeasureFacts(int64_t max_memory_bytes, int threads) {
  protocol::NodeFacts f;
  const base::MemoryInfo mem = base::ReadMemoryInfo();
  f.mem_total_bytes = mem.total_bytes;
  f.mem_free_bytes = mem.available_bytes;
  if (max_memory_bytes > 0) {
    f.mem_total_bytes = std::min(f.mem_total_bytes, max_memory_bytes);
    f.mem_free_bytes = std::min(f.mem_free_bytes, max_memory_bytes);
  }
  f.cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  f.simd = hwy::TargetName(hwy::SupportedTargets() & ~(hwy::SupportedTargets() - 1));
  struct utsname u {};
  f.os = ::uname(&u) == 0 ? StrCat(u.sysname, "-", u.machine) : "unknown";
  f.version = "loom-0.1";
  f.chip = ChipName();
  const double bw = base::MeasureReadBandwidth(std::max(1, threads), int64_t{256} << 20, 3);
  f.mem_bandwidth_gbps = std::isfinite(bw) && bw > 0 ? bw / 1e9 : 0;
  return f;
}

namespace {

std::string CleanLabel(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;  // trim, collapse runs
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (static_cast<int64_t>(out.size()) > protocol::kMaxLabelBytes) {
    size_t cut = static_cast<size_t>(protocol::kMaxLabelBytes);
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // (UTF-8)
    out.resize(cut);
  }
  return out;
}

}  // namespace

std::string ChipFromCpuinfo(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key == "model name") return CleanLabel(line.substr(colon + 1));
  }
  return "";
}

std::string ChipName() {
#if defined(__APPLE__)
  char brand[256] = {};
  size_t size = sizeof(brand) - 1;
  if (::sysctlbyname("machdep.cpu.brand_string", brand, &size, nullptr, 0) == 0) {
    return CleanLabel(std::string_view(brand, strnlen(brand, sizeof(brand))));
  }
  return "";
#else
  std::ifstream in("/proc/cpuinfo");
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return ChipFromCpuinfo(text.str());
#endif
}

StatusOr<protocol::Location> ParseLocation(const std::string& text) {
  const auto bad = [&text]() {
    return InvalidArgumentError("--location must be LAT,LON in decimal degrees, e.g. 52.5,13.4 "
                                "(latitude in [-90, 90], longitude in [-180, 180]); got '",
                                text, "'");
  };
  const size_t comma = text.find(',');
  if (comma == std::string::npos || text.find(',', comma + 1) != std::string::npos) return bad();
  double v[2] = {0, 0};
  const std::string parts[2] = {text.substr(0, comma), text.substr(comma + 1)};
  for (int i = 0; i < 2; ++i) {
    const std::string& p = parts[i];
    if (p.empty() || p.size() > 32) return bad();
    for (char c : p) {
      if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' ||
            c == ' ')) {
        return bad();  // (no "nan", "inf", hex or exponents)
      }
    }
    char* end = nullptr;
    v[i] = std::strtod(p.c_str(), &end);
    while (end != nullptr && *end == ' ') ++end;
    if (end == p.c_str() || end == nullptr || *end != '\0' || !std::isfinite(v[i])) return bad();
  }
  if (v[0] < -90 || v[0] > 90 || v[1] < -180 || v[1] > 180) return bad();
  return protocol::Location{.lat = v[0], .lon = v[1]};
}

bool Schedule::Allows(int minute) const {
  if (ranges.empty()) return true;
  for (const auto& [b, e] : ranges) {
    if (b <= e ? (minute >= b && minute < e) : (minute >= b || minute < e)) return true;
  }
  return false;
}

StatusOr<Schedule> ParseSchedule(const std::string& text) {
  Schedule s;
  if (text.empty()) return s;
  std::stringstream in(text);
  std::string range;
  while (std::getline(in, range, ',')) {
    int h1, m1, h2, m2;
    char c1, dash, c2;
    std::stringstream r(range);
    if (!(r >> h1 >> c1 >> m1 >> dash >> h2 >> c2 >> m2) || c1 != ':' || c2 != ':' ||
        dash != '-' || h1 < 0 || h1 > 24 || h2 < 0 || h2 > 24 || m1 < 0 || m1 > 59 || m2 < 0 ||
        m2 > 59) {
      return InvalidArgumentError("'", range,
                                  "' is not HH:MM-HH:MM (for example 22:00-07:30)");
    }
    s.ranges.emplace_back(h1 * 60 + m1, h2 * 60 + m2);
  }
  return s;
}

int LocalMinuteOfDay() {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  return local.tm_hour * 60 + local.tm_min;
}

namespace {
// utime + stime of one process (its threads included), in clock ticks.
int64_t ProcessTicks(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::stringstream rest(line.substr(close + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  return utime + stime;
}
}  // namespace

double BusyMeter::Sample(const std::vector<int>& our_pids) {
  std::ifstream in("/proc/stat");
  std::string cpu;
  int64_t v[10] = {};
  in >> cpu;
  for (int64_t& x : v) in >> x;
  int64_t total = 0;
  for (int64_t x : v) total += x;
  const int64_t idle = v[3] + v[4];
  const int64_t busy = total - idle;
  int64_t ours = ProcessTicks(static_cast<int>(::getpid()));
  for (int pid : our_pids) ours += ProcessTicks(pid);
  double fraction = 0;
  if (last_total_ > 0 && total > last_total_) {
    const int64_t others = (busy - last_busy_) - (ours - last_ours_);
    fraction = std::max(0.0, static_cast<double>(others) / static_cast<double>(total - last_total_));
  }
  last_total_ = total;
  last_busy_ = busy;
  last_ours_ = ours;
  return fraction;
}

StatusOr<int64_t> ParseBytes(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v < 0) {
    return InvalidArgumentError("'", text, "' is not a size (e.g. 8G, 512M)");
  }
  std::string unit(end);
  double scale = 1;
  if (unit == "K" || unit == "k" || unit == "KB") scale = 1e3;
  else if (unit == "M" || unit == "MB") scale = 1e6;
  else if (unit == "G" || unit == "GB") scale = 1e9;
  else if (unit == "T" || unit == "TB") scale = 1e12;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) return InvalidArgumentError("'", text, "': unknown unit '", unit, "'");
  return static_cast<int64_t>(v * scale);
}

}  // namespace loom::network::node
