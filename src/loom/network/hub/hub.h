// `loom hub`: the network's coordinator.  Consumers send OpenAI requests with their account's API
// key; node agents dial in over WebSocket, prove their enrolled Ed25519 key on every connect and
// lend their models.  The hub places every request whole on one node or pod (placement/), streams
// the tokens back, counts them itself, and fails over to another node when one dies.  Durable
// state (accounts, keys, nodes, jobs and attempts) is written to the store before it is
// acknowledged; the live fleet (heartbeats, loads, measured speeds) stays in memory.
//
// All of the hub's state lives on the one thread that runs its io_context: HTTP handlers, node
// frames and timers all run there, so nothing here takes a lock.  See docs/network.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/base/status.h"
#include "loom/network/ledger/credits.h"
#include "loom/network/store/store.h"

namespace boost::asio {
class io_context;
namespace ssl {
class context;
}
}  // namespace boost::asio

namespace loom::network::hub {

struct HubOptions {
  std::string host = "127.0.0.1";
  int port = 8443;                                     // 0 = any free port
  std::shared_ptr<boost::asio::ssl::context> tls;      // null: plain (loopback or --insecure only)
  std::string admin_key;                               // /v1/admin/*; empty: admin API disabled
  std::string hub_id = "loom-hub";                     // signed into every node's challenge answer
  double heartbeat_s = 5;       // nodes send one this often
  double suspect_s = 15;        // no heartbeat for this long: no new work
  double offline_s = 30;        // ...for this long: offline, its work failed over
  double grace_s = 30;          // after start: requests wait for nodes to reconnect
  double first_token_s = 10;    // an attempt must stream its first token within this (+ cold load)
  double stall_s = 30;          // ...and then a chunk at least this often
  double queue_wait_s = 30;     // a request with no free target waits this long, then 503
  int64_t queue_limit = 64;     // waiting requests per model, beyond: 503 at once
  int max_attempts = 3;         // per job, the first included
  // Residency.  A loaded model that has run nothing on a node for unload_idle_s is unloaded there
  // (0: never), except the network's last loaded copy of it; when the loaded copies of a model
  // are this busy (running / slots), the hub loads one more copy on the best holder that has the
  // memory free (0: never).  A request waiting for memory that idle models hold gets them unloaded.
  double unload_idle_s = 900;
  double warm_at = 0.75;
  int64_t max_body_bytes = int64_t{4} << 20;
  double read_timeout_s = 10;
  int64_t max_connections = 20000;  // consumers and nodes together
  // Credits (ledger/credits.h): a priced model's request reserves its worst case from the
  // account's credits (402 when they do not cover it) and settles what the hub counted; free
  // models (the default) touch no ledger.  Operators' pending credits become available after
  // verify_window_s.
  ledger::Pricing pricing;
  double verify_window_s = 86400;
  // Reserved slots (hub_slots.cc): probed every probe_interval_s in their window; paid per
  // slot_period_s an availability credit of slot_share x what the slot would earn busy, and their
  // tokens at reserved_multiplier x the operator share; lost under min_availability over 30 days
  // once min_probes were sent.
  double probe_interval_s = 300;
  double slot_period_s = 3600;
  double slot_share = 0.1;
  double reserved_multiplier = 1.1;
  double min_availability = 0.98;
  int64_t min_probes = 20;
  // Every node hears this often what its operator earned and, when it got no work, why (and a
  // second after it earns).
  double standing_s = 30;
  // Verification (docs/network.md, "Verification"): attempts are re-executed on another node at
  // each node's rate (verify::RateConfig; verify_rate 0 turns checks off), and every
  // canary_interval_s a canary goes to a random node (0: none).  A check with no verifier or no
  // answer within check_wait_s goes to the next verifier, and is dropped after check_tries.
  double verify_rate = 0.5;
  double verify_floor = 0.02;
  double canary_interval_s = 300;
  double check_wait_s = 120;
  int check_tries = 3;
};

class Hub {
 public:
  // Opens nothing itself: `store` is open and migrated.  Listens at once; fails when the address
  // is taken.  Unfinished jobs of an earlier run end as failed ("the hub restarted ...").
  static StatusOr<std::unique_ptr<Hub>> Start(boost::asio::io_context& io, HubOptions options,
                                              std::unique_ptr<store::Store> store);
  ~Hub();
  int port() const;
  // Stops accepting, ends every stream with an error, closes node connections.
  void Stop();

  class Impl;

 private:
  explicit Hub(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::network::hub
