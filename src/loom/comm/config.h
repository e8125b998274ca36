// How a process finds its group: options that tune every backend, the configuration that the
// launcher passes through the environment (see docs/comm.md for the variables), and the registry
// of backends that CreateGroup() chooses from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

#include "loom/base/status.h"
#include "loom/comm/group.h"

namespace loom::comm {

// Link emulation for benchmarks (tcp backend only): each message is held back on the receiving
// side until `delay_us` after it was sent, and a link carries at most `gbps` gigabits per second
// (0 = unlimited).  Emulated in user space; the sender and receiver must share a monotonic clock,
// so it is meaningful only for ranks on one host.
// `LOOM_LINK_DELAY_US=50` delays every message; `LOOM_LINK_DELAY_US=50,10.200.0.6=300` delays
// messages from peers on host 10.200.0.6 by 300 us and the others by 50 us (some links slower).
struct LinkEmulation {
  double delay_us = 0;  // one-way delay per message, microseconds
  std::vector<std::pair<std::string, double>> delay_us_from;  // (peer host, delay) overrides
  double gbps = 0;      // bandwidth cap per direction per peer pair, gigabits/s; 0 = none
  bool enabled() const {
    bool any = delay_us > 0 || gbps > 0;
    for (const auto& [host, us] : delay_us_from) any = any || us > 0;
    return any;
  }
  // The delay of messages from a peer on `host`.
  double DelayFromUs(std::string_view host) const {
    for (const auto& [h, us] : delay_us_from) {
      if (h == host) return us;
    }
    return delay_us;
  }
};

// A peer's host may name its addresses on several links, "10.0.0.2+10.0.1.2" (lower latency
// first): the tcp backend's channel c dials the (c mod n)-th.  Returns them (one when no '+').
std::vector<std::string> SplitHostAlternatives(std::string_view host);

// Parses LOOM_LINK_DELAY_US's value into `link` (delay_us and delay_us_from).
Status ParseLinkDelays(std::string_view text, LinkEmulation* link);

struct GroupOptions {
  double timeout_seconds = 30;       // deadline of every wait (connect, collective, send/recv)
  int64_t spin_microseconds = 1000;  // busy-poll this long before blocking in the kernel
  // After a short pure spin, yield the CPU between polls.  When two ranks end up on one core (the
  // scheduler tends to wake a blocked rank next to the one that woke it) or ranks outnumber cores,
  // a rank that spins without yielding starves the very rank it waits for until its time slice
  // ends.  LOOM_COMM_YIELD=0 turns it off (ranks pinned to their own cores).
  bool spin_yield = true;
  // tcp
  int tcp_channels = 2;                       // sockets per peer pair (large messages stripe)
  int64_t tcp_oneshot_max_bytes = 256 << 10;  // all-reduce at or below: one-shot exchange
  int64_t tcp_segment_bytes = 512 << 10;      // pipeline segment of the ring
  LinkEmulation link;
  // shm
  int64_t shm_slot_bytes = 1 << 20;     // per-rank staging area for collectives
  int64_t shm_mailbox_bytes = 1 << 20;  // per ordered rank pair, for Send/Recv
};

// Everything needed to create a group.
struct GroupConfig {
  std::string backend = "self";  // a name from BackendNames()
  int rank = 0;
  int size = 1;
  std::vector<std::string> peers;  // tcp: "host:port" per rank (rank r listens on peers[r])
  std::string group_id;            // names the group; derived ids name sub-groups
  std::string secret;              // shared secret for authenticating connections; may be empty
  int listen_fd = -1;              // tcp: an already bound listening socket for this rank, or -1
  GroupOptions options;
};

// Reads LOOM_BACKEND, LOOM_RANK, LOOM_WORLD_SIZE, LOOM_PEERS (or LOOM_HOSTFILE, a JSON hostfile
// from which ranks started by hand take their peers), LOOM_GROUP_ID, LOOM_GROUP_SECRET,
// LOOM_LISTEN_FD and the tuning variables (LOOM_COMM_TIMEOUT_S, LOOM_COMM_SPIN_US, LOOM_COMM_YIELD,
// LOOM_TCP_CHANNELS, LOOM_TCP_ONESHOT_MAX, LOOM_TCP_SEGMENT, LOOM_LINK_DELAY_US, LOOM_LINK_GBPS,
// LOOM_SHM_SLOT_BYTES, LOOM_SHM_MAILBOX_BYTES) through `getenv` (a function so tests can pass a
// map).  Under mpirun (OMPI_COMM_WORLD_SIZE set) without LOOM_BACKEND, the backend is "mpi".
// Without any of these variables the result is a one-rank "self" group.
using EnvLookup = std::function<const char*(const char*)>;
StatusOr<GroupConfig> GroupConfigFromEnvironment(const EnvLookup& getenv);
StatusOr<GroupConfig> GroupConfigFromEnvironment();  // the process environment

// Validates fields that do not depend on the backend (rank < size, peers count, option ranges).
Status ValidateGroupConfig(const GroupConfig& config);

// Creates the group `config.backend` names.  Blocks until every rank has joined or the timeout.
StatusOr<std::unique_ptr<Group>> CreateGroup(const GroupConfig& config);
StatusOr<std::unique_ptr<Group>> CreateGroupFromEnvironment();

// Names accepted by CreateGroup, in registry order.
std::vector<std::string_view> BackendNames();
// Whether the backend was compiled in (mpi is optional).
bool BackendAvailable(std::string_view name);

// Parses "host:port" ("[v6addr]:port" also accepted).
Status ParseHostPort(std::string_view text, std::string* host, int* port);

// Parses a byte count: digits with an optional binary suffix K, M or G ("64", "16K", "64M").
StatusOr<int64_t> ParseByteSize(std::string_view text);

}  // namespace loom::comm
