// `loom cluster join`: the daemon every machine of a self-forming pod runs.  It announces itself
// by UDP multicast on every IPv4 interface (and dials static peers, for networks that drop
// multicast), authenticates every other daemon with the shared secret (messages.h), keeps the
// membership view (members, their machine facts, heartbeats; a member silent for
// `member_timeout_s` or whose connection closes has left), and measures every link to the members
// it knows (link_probe.h), one probe at a time.  Every piece of state lives on one io_context
// thread; probes run on one worker thread and post their result back.  `loom cluster status`
// asks it for its view over a Unix socket (`control_path`, mode 0600).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/base/status.h"
#include "loom/cluster/messages.h"
#include "loom/comm/config.h"

namespace boost::asio {
class io_context;
}

namespace loom::cluster {

inline constexpr int kDefaultPort = 7470;           // control connections (TCP)
inline constexpr int kDefaultMulticastPort = 7471;  // announcements (UDP)
inline constexpr const char* kDefaultMulticastGroup = "239.255.76.77";

struct DaemonOptions {
  std::string secret;               // shared by every member; required
  std::vector<std::string> peers;   // static peers, "host:port", dialled until they answer
  std::string bind_host = "0.0.0.0";
  int port = kDefaultPort;          // 0: any free port
  bool multicast = true;
  std::string multicast_group = kDefaultMulticastGroup;
  int multicast_port = kDefaultMulticastPort;
  std::string control_path;         // Unix socket for `loom cluster status`; "" = none
  double announce_s = 1;            // multicast announcement period
  double heartbeat_s = 0.5;
  double member_timeout_s = 2.5;    // silent this long: the member has left
  bool probe_links = true;
  comm::GroupOptions probe_options;  // the probes' tcp options (link emulation from LOOM_LINK_*)
  double probe_seconds_per_size = 0.1;  // per measurement of a probe (~0.35 s a link in all)
  std::function<void(const std::string&)> log;  // one line per event; null = quiet
};

class Daemon {
 public:
  // Binds the control port, the multicast socket and the control socket; starts announcing and
  // dialling on `io` (the caller runs it).  `facts` describe this machine (machine.h).
  static StatusOr<std::unique_ptr<Daemon>> Create(boost::asio::io_context& io,
                                                  DaemonOptions options, Facts facts);
  ~Daemon();

  int port() const;        // the bound control port
  std::string id() const;  // this member's id, hex
  // The membership view as `loom cluster status --json` prints it (call on the loop's thread).
  nlohmann::json View() const;
  // Closes every socket; pending handlers finish and io.run() returns.
  void Stop();

  class Impl;

 private:
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `loom cluster status`: asks the daemon at `control_path` for its view.
StatusOr<nlohmann::json> QueryDaemon(const std::string& control_path, double timeout_s);

// `loom cluster run`: asks the daemon to start ranks 1..N-1 of a pod on `members` (ids, rank
// order; the first is the daemon's own member, whose rank 0 the caller runs, listening on
// `port`) with `args` ("run" or "serve" and options).  Returns rank 0's group: {group_id,
// secret, peers}.
StatusOr<nlohmann::json> RequestLaunch(const std::string& control_path,
                                       const std::vector<std::string>& members,
                                       const std::vector<std::string>& args, int port,
                                       double timeout_s);

// $LOOM_CLUSTER_SOCKET, else $XDG_RUNTIME_DIR/loom-cluster.sock, else /tmp/loom-cluster-UID.sock.
std::string DefaultControlPath();

}  // namespace loom::cluster
