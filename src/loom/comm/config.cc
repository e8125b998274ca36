#include "loom/comm/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "loom/comm/backends.h"
#include "loom/comm/hostfile.h"

namespace loom::comm {

namespace {

using Factory = StatusOr<std::unique_ptr<Group>> (*)(const GroupConfig&);

struct Backend {
  std::string_view name;
  Factory create;
  bool (*available)();
};

bool Always() { return true; }

// The registry: a new transport is one more row (and one more folder).
constexpr Backend kBackends[] = {
    {"tcp", &tcp::CreateTcpGroup, &Always},
    {"shm", &shm::CreateShmGroup, &Always},
    {"mpi", &mpi::CreateMpiGroup, &mpi::MpiCompiledIn},
    {"self", &CreateSelfGroup, &Always},
};

const Backend* FindBackend(std::string_view name) {
  for (const Backend& b : kBackends) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

StatusOr<int64_t> ParseInt(std::string_view name, std::string_view text) {
  text = Trim(text);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) {
    return InvalidArgumentError(name, "='", text, "' is not an integer");
  }
  return v;
}

StatusOr<double> ParseDouble(std::string_view name, std::string_view text) {
  text = Trim(text);
  const std::string copy(text);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(v)) {
    return InvalidArgumentError(name, "='", text, "' is not a number");
  }
  return v;
}

}  // namespace

std::vector<std::string> SplitHostAlternatives(std::string_view host) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t plus = host.find('+', begin);
    const std::string_view part = host.substr(begin, plus == std::string_view::npos
                                                         ? std::string_view::npos
                                                         : plus - begin);
    if (!part.empty()) out.emplace_back(part);
    if (plus == std::string_view::npos) break;
    begin = plus + 1;
  }
  if (out.empty()) out.emplace_back(host);
  return out;
}

Status ParseLinkDelays(std::string_view text, LinkEmulation* link) {
  link->delay_us = 0;
  link->delay_us_from.clear();
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = Trim(text.substr(begin, end - begin));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      LOOM_ASSIGN_OR_RETURN(link->delay_us, ParseDouble("LOOM_LINK_DELAY_US", item));
    } else {
      const std::string host(Trim(item.substr(0, eq)));
      if (host.empty()) {
        return InvalidArgumentError("LOOM_LINK_DELAY_US: '", item, "' names no host (HOST=US)");
      }
      LOOM_ASSIGN_OR_RETURN(double us, ParseDouble("LOOM_LINK_DELAY_US", item.substr(eq + 1)));
      link->delay_us_from.emplace_back(host, us);
    }
    begin = end + 1;
  }
  return OkStatus();
}

Status ParseHostPort(std::string_view text, std::string* host, int* port) {
  text = Trim(text);
  std::string_view h;
  std::string_view p;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgumentError("address '", text, "': expected [v6addr]:port");
    }
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgumentError("address '", text, "': expected host:port");
    }
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (h.empty()) return InvalidArgumentError("address '", text, "': empty host");
  int64_t v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc() || end != p.data() + p.size() || p.empty() || v < 1 || v > 65535) {
    return InvalidArgumentError("address '", text, "': port '", p, "' is not in 1..65535");
  }
  *host = std::string(h);
  *port = static_cast<int>(v);
  return OkStatus();
}

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  text = Trim(text);
  int64_t scale = 1;
  if (!text.empty()) {
    const char s = text.back();
    if (s == 'k' || s == 'K') scale = int64_t{1} << 10;
    if (s == 'm' || s == 'M') scale = int64_t{1} << 20;
    if (s == 'g' || s == 'G') scale = int64_t{1} << 30;
    if (scale != 1) text.remove_suffix(1);
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v < 0 ||
      v > (int64_t{1} << 50) / scale) {
    return InvalidArgumentError("byte size '", text, "' is not a count like 64, 16K, 64M or 1G");
  }
  return v * scale;
}

