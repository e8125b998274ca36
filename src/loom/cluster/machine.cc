#include "loom/cluster/machine.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "loom/base/sysinfo.h"
#include "loom/kernels/simd_target.h"

namespace loom::cluster {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool ParseIpv4(const std::string& text, uint32_t* out) {
  in_addr a{};
  if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

}  // namespace

std::vector<Interface> ListInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0) continue;
    Interface f;
    f.name = i->ifa_name;
    char text[INET_ADDRSTRLEN] = {};
    const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    ::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
    f.address = text;
    if (i->ifa_netmask != nullptr) {
      const auto* mask = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask);
      f.prefix = static_cast<uint8_t>(__builtin_popcount(mask->sin_addr.s_addr));
    }
    out.push_back(std::move(f));
    if (static_cast<int64_t>(out.size()) == kMaxListItems) break;
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<std::string> ListRdmaDevices() {
  std::vector<std::string> out;
  std::error_code ec;
  const std::filesystem::path dir = "/sys/class/infiniband";
  if (!std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(entry.path().filename().string());
    if (static_cast<int64_t>(out.size()) == kMaxListItems) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool SameSubnet(const std::string& a, const std::string& b, int prefix) {
  uint32_t x = 0, y = 0;
  if (!ParseIpv4(a, &x) || !ParseIpv4(b, &y) || prefix < 0 || prefix > 32) return false;
  const uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return (x & mask) == (y & mask);
}

Facts MeasureMachine(int64_t max_memory_bytes) {
  Facts f;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) f.name = host;
  struct utsname u {};
  f.os = ::uname(&u) == 0 ? std::string(u.sysname) + " " + u.release + " " + u.machine : "unknown";
  f.cpu = base::CpuModelName();
  f.simd = std::string(kernels::SimdTargetName(kernels::ActiveSimdTarget()));
  f.boot_id = ReadFirstLine("/proc/sys/kernel/random/boot_id");
  f.cores = std::max(1u, std::thread::hardware_concurrency());
  const base::MemoryInfo mem = base::ReadMemoryInfo();
  f.memory_total = static_cast<uint64_t>(std::max<int64_t>(0, mem.total_bytes));
  f.memory_available = std::min(
      f.memory_total, static_cast<uint64_t>(std::max<int64_t>(0, mem.available_bytes)));
  f.memory_offered = max_memory_bytes > 0
                         ? std::min(f.memory_available, static_cast<uint64_t>(max_memory_bytes))
                         : f.memory_available;
  const double bw = base::MeasureReadBandwidth(1, int64_t{256} << 20, 3);
  f.read_bytes_per_s = std::isfinite(bw) && bw > 0 ? bw : 0;
  f.rdma = ListRdmaDevices();
  f.interfaces = ListInterfaces();
  // Labels go on the wire: drop control characters and cut to the wire's limit.
  for (std::string* s : {&f.name, &f.os, &f.cpu, &f.simd, &f.boot_id}) {
    std::erase_if(*s, [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
    if (static_cast<int64_t>(s->size()) > kMaxLabelBytes) s->resize(kMaxLabelBytes);
  }
  return f;
}

}  // namespace loom::cluster
