// The progress engine of the tcp backend: drives a batch of message sends and receives over the
// group's non-blocking sockets from the calling thread until all are done, the deadline passes or
// something fails.  Sending and receiving of all peers overlap, so simultaneous exchanges never
// deadlock on full socket buffers.
//
// Waiting is spin-then-block: while nothing arrives the engine keeps polling the sockets without
// sleeping for `spin_ns` (a blocked process here takes ~20 us to wake up), yielding the CPU between
// polls so that oversubscribed ranks still progress, and then blocks in poll() until data, the
// deadline, or the next emulated delivery time.
//
// Every incoming header is validated (wire.h) and then checked against what the receive expects:
// group, per-connection sequence number, op, collective index, offset, size, element type.  A
// point-to-point message that arrives while something else is expected on a connection is set
// aside ("stashed") until a Recv asks for it; anything else out of order is an error.
#pragma once

#include <poll.h>

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/status.h"
#include "loom/comm/config.h"
#include "loom/comm/group.h"
#include "loom/comm/tcp/socket.h"
#include "loom/comm/wire.h"

namespace loom::comm::tcp {

// One message of a batch.
struct Transfer {
  enum class Kind : uint8_t {
    kSend,        // send header + payload from `data`
    kRecv,        // receive the payload into `data`
    kRecvReduce,  // add the payload element-wise into `data` (header.dtype)
  };
  Kind kind = Kind::kSend;
  int peer = 0;
  int channel = 0;
  // Send: the header to send (seq and send time are filled in).  Receive: what must arrive: op,
  // tag, index, offset, bytes and dtype are compared with the incoming header.
  MessageHeader header;
  std::byte* data = nullptr;

  // Progress, owned by the engine.
  int64_t done = 0;         // send: header+payload bytes written; receive: payload consumed
  int64_t ready_at_ns = 0;  // receive with link emulation: when it counts as delivered
  bool matched = false;     // receive: the incoming header has been matched
  bool received = false;    // receive: the whole payload has been consumed
  bool complete = false;
  int64_t posted_ns = 0;
  uint8_t wire[kHeaderBytes] = {};  // send: the encoded header
};

// Names the operation of a batch in errors, formatted only when one happens (no allocation on the
// fast path): "all-reduce #12 (16384 bytes)", "send to rank 1 (tag 0, 64 bytes)".
struct OpLabel {
  const char* op = "";  // "all-reduce", "send to", "recv from", ...
  uint64_t index = 0;   // collective number (0: point-to-point)
  int64_t bytes = 0;
  int peer = -1;        // point-to-point
  int tag = 0;
  const char* note = "";  // e.g. "ring"
};
std::string Describe(const OpLabel& label);

struct EngineOptions {
  int rank = 0;
  int size = 1;
  int channels = 1;
  uint64_t group = 0;              // fingerprint expected in every header
  std::vector<std::string> peers;  // names for errors
  int64_t spin_ns = 1'000'000;
  bool spin_yield = false;  // sched_yield between idle polls (ranks outnumber cores)
  LinkEmulation link;
  int64_t stash_limit_bytes = int64_t{1} << 30;
};

class Engine {
 public:
  // conns: (size * channels) connected, authenticated non-blocking sockets; entries of this rank
  // are ignored.
  Engine(EngineOptions options, std::vector<Fd> conns);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs `batch` to completion.  Transfers on the same (peer, channel) happen in batch order.
  Status Run(std::span<Transfer> batch, int64_t deadline_ns, const OpLabel& label);

  // Closes every connection (shutdown first, so peers see EOF at once).
  void CloseAll();

  int64_t stashed_bytes() const { return stashed_bytes_; }

 private:
  struct Connection {
    Fd fd;
    uint64_t send_seq = 0;            // last sequence number sent
    uint64_t recv_seq = 0;            // last sequence number received
    base::AlignedBuffer<uint8_t> in;  // receive buffer; [in_begin, in_end) unread
    int64_t in_begin = 0;
    int64_t in_end = 0;
    // A point-to-point message being set aside while something else is expected.
    bool stashing = false;
    MessageHeader stash_header;
    std::vector<std::byte> stash_payload;
    int64_t stash_done = 0;
    // Link emulation (this connection's peer -> this rank): when the link is next free.
    int64_t link_free_ns = 0;
  };
  struct Stashed {
    int peer;
    MessageHeader header;
    std::vector<std::byte> payload;
    int64_t ready_at_ns;
  };

  Connection& Conn(int peer, int channel) { return conns_[peer * options_.channels + channel]; }
  std::string PeerName(int peer, int channel) const;

  // Each returns OK (with *progress set when bytes moved) or the error that breaks the group.
  Status ProgressSend(Transfer& t, bool* progress);
  Status ProgressRecv(Transfer& t, bool* progress);
  Status ReadHeader(Connection& c, int peer, int channel, MessageHeader* h, bool* have);
  Status MatchHeader(Transfer& t, const MessageHeader& h, bool* stash);
  Status ConsumePayload(Transfer& t, Connection& c, bool* progress);
  Status ContinueStash(Connection& c, int peer, bool* progress);
  StatusOr<bool> TakeFromStash(Transfer& t);
  // Reads more bytes into c.in; returns false at EAGAIN; error on EOF or failure.
  Status Fill(Connection& c, int peer, int channel, bool* got);
  int64_t DeliveryTime(int peer, Connection& c, const MessageHeader& h);
  Status Wait(int64_t until_ns);
  Status TimeoutError(std::span<Transfer> batch) const;

  EngineOptions options_;
  std::vector<Connection> conns_;
  std::deque<Stashed> stash_;
  int64_t stashed_bytes_ = 0;
  std::vector<pollfd> pollfds_;
  std::vector<int64_t> delay_ns_;   // per peer: emulated one-way delay of its messages
  std::vector<uint8_t> send_busy_;  // per connection, within one pass
  std::vector<uint8_t> recv_busy_;
};

}  // namespace loom::comm::tcp