StatusOr<GroupConfig> GroupConfigFromEnvironment(const EnvLookup& getenv) {
  auto get = [&](const char* name) -> std::string_view {
    const char* v = getenv(name);
    return v == nullptr ? std::string_view() : std::string_view(v);
  };
  GroupConfig c;
  const std::string_view backend = get("LOOM_BACKEND");
  const std::string_view world = get("LOOM_WORLD_SIZE");
  const std::string_view hostfile = get("LOOM_PEERS").empty() ? get("LOOM_HOSTFILE") : "";
  if (!backend.empty()) {
    c.backend = std::string(backend);
  } else if (!get("OMPI_COMM_WORLD_SIZE").empty()) {
    c.backend = "mpi";
  } else if (!world.empty() || !get("LOOM_PEERS").empty() || !hostfile.empty()) {
    c.backend = "tcp";
  }
  if (!world.empty()) {
    LOOM_ASSIGN_OR_RETURN(int64_t n, ParseInt("LOOM_WORLD_SIZE", world));
    if (n < 1 || n > 65536) return InvalidArgumentError("LOOM_WORLD_SIZE=", n, " is not 1..65536");
    c.size = static_cast<int>(n);
  }
  if (!hostfile.empty()) {
    // Ranks started by hand from a hostfile: the peers (and, unless given, the size) come from it.
    auto hf = LoadHostfile(std::string(hostfile));
    if (!hf.ok()) return hf.status().WithContext("LOOM_HOSTFILE");
    if (world.empty()) c.size = hf->total_slots();
    auto peers = PeersFromHostfile(*hf, c.size);
    if (!peers.ok()) return peers.status().WithContext("LOOM_HOSTFILE");
    c.peers = std::move(*peers);
  }
  if (const auto r = get("LOOM_RANK"); !r.empty()) {
    LOOM_ASSIGN_OR_RETURN(int64_t v, ParseInt("LOOM_RANK", r));
    if (v < 0 || v >= c.size) {
      return InvalidArgumentError("LOOM_RANK=", v, " is outside 0..", c.size - 1,
                                  " (LOOM_WORLD_SIZE=", c.size, ")");
    }
    c.rank = static_cast<int>(v);
  }
  if (const auto peers = get("LOOM_PEERS"); !peers.empty()) {
    size_t start = 0;
    while (start <= peers.size()) {
      size_t comma = peers.find(',', start);
      if (comma == std::string_view::npos) comma = peers.size();
      c.peers.emplace_back(Trim(peers.substr(start, comma - start)));
      start = comma + 1;
    }
  }
  c.group_id = std::string(get("LOOM_GROUP_ID"));
  if (c.group_id.empty()) c.group_id = "loom";
  c.secret = std::string(get("LOOM_GROUP_SECRET"));
  if (const auto fd = get("LOOM_LISTEN_FD"); !fd.empty()) {
    LOOM_ASSIGN_OR_RETURN(int64_t v, ParseInt("LOOM_LISTEN_FD", fd));
    if (v < 0 || v > (1 << 20)) return InvalidArgumentError("LOOM_LISTEN_FD=", v, " is invalid");
    c.listen_fd = static_cast<int>(v);
  }
  GroupOptions& o = c.options;
  if (const auto v = get("LOOM_COMM_TIMEOUT_S"); !v.empty()) {
    LOOM_ASSIGN_OR_RETURN(o.timeout_seconds, ParseDouble("LOOM_COMM_TIMEOUT_S", v));
  }
  if (const auto v = get("LOOM_COMM_SPIN_US"); !v.empty()) {
    LOOM_ASSIGN_OR_RETURN(o.spin_microseconds, ParseInt("LOOM_COMM_SPIN_US", v));
  }
  if (const auto v = get("LOOM_COMM_YIELD"); !v.empty()) {
    LOOM_ASSIGN_OR_RETURN(int64_t y, ParseInt("LOOM_COMM_YIELD", v));
    o.spin_yield = y != 0;
  }
  if (const auto v = get("LOOM_TCP_CHANNELS"); !v.empty()) {
    LOOM_ASSIGN_OR_RETURN(int64_t ch, ParseInt("LOOM_TCP_CHANNELS", v));
    o.tcp_channels = static_cast<int>(std::min<int64_t>(std::max<int64_t>(ch, -1), 1 << 20));
  }
  struct SizeVar {
    const char* name;
    int64_t* field;
  };
  for (const SizeVar& s : {SizeVar{"LOOM_TCP_ONESHOT_MAX", &o.tcp_oneshot_max_bytes},
                           SizeVar{"LOOM_TCP_SEGMENT", &o.tcp_segment_bytes},
                           SizeVar{"LOOM_SHM_SLOT_BYTES", &o.shm_slot_bytes},
                           SizeVar{"LOOM_SHM_MAILBOX_BYTES", &o.shm_mailbox_bytes}}) {
    if (const auto v = get(s.name); !v.empty()) {
      auto parsed = ParseByteSize(v);
      if (!parsed.ok()) return parsed.status().WithContext(s.name);
      *s.field = *parsed;
    }
  }
  if (const auto v = get("LOOM_LINK_DELAY_US"); !v.empty()) {
    LOOM_RETURN_IF_ERROR(ParseLinkDelays(v, &o.link));
  }
  if (const auto v = get("LOOM_LINK_GBPS"); !v.empty()) {
    LOOM_ASSIGN_OR_RETURN(o.link.gbps, ParseDouble("LOOM_LINK_GBPS", v));
  }
  LOOM_RETURN_IF_ERROR(ValidateGroupConfig(c));
  return c;
}

