#include "loom/cluster/rank_env.h"

#include <string_view>

extern char** environ;

namespace loom::cluster {

std::vector<std::string> RankEnvironment(const RankGroup& group) {
  static constexpr std::string_view kGroupVars[] = {
      "LOOM_RANK=",     "LOOM_PEERS=",     "LOOM_WORLD_SIZE=", "LOOM_GROUP_ID=",
      "LOOM_GROUP_SECRET=", "LOOM_LISTEN_FD=", "LOOM_BACKEND=",    "LOOM_HOSTFILE="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    bool group_var = false;
    for (std::string_view name : kGroupVars) group_var = group_var || v.rfind(name, 0) == 0;
    if (!group_var) env.emplace_back(v);
  }
  std::string peers;
  for (const std::string& p : group.peers) peers += (peers.empty() ? "" : ",") + p;
  env.push_back("LOOM_BACKEND=tcp");
  env.push_back("LOOM_RANK=" + std::to_string(group.rank));
  env.push_back("LOOM_WORLD_SIZE=" + std::to_string(group.peers.size()));
  env.push_back("LOOM_PEERS=" + peers);
  env.push_back("LOOM_GROUP_ID=" + group.group_id);
  env.push_back("LOOM_GROUP_SECRET=" + group.secret);
  if (group.listen_fd >= 0) env.push_back("LOOM_LISTEN_FD=" + std::to_string(group.listen_fd));
  return env;
}

}  // namespace loom::cluster
