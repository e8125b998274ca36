// The JSON hostfile: which machines run ranks and how to reach them.  `loom launch --hostfile`
// starts ranks from it; a rank started by other means finds its peers from it (LOOM_HOSTFILE).
//
//   [
//     {"ssh": "me@mac-studio.local", "ips": ["10.0.0.2"], "slots": 2,
//      "env": {"OPENBLAS_CORETYPE": "Cooperlake"}, "cwd": "/opt/loom"},
//     {"ssh": "localhost", "ips": ["10.0.0.1"]}
//   ]
//
// (An object {"hosts": [...]} is accepted too.)  Ranks fill the hosts in order, `slots` each.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"

namespace loom::comm {

inline constexpr int kDefaultPort = 29500;

struct HostEntry {
  std::string ssh;               // ssh destination; "", "localhost" or "127.0.0.1": this machine
  std::vector<std::string> ips;  // addresses the other ranks reach this host at (first is used)
  int slots = 1;                 // ranks on this host
  int port = 0;                  // first listening port of its ranks; 0: any free port (local
                                 // hosts) or kDefaultPort (remote hosts)
  std::vector<std::pair<std::string, std::string>> env;  // extra environment of its ranks
  std::string cwd;  // working directory of its ranks ("" = the launcher's, locally;
                    // the ssh login directory remotely)

  bool local() const;
  // The address its ranks listen on and peers connect to.
  std::string address() const;
  std::string name() const;  // for messages
  // The listening port of its `index`-th rank when the port is fixed: (port or kDefaultPort) + index.
  int PortOf(int index) const;
};

struct Hostfile {
  std::vector<HostEntry> hosts;
  int total_slots() const;
};

// "host:port", or "[host]:port" for IPv6 addresses.
std::string FormatHostPort(const std::string& host, int port);

// The peer list of a group of `ranks` started from the hostfile by hand (not by `loom launch`):
// ranks fill the hosts in order and listen on fixed ports (HostEntry::PortOf).
StatusOr<std::vector<std::string>> PeersFromHostfile(const Hostfile& hostfile, int ranks);

// `source` names the text in errors (the file path).
StatusOr<Hostfile> ParseHostfile(std::string_view json_text, std::string_view source);
StatusOr<Hostfile> LoadHostfile(const std::string& path);

}  // namespace loom::comm