StatusOr<GroupConfig> GroupConfigFromEnvironment() {
  return GroupConfigFromEnvironment([](const char* name) { return std::getenv(name); });
}

Status ValidateGroupConfig(const GroupConfig& c) {
  if (FindBackend(c.backend) == nullptr) {
    std::string names;
    for (const Backend& b : kBackends) names += StrCat(names.empty() ? "" : ", ", b.name);
    return InvalidArgumentError("comm: unknown backend '", c.backend, "' (known: ", names, ")");
  }
  if (c.size < 1 || c.rank < 0 || c.rank >= c.size) {
    return InvalidArgumentError("comm: rank ", c.rank, " is outside a group of size ", c.size);
  }
  if (c.backend == "tcp" && static_cast<int>(c.peers.size()) != c.size) {
    return InvalidArgumentError("comm/tcp: LOOM_PEERS lists ", c.peers.size(),
                                " addresses but the group has ", c.size, " ranks");
  }
  for (const std::string& p : c.peers) {
    std::string host;
    int port = 0;
    LOOM_RETURN_IF_ERROR(ParseHostPort(p, &host, &port).WithContext("LOOM_PEERS"));
  }
  const GroupOptions& o = c.options;
  if (!(o.timeout_seconds > 0) || o.timeout_seconds > 1e6) {
    return InvalidArgumentError("comm: timeout ", o.timeout_seconds, " s is not in (0, 1e6]");
  }
  if (o.spin_microseconds < 0 || o.spin_microseconds > 10'000'000) {
    return InvalidArgumentError("comm: spin time ", o.spin_microseconds, " us is not 0..1e7");
  }
  if (o.tcp_channels < 1 || o.tcp_channels > 16) {
    return InvalidArgumentError("comm/tcp: ", o.tcp_channels, " channels is not 1..16");
  }
  if (o.tcp_segment_bytes < 4096 || o.tcp_segment_bytes > (int64_t{1} << 30)) {
    return InvalidArgumentError("comm/tcp: segment ", o.tcp_segment_bytes,
                                " bytes is not 4 KiB..1 GiB");
  }
  if (o.tcp_oneshot_max_bytes < 0) {
    return InvalidArgumentError("comm/tcp: one-shot limit ", o.tcp_oneshot_max_bytes, " < 0");
  }
  if (o.shm_slot_bytes < 4096 || o.shm_slot_bytes > (int64_t{1} << 30) ||
      o.shm_mailbox_bytes < 4096 || o.shm_mailbox_bytes > (int64_t{1} << 30)) {
    return InvalidArgumentError("comm/shm: slot ", o.shm_slot_bytes, " and mailbox ",
                                o.shm_mailbox_bytes, " bytes must be 4 KiB..1 GiB");
  }
  for (const auto& [host, us] : o.link.delay_us_from) {
    if (us < 0 || us > 1e7) {
      return InvalidArgumentError("comm: link emulation delay ", us, " us from ", host,
                                  " is out of range");
    }
  }
  if (o.link.delay_us < 0 || o.link.delay_us > 1e7 || o.link.gbps < 0) {
    return InvalidArgumentError("comm: link emulation delay ", o.link.delay_us, " us / ",
                                o.link.gbps, " Gbit/s is out of range");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Group>> CreateGroup(const GroupConfig& config) {
  LOOM_RETURN_IF_ERROR(ValidateGroupConfig(config));
  const Backend* b = FindBackend(config.backend);
  if (!b->available()) {
    return UnimplementedError("comm: backend '", config.backend,
                              "' is not in this build (configure with -DLOOM_WITH_MPI=ON and "
                              "libopenmpi-dev installed)");
  }
  return b->create(config);
}

StatusOr<std::unique_ptr<Group>> CreateGroupFromEnvironment() {
  LOOM_ASSIGN_OR_RETURN(GroupConfig config, GroupConfigFromEnvironment());
  return CreateGroup(config);
}

std::vector<std::string_view> BackendNames() {
  std::vector<std::string_view> names;
  for (const Backend& b : kBackends) names.push_back(b.name);
  return names;
}

bool BackendAvailable(std::string_view name) {
  const Backend* b = FindBackend(name);
  return b != nullptr && b->available();
}

}  // namespace loom::comm
