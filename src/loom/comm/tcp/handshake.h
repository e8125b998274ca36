// Building the full mesh of authenticated connections of a tcp group.  Rank r connects to every
// lower rank (`channels` sockets each) and accepts from every higher one.  Each connection is
// authenticated both ways with the group secret (see wire.h); a connection that fails (a stranger,
// a wrong secret, a wrong group) is refused and closed while the listener keeps waiting for the
// real ranks until the deadline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/comm/tcp/socket.h"

namespace loom::comm::tcp {

struct MeshSpec {
  int rank = 0;
  int size = 1;
  int channels = 1;
  std::vector<std::string> peers;  // "host:port" of every rank (names in errors, connect targets)
  std::string group_id;
  std::string secret;
  int64_t deadline_ns = 0;  // NowNanos() clock
};

// Returns (size * channels) descriptors: [peer * channels + channel], invalid for peer == rank.
// `listener` must be listening already (it is closed when the mesh is complete).
StatusOr<std::vector<Fd>> BuildMesh(const MeshSpec& spec, Fd listener);

// One client handshake on a connected socket (exposed for tests of refusal): proves the secret to
// `server_rank` and checks the server's proof.
Status ClientHandshake(int fd, const MeshSpec& spec, int server_rank, int channel);

}  // namespace loom::comm::tcp
