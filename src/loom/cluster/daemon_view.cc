// The cluster daemon's view (what `loom cluster status` prints) and its control socket: a client
// connects to the Unix socket, writes one command line ("status"), reads one JSON document and
// the daemon closes the connection.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "loom/base/fd.h"
#include "loom/cluster/daemon_impl.h"

namespace loom::cluster {
namespace {

using json = nlohmann::json;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

json FactsJson(const Facts& f) {
  json ifs = json::array();
  for (const Interface& i : f.interfaces) {
    ifs.push_back({{"name", i.name}, {"address", i.address}, {"prefix", i.prefix}});
  }
  return {{"name", f.name},
          {"os", f.os},
          {"cpu", f.cpu},
          {"simd", f.simd},
          {"boot_id", f.boot_id},
          {"cores", f.cores},
          {"memory_total", f.memory_total},
          {"memory_available", f.memory_available},
          {"memory_offered", f.memory_offered},
          {"read_gbytes_per_s", f.read_bytes_per_s / 1e9},
          {"rdma", f.rdma},
          {"interfaces", ifs}};
}

json LinkJson(const LinkMeasure& m, const std::map<MemberId, std::string>& names) {
  auto name = [&](const MemberId& id) {
    auto it = names.find(id);
    return it == names.end() ? std::string() : it->second;
  };
  return {{"a", MemberIdHex(m.a)},         {"b", MemberIdHex(m.b)},
          {"a_name", name(m.a)},           {"b_name", name(m.b)},
          {"a_host", m.a_host},            {"b_host", m.b_host},
          {"interface", m.interface},      {"latency_us", m.latency_s * 1e6},
          {"gbytes_per_s", m.bytes_per_s / 1e9}};
}

}  // namespace

json Daemon::Impl::View() const {
  std::map<MemberId, std::string> names{{id_, facts_.name}};
  json members = json::array();
  members.push_back({{"id", MemberIdHex(id_)},
                     {"name", facts_.name},
                     {"state", "self"},
                     {"port", port_},
                     {"since_s", SecondsSince(started_)},
                     {"facts", FactsJson(facts_)}});
  for (const auto& [id, c] : up_) {
    names[id] = c->peer_name;
    json m = {{"id", MemberIdHex(id)},
              {"name", c->peer_name},
              {"state", "up"},
              {"address", c->remote_host},
              {"port", c->peer_port},
              {"since_s", SecondsSince(c->up_since)},
              {"last_heard_ms", SecondsSince(c->last_heard) * 1000}};
    if (c->facts) m["facts"] = FactsJson(*c->facts);
    members.push_back(std::move(m));
  }
  json departed = json::array();
  for (const Departed& d : departed_) {
    departed.push_back({{"id", MemberIdHex(d.id)},
                        {"name", d.name},
                        {"left_s_ago", SecondsSince(d.when)},
                        {"why", d.why}});
  }
  // Every measured link, and per pair of members the fastest (most bandwidth, then least latency).
  json links = json::array();
  std::map<std::pair<MemberId, MemberId>, const LinkMeasure*> best;
  for (const auto& [key, m] : links_) {
    links.push_back(LinkJson(m, names));
    const auto pair = std::minmax(m.a, m.b);
    const LinkMeasure*& b = best[{pair.first, pair.second}];
    if (b == nullptr || m.bytes_per_s > b->bytes_per_s * 1.05 ||
        (m.bytes_per_s > b->bytes_per_s * 0.95 && m.latency_s < b->latency_s)) {
      b = &m;
    }
  }
  json fastest = json::array();
  for (const auto& [pair, m] : best) fastest.push_back(LinkJson(*m, names));
  // Links are still being measured while this member or any other says so.
  bool measuring = probing_ || !probes_.empty();
  for (const auto& [id, c] : up_) measuring = measuring || c->measuring;
  json refused_by = json::object();
  for (const auto& [peer, why] : refused_by_) refused_by[peer] = why;
  return {{"v", 1},
          {"id", MemberIdHex(id_)},
          {"name", facts_.name},
          {"port", port_},
          {"members", members},
          {"departed", departed},
          {"links", links},
          {"fastest", fastest},
          {"probing", measuring},
          {"probes_pending", probes_.size()},
          {"refused", refused_},
          {"refused_by", refused_by}};
}

void Daemon::Impl::AcceptControl() {
  auto socket = std::make_shared<asio::local::stream_protocol::socket>(io_);
  control_.async_accept(*socket, [this, socket](const boost::system::error_code& ec) {
    if (stopped_) return;
    if (!ec) {
      auto buf = std::make_shared<asio::streambuf>(1 << 20);
      asio::async_read_until(*socket, *buf, '\n',
                             [this, socket, buf](const boost::system::error_code& ec, size_t n) {
        if (ec || stopped_) return;
        std::string line(asio::buffers_begin(buf->data()), asio::buffers_begin(buf->data()) + n);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        if (line == "status") return Reply(socket, View());
        if (line.rfind("launch ", 0) == 0) {
          const json request = json::parse(line.substr(7), nullptr, /*allow_exceptions=*/false);
          return OnLaunchRequest(socket, request);
        }
        Reply(socket, {{"v", 1}, {"error", StrCat("unknown command '", line.substr(0, 64), "'")}});
      });
    }
    AcceptControl();
  });
}

void Daemon::Impl::Reply(const ControlSocket& client, const json& reply) {
  auto text = std::make_shared<std::string>(reply.dump() + "\n");
  asio::async_write(*client, asio::buffer(*text),
                    [client, text](const boost::system::error_code&, size_t) {
    boost::system::error_code ec;
    client->close(ec);
  });
}

namespace {

// One command line to the daemon's control socket, one JSON document back.
StatusOr<json> Ask(const std::string& control_path, const std::string& command, double timeout_s) {
  sockaddr_un addr{};
  if (control_path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("cluster: control socket path is too long: ", control_path);
  }
  base::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return InternalError("cluster: socket: ", std::strerror(errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, control_path.data(), control_path.size());
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return UnavailableError("cluster: no daemon answers at ", control_path, " (",
                            std::strerror(errno), "); start one with `loom cluster join`");
  }
  const std::string line = command + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::write(fd.get(), line.data() + sent, line.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return UnavailableError("cluster: writing to ", control_path, ": ", std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }
  std::string text;
  char buf[65536];
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return DeadlineExceededError("cluster: the daemon did not answer");
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return UnavailableError("cluster: reading ", control_path, ": ", std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (size_t{64} << 20)) return DataLossError("cluster: the answer is too long");
  }
  json out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded() || !out.is_object()) {
    return DataLossError("cluster: the daemon's answer is not JSON");
  }
  if (out.contains("error")) {
    return FailedPreconditionError("cluster: ", out["error"].is_string()
                                                    ? out["error"].get<std::string>()
                                                    : out["error"].dump());
  }
  return out;
}

}  // namespace

StatusOr<json> QueryDaemon(const std::string& control_path, double timeout_s) {
  return Ask(control_path, "status", timeout_s);
}

StatusOr<json> RequestLaunch(const std::string& control_path,
                             const std::vector<std::string>& members,
                             const std::vector<std::string>& args, int port, double timeout_s) {
  const json request = {{"members", members}, {"args", args}, {"port", port}};
  return Ask(control_path, "launch " + request.dump(), timeout_s);
}

std::string DefaultControlPath() {
  if (const char* p = std::getenv("LOOM_CLUSTER_SOCKET"); p != nullptr && *p) return p;
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d) {
    return StrCat(d, "/loom-cluster.sock");
  }
  return StrCat("/tmp/loom-cluster-", ::getuid(), ".sock");
}

}  // namespace loom::cluster
