// The environment of a rank that a process starts for a group (`loom cluster run` for rank 0,
// a cluster daemon for the others): this process's own, without any LOOM_* group settings it was
// itself given, plus the group's (docs/comm.md lists the variables).
#pragma once

#include <string>
#include <vector>

namespace loom::cluster {

struct RankGroup {
  int rank = 0;
  std::vector<std::string> peers;  // LOOM_PEERS, as this rank dials them
  std::string group_id, secret;
  int listen_fd = -1;  // LOOM_LISTEN_FD: where the rank finds its listener
};

// "NAME=value" entries for execve.
std::vector<std::string> RankEnvironment(const RankGroup& group);

}  // namespace loom::cluster
