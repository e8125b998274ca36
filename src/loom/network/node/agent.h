// `loom node`: the agent on a lending machine.  It dials out to the hub (so a node behind NAT
// needs no open port), answers the hub's challenge with its enrolled Ed25519 key, reports its
// machine and models, heartbeats, and runs the attempts the hub assigns on `loom serve` children
// (model_server.h), streaming the tokens back.  It reconnects with backoff, honours the owner's
// limits (memory, schedule, busy machine) and drains on request.  All state is on one io_context
// thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/network/node/model_server.h"
#include "loom/network/protocol/frames.h"

namespace boost::asio {
class io_context;
}

namespace loom::network::node {

// What `loom node enroll` writes to the node's directory and `loom node` reads.
struct Identity {
  std::string hub_url;
  std::string node_id;
  std::string hub_id;
  std::string key_path;  // node_key.pem beside node.json
};
StatusOr<Identity> LoadIdentity(const std::string& dir);
Status SaveIdentity(const std::string& dir, const Identity& id);
std::string DefaultNodeDir();  // $LOOM_NODE_DIR, else $XDG_CONFIG_HOME/loom/node, else ~/.config/...

struct AgentOptions {
  std::string dir;                  // identity, key, hash cache, status.json, node.pid
  std::string hub_url;              // "" = the one enrolled with
  std::string ca_file;              // for wss:// hubs with a private CA
  std::vector<std::string> models;  // paths or pulled names; loaded at start while memory allows
  int64_t max_memory_bytes = 0;     // 0: 90% of what is available now
  std::string schedule;             // lending hours (node_facts.h); "" = always
  double busy_threshold = 0;        // pause new work while others use > this fraction of the
                                    // CPU; 0 = never pause
  ServeConfig serve;
  // A stream's tokens go to the hub at most this often (the first at once, the last with the end):
  // a frame per token costs the node and the hub more CPU than a fast model's decode step.
  double chunk_interval_s = 0.01;
  // Where the machine is, as the operator declared it (--location); the hub rounds it and shows
  // it on its public world page.  Absent: not on the map.
  std::optional<protocol::Location> location;
  int ranks = 0;  // > 1: lend a pod of this many local ranks, each model split as the cost model
                  // predicts fastest (instead of serve.tp/serve.pp)
  // A reserved slot instead of spare time: one of `models` (its name as the hub sees it), kept
  // loaded and answering through `reserve_hours` ("HH:MM-HH:MM" in UTC; "" = all day).  The
  // lending schedule and pausing when busy still apply, and count against its availability.
  std::string reserve;
  std::string reserve_hours;
};

class Agent {
 public:
  static StatusOr<std::unique_ptr<Agent>> Create(boost::asio::io_context& io,
                                                 AgentOptions options);
  ~Agent();
  void Start();
  // Takes nothing new, finishes what runs, then calls `done` (also when nothing runs).
  void Drain(std::function<void()> done);

  class Impl;

 private:
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::network::node
