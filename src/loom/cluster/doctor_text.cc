// `loom doctor`'s report (doctor.h) as the plain text it prints.
#include <cstdio>
#include <sstream>

#include "loom/cluster/cost_model.h"
#include "loom/cluster/doctor.h"

namespace loom::cluster {
namespace {

using json = nlohmann::json;

constexpr size_t kWidth = 100;

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Gib(double bytes) { return Fixed(bytes / double(int64_t{1} << 30), 1) + " GiB"; }

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double Num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// One advice sentence as a bullet, wrapped at kWidth columns.
void Bullet(std::ostringstream& out, const std::string& text) {
  std::string line = "  - ";
  std::istringstream words(text);
  std::string word;
  bool first = true;
  while (words >> word) {
    if (!first && line.size() + 1 + word.size() > kWidth) {
      out << line << "\n";
      line = "    ";
      first = true;
    }
    line += (first ? "" : " ") + word;
    first = false;
  }
  out << line << "\n";
}

void Advice(std::ostringstream& out, const json& section) {
  auto it = section.find("advice");
  if (it == section.end() || !it->is_array()) return;
  for (const json& a : *it) {
    if (a.is_string()) Bullet(out, a.get<std::string>());
  }
}

void Row(std::ostringstream& out, const char* key, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "  %-10s ", key);
  out << buf << value << "\n";
}

void Machine(std::ostringstream& out, const json& m) {
  out << "This machine: " << Str(m, "name") << "\n";
  Row(out, "OS", Str(m, "os"));
  Row(out, "CPU",
      Str(m, "cpu") + ", " + std::to_string(static_cast<int64_t>(Num(m, "cores"))) + " cores");
  Row(out, "SIMD", Str(m, "simd") + " (the widest vector instructions Loom's kernels use here)");
  Row(out, "memory",
      Gib(Num(m, "memory_total_bytes")) + " total, " + Gib(Num(m, "memory_available_bytes")) +
          " available");
  const json& bw = m["read_gbytes_per_s"];
  Row(out, "bandwidth",
      "memory reads at " + Fixed(Num(bw, "one_thread"), 1) + " GB/s with one thread, " +
          Fixed(Num(bw, "all_cores"), 1) + " GB/s with all " +
          std::to_string(static_cast<int64_t>(Num(m, "cores"))) + " cores");
  std::string rdma;
  for (const json& d : m["rdma_devices"]) rdma += (rdma.empty() ? "" : ", ") + d.get<std::string>();
  Row(out, "RDMA", rdma.empty() ? "none" : rdma);
  std::string ifs;
  for (const json& i : m["interfaces"]) {
    ifs += (ifs.empty() ? "" : ", ") + Str(i, "name") + " " + Str(i, "address") + "/" +
           std::to_string(static_cast<int>(Num(i, "prefix")));
  }
  Row(out, "network", ifs.empty() ? "no IPv4 interface is up" : ifs);
  Advice(out, m);
}

void Chip(std::ostringstream& out, const json& c) {
  const std::string chip = Str(c, "chip");
  out << "\nChip: " << (chip.empty() ? Str(c, "name") : chip)
      << (Str(c, "source") == "--chip" ? " (named with --chip)" : "") << "\n";
  if (c["known"].get<bool>()) {
    std::string facts = "Thunderbolt " + std::to_string(c["thunderbolt"].get<int>()) +
                        (c["rdma_capable"].get<bool>() ? ", RDMA capable (macOS 26.2 or later)"
                                                       : ", no RDMA (TCP only)");
    if (c["memory_gbytes_per_s"].is_number()) {
      facts += ", " + Fixed(c["memory_gbytes_per_s"].get<double>(), 0) + " GB/s memory";
    }
    if (!c["in_table"].get<bool>()) facts += " (inferred, not in the table)";
    Row(out, "facts", facts);
  } else {
    Row(out, "facts", "unknown chip");
  }
  Advice(out, c);
}

void Cluster(std::ostringstream& out, const json& c) {
  out << "\nLinks to other machines";
  if (!c["daemon"].get<bool>()) {
    out << "\n";
    Advice(out, c);
    return;
  }
  out << " (cluster daemon " << Str(c, "control") << ")\n";
  for (const json& m : c["members"]) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "  %-8s  %-16s %-15s %5.0f cores %7.1f GiB free %6.1f GB/s",
                  Str(m, "id").c_str(), Str(m, "name").c_str(),
                  m["self"].get<bool>() ? "(this machine)" : Str(m, "address").c_str(),
                  Num(m, "cores"), Num(m, "memory_available_bytes") / double(int64_t{1} << 30),
                  Num(m, "read_gbytes_per_s"));
    out << buf << "\n";
  }
  for (const json& p : c["pairs"]) {
    out << "  " << Str(p, "a") << " <-> " << Str(p, "b") << ":\n";
    for (const json& l : p["links"]) {
      char buf[200];
      std::snprintf(buf, sizeof(buf), "    %-10s %15s -> %-15s %8.0f us %8.2f GB/s (%.1f Gbit/s)%s",
                    Str(l, "interface").c_str(), Str(l, "a_host").c_str(), Str(l, "b_host").c_str(),
                    Num(l, "latency_us"), Num(l, "gbytes_per_s"), Num(l, "gbytes_per_s") * 8,
                    l["fastest"].get<bool>() ? "  fastest" : "");
      out << buf << "\n";
    }
  }
  Advice(out, c);
}

void Model(std::ostringstream& out, const json& m) {
  out << "\nModel: " << Str(m, "model") << " (context " << m["context"].get<int64_t>()
      << " positions)\n";
  char head[200];
  std::snprintf(head, sizeof(head), "  %-9s %13s %11s %9s   %s", "split", "gen tok/s", "compute ms",
                "link ms", "gen tok/s on the faster link");
  out << head << "\n";
  const json& plans = m["plans"];
  const json& fast = m["fast_plans"];
  for (size_t i = 0; i < plans.size(); ++i) {
    const json& p = plans[i];
    const std::string name =
        SplitName(p["tp"].get<int>(), p.value("ep", 1), p["pp"].get<int>());
    char buf[400];
    if (!p["feasible"].get<bool>()) {
      std::snprintf(buf, sizeof(buf), "  %-9s %11s    %s", name.c_str(), "-",
                    Str(p, "why_not").c_str());
    } else {
      std::string f = "-";
      if (i < fast.size() && fast[i]["feasible"].get<bool>()) {
        f = Fixed(Num(fast[i], "decode_tokens_per_s"), 1) +
            (fast[i]["pick"].get<bool>() ? " *" : "");
      }
      std::snprintf(buf, sizeof(buf), "  %-9s %11.1f %s %11.2f %9.2f   %s", name.c_str(),
                    Num(p, "decode_tokens_per_s"), p["pick"].get<bool>() ? "*" : " ",
                    Num(p, "decode_compute_ms"), Num(p, "decode_link_ms"), f.c_str());
    }
    out << buf << "\n";
  }
  const json& fl = m["fast_link"];
  out << "  (* the fastest; the faster link: " << Fixed(Num(fl, "latency_us"), 1) << " us one-way, "
      << Fixed(Num(fl, "gbits_per_s"), 1) << " Gbit/s, assumed)\n";
  Advice(out, m);
}

}  // namespace

std::string DoctorText(const json& report) {
  std::ostringstream out;
  Machine(out, report["machine"]);
  if (report.contains("chip")) Chip(out, report["chip"]);
  if (report.contains("cluster")) Cluster(out, report["cluster"]);
  if (report.contains("model")) Model(out, report["model"]);
  return out.str();
}

}  // namespace loom::cluster
