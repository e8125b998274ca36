// Measuring one link between two members with the transport their ranks will use: a two-rank tcp
// group (comm/tcp, with the same options and link emulation as `loom run --backend tcp`) and the
// one-way time of 64-byte ping-pongs (latency, the 10th percentile) and back-to-back 4 MiB
// broadcasts from rank 0 (bandwidth, striped over the tcp channels as all-reduces are; timed on
// rank 1, the member that measures).  Blocking: the daemon runs it on a worker thread.
#pragma once

#include <cstdint>
#include <string>

#include "loom/base/fd.h"
#include "loom/base/status.h"
#include "loom/comm/config.h"

namespace loom::cluster {

struct LinkProbeSpec {
  int rank = 0;            // 0 accepts rank 1's connections; 1 connects to rank 0
  std::string rank0_host;  // the responder's address
  int rank0_port = 0;
  std::string rank1_host;  // the initiator's address
  int rank1_port = 0;
  uint64_t probe = 0;      // names the group
  std::string secret;      // the cluster secret authenticates the group's connections
  comm::GroupOptions options;
  double seconds_per_size = 0.1;
};

struct LinkProbeResult {
  double latency_s = 0;    // one-way, 64-byte messages, 10th percentile
  double bytes_per_s = 0;  // 4 MiB broadcasts received by rank 1 (meaningful on rank 1 only)
};

// `listener`: this rank's listening socket (on rank0_host:rank0_port for rank 0, on
// rank1_host:rank1_port for rank 1).
StatusOr<LinkProbeResult> RunLinkProbe(const LinkProbeSpec& spec, base::Fd listener);

}  // namespace loom::cluster
