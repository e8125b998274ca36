// `loom cluster run` through the daemons: the command asks its own daemon to start ranks 1..N-1
// on other members (launch request on the control socket); that daemon asks each member to
// listen for its rank (RankReserve / RankReserved), then sends each its peers and arguments
// (RankStart), and answers the command with rank 0's peers, so the command runs rank 0 itself.
// A member's daemon starts only its own binary with `run` or `serve`, in a process group of its
// own, and stops it when the requesting member leaves, asks (RankStop) or the daemon stops.
// Each rank dials every other rank at the address of the fastest measured link between their
// two members, and listens on every interface (its own LOOM_PEERS entry is 0.0.0.0:port).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "loom/base/sysinfo.h"
#include "loom/cluster/daemon_impl.h"
#include "loom/cluster/rank_env.h"
#include "loom/comm/tcp/socket.h"

namespace loom::cluster {
namespace {

constexpr auto kLaunchTimeout = std::chrono::seconds(15);
constexpr int kRankListenFd = 3;

StatusOr<MemberId> ParseMemberId(const std::string& hex) {
  MemberId id{};
  if (hex.size() != 2 * id.size()) return InvalidArgumentError("bad member id '", hex, "'");
  for (size_t i = 0; i < id.size(); ++i) {
    auto digit = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgumentError("bad member id '", hex, "'");
    id[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return id;
}

}  // namespace

std::string Daemon::Impl::GroupSecret(uint64_t launch) const {
  static constexpr std::string_view kLabel = "loom-cluster-v1 group";
  const std::span<const uint8_t> parts[] = {
      {reinterpret_cast<const uint8_t*>(kLabel.data()), kLabel.size()},
      {reinterpret_cast<const uint8_t*>(&launch), sizeof(launch)}};
  return comm::DigestHex(comm::HmacSha256(opt_.secret, parts));
}

// Where `from` reaches `to`: `to`'s end of the fastest measured link between them, else the
// address this daemon reaches `to` at.
std::string Daemon::Impl::AddressOf(const MemberId& from, const MemberId& to) const {
  const LinkMeasure* best = nullptr;
  for (const auto& [key, m] : links_) {
    const bool pair = (m.a == from && m.b == to) || (m.a == to && m.b == from);
    if (pair && (best == nullptr || m.bytes_per_s > best->bytes_per_s)) best = &m;
  }
  if (best != nullptr) return best->a == to ? best->a_host : best->b_host;
  auto it = up_.find(to);
  return it == up_.end() ? std::string("127.0.0.1") : it->second->remote_host;
}

void Daemon::Impl::OnLaunchRequest(const ControlSocket& client, const nlohmann::json& request) {
  auto refuse = [&](const std::string& why) { Reply(client, {{"v", 1}, {"error", why}}); };
  if (!request.is_object() || !request.contains("members") || !request["members"].is_array() ||
      !request.contains("args") || !request["args"].is_array() || !request.contains("port") ||
      !request["port"].is_number_unsigned()) {
    return refuse("launch: expected {members: [ids], args: [...], port: N}");
  }
  Launch l;
  l.id = rng_();
  l.client = client;
  l.group_id = StrCat("loom-cluster-", comm::DigestHex(comm::Sha256Of(std::to_string(l.id)))
                                           .substr(0, 16));
  for (const auto& a : request["args"]) {
    if (!a.is_string()) return refuse("launch: args must be strings");
    l.args.push_back(a.get<std::string>());
  }
  if (l.args.empty() || (l.args[0] != "run" && l.args[0] != "serve")) {
    return refuse("launch: args must start with run or serve");
  }
  for (const auto& m : request["members"]) {
    if (!m.is_string()) return refuse("launch: members must be member ids");
    auto id = ParseMemberId(m.get<std::string>());
    if (!id.ok()) return refuse(std::string(id.status().message()));
    if (l.members.empty() ? *id != id_ : !up_.count(*id)) {
      return refuse(l.members.empty() ? "launch: rank 0 must be this member"
                                      : StrCat("launch: member ", m.get<std::string>().substr(0, 8),
                                               " is not up"));
    }
    for (const MemberId& seen : l.members) {
      if (seen == *id) return refuse("launch: a member can hold one rank");
    }
    l.members.push_back(*id);
  }
  if (l.members.size() < 2 || static_cast<int64_t>(l.members.size()) > kMaxListItems) {
    return refuse("launch: needs 2 to 63 members");
  }
  const uint64_t port = request["port"].get<uint64_t>();
  if (port == 0 || port > 65535) return refuse("launch: bad port");
  l.ports.assign(l.members.size(), 0);
  l.ports[0] = static_cast<uint16_t>(port);
  l.deadline = Clock::now() + kLaunchTimeout;
  for (size_t r = 1; r < l.members.size(); ++r) {
    const ConnPtr& c = up_.at(l.members[r]);
    Send(c, EncodeRankReserve({l.id, static_cast<uint16_t>(r)}, c->session, c->send_seq++));
  }
  Log(StrCat("launch ", l.id % 100000, ": ", l.members.size(), " ranks, `loom ", l.args[0],
             "` on ", l.members.size() - 1, " other members"));
  launches_[l.id] = std::move(l);
}

void Daemon::Impl::FailLaunch(uint64_t id, const std::string& why) {
  auto it = launches_.find(id);
  if (it == launches_.end()) return;
  Launch& l = it->second;
  Log(StrCat("launch ", id % 100000, " failed: ", why));
  if (l.client) Reply(l.client, {{"v", 1}, {"error", why}});
  for (size_t r = 1; r < l.members.size(); ++r) {
    if (auto c = up_.find(l.members[r]); c != up_.end()) {
      Send(c->second, EncodeRankStop(id, c->second->session, c->second->send_seq++));
    }
  }
  launches_.erase(it);
}

void Daemon::Impl::OnRankReserve(const ConnPtr& c, const RankReserve& m) {
  int port = 0;
  auto listener = comm::tcp::Listen("0.0.0.0", 0, &port);
  RankReserved reply{m.launch, m.rank, 0, ""};
  if (!listener.ok()) {
    reply.error = StrCat(facts_.name, " cannot listen: ", listener.status().message());
  } else {
    LocalRank& r = ranks_[{m.launch, m.rank}];
    r.launch = m.launch;
    r.rank = m.rank;
    r.requester = c->peer_id;
    r.listener = std::move(*listener);
    reply.port = static_cast<uint16_t>(port);
  }
  Send(c, EncodeRankReserved(reply, c->session, c->send_seq++));
}

void Daemon::Impl::OnRankReserved(const ConnPtr& c, const RankReserved& m) {
  auto it = launches_.find(m.launch);
  if (it == launches_.end()) return;
  Launch& l = it->second;
  if (m.rank >= l.members.size() || l.members[m.rank] != c->peer_id || l.ports[m.rank] != 0) {
    return FailLaunch(m.launch, StrCat(c->label(), " answered for a rank it was not asked for"));
  }
  if (!m.error.empty()) return FailLaunch(m.launch, m.error);
  l.ports[m.rank] = m.port;
  if (++l.reserved < static_cast<int>(l.members.size())) return;
  // Every rank listens: each gets the peers as its member reaches them.
  auto peers_of = [&](size_t r) {
    std::vector<std::string> peers;
    for (size_t k = 0; k < l.members.size(); ++k) {
      peers.push_back(k == r ? StrCat("0.0.0.0:", l.ports[k])
                             : StrCat(AddressOf(l.members[r], l.members[k]), ":", l.ports[k]));
    }
    return peers;
  };
  for (size_t r = 1; r < l.members.size(); ++r) {
    const ConnPtr& to = up_.at(l.members[r]);
    RankStart start{l.id, static_cast<uint16_t>(r), l.group_id, peers_of(r), l.args};
    Send(to, EncodeRankStart(start, to->session, to->send_seq++));
  }
  l.started = true;
  Reply(l.client, {{"v", 1},
                   {"ok", true},
                   {"launch", l.id},
                   {"group_id", l.group_id},
                   {"secret", GroupSecret(l.id)},
                   {"peers", peers_of(0)}});
  l.client.reset();
}

void Daemon::Impl::OnRankStart(const ConnPtr& c, const RankStart& m) {
  auto it = ranks_.find({m.launch, m.rank});
  if (it == ranks_.end() || it->second.requester != c->peer_id || it->second.pid > 0) {
    Log(StrCat("ignored a start of rank ", m.rank, " from ", c->label(), " (not reserved)"));
    return;
  }
  LocalRank& r = it->second;
  const std::string exe = base::SelfExecutable("");
  std::vector<std::string> argv = {exe};
  argv.insert(argv.end(), m.args.begin(), m.args.end());
  std::vector<std::string> env = RankEnvironment(
      {m.rank, m.peers, m.group_id, GroupSecret(m.launch), kRankListenFd});
  int out[2];
  if (exe.empty() || ::pipe2(out, O_CLOEXEC) != 0) {
    Send(c, EncodeRankExit({m.launch, m.rank, 127, "cannot start a rank"}, c->session,
                           c->send_seq++));
    ranks_.erase(it);
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  posix_spawn_file_actions_adddup2(&actions, r.listener.get(), kRankListenFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> cargv, cenv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (std::string& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, exe.c_str(), &actions, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  if (err != 0) {
    ::close(out[0]);
    Send(c, EncodeRankExit({m.launch, m.rank, 127, StrCat("cannot start: ", std::strerror(err))},
                           c->session, c->send_seq++));
    ranks_.erase(it);
    return;
  }
  r.pid = pid;
  r.listener = base::Fd();  // the rank holds it now
  r.output = std::make_shared<asio::posix::stream_descriptor>(io_, out[0]);
  Log(StrCat("rank ", m.rank, " of ", c->peer_name, "'s launch ", m.launch % 100000,
             " started (pid ", pid, ")"));
  ReadRankOutput(it->first);
}

void Daemon::Impl::ReadRankOutput(std::pair<uint64_t, uint16_t> key) {
  auto it = ranks_.find(key);
  if (it == ranks_.end() || !it->second.output) return;
  auto buf = std::make_shared<std::array<char, 4096>>();
  auto output = it->second.output;
  output->async_read_some(asio::buffer(*buf), [this, key, buf, output](
                                                  const boost::system::error_code& ec, size_t n) {
    auto it = ranks_.find(key);
    if (it == ranks_.end()) return;
    LocalRank& r = it->second;
    if (ec) {
      r.output.reset();
      return;
    }
    r.partial.append(buf->data(), n);
    size_t nl;
    while ((nl = r.partial.find('\n')) != std::string::npos) {
      r.last_line = r.partial.substr(0, nl);
      Log(StrCat("[rank ", r.rank, "] ", r.last_line));
      r.partial.erase(0, nl + 1);
    }
    if (r.partial.size() > 65536) r.partial.clear();
    ReadRankOutput(key);
  });
}

void Daemon::Impl::OnRankExit(const ConnPtr& c, const RankExit& m) {
  auto it = launches_.find(m.launch);
  if (it == launches_.end()) return;
  Log(StrCat("rank ", m.rank, " on ", c->peer_name, " exited with code ", m.code,
             m.text.empty() ? "" : ": " + m.text));
  if (++it->second.exited == static_cast<int>(it->second.members.size()) - 1) launches_.erase(it);
}

void Daemon::Impl::StopRanks(const std::function<bool(const LocalRank&)>& which,
                             const std::string& why) {
  for (auto& [key, r] : ranks_) {
    if (!which(r)) continue;
    if (r.pid > 0) {
      Log(StrCat("stopping rank ", r.rank, " (pid ", r.pid, "): ", why));
      ::kill(-r.pid, SIGTERM);
    }
    r.listener = base::Fd();
  }
  std::erase_if(ranks_, [&](const auto& kv) { return kv.second.pid <= 0 && which(kv.second); });
}

// Called every tick: ranks that exited are reported to their requester; launches that waited
// too long for their members fail.
void Daemon::Impl::ReapRanks() {
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    LocalRank& r = it->second;
    int status = 0;
    if (r.pid <= 0 || ::waitpid(r.pid, &status, WNOHANG) != r.pid) {
      ++it;
      continue;
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    Log(StrCat("rank ", r.rank, " (pid ", r.pid, ") exited with code ", code));
    if (auto c = up_.find(r.requester); c != up_.end()) {
      Send(c->second, EncodeRankExit({r.launch, r.rank, code, r.last_line}, c->second->session,
                                     c->second->send_seq++));
    }
    it = ranks_.erase(it);
  }
  const auto now = Clock::now();
  std::vector<uint64_t> late;
  for (const auto& [id, l] : launches_) {
    if (!l.started && now > l.deadline) late.push_back(id);
  }
  for (uint64_t id : late) FailLaunch(id, "members did not answer in time");
}

}  // namespace loom::cluster
