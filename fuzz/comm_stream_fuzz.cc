// Fuzzes the tcp engine's receive path with an arbitrary byte stream from a "peer": header
// validation, sequence checks, the stash of unexpected point-to-point messages and streaming
// reduction.  The stream arrives on a socketpair whose far end is closed, so every run ends with a
// result, an error or end of stream; none may crash or hang.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/comm/tcp/engine.h"

using namespace loom::comm;
using namespace loom::comm::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > (1 << 16)) return 0;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  // The first byte picks what the receive expects; the rest is the stream.
  const uint8_t mode = data[0];
  size_t off = 1;
  while (off < size) {
    const ssize_t n = ::write(sv[0], data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::close(sv[0]);
  EngineOptions o;
  o.rank = 1;
  o.size = 2;
  o.channels = 1;
  o.group = 0;  // headers must name group 0
  o.peers = {"fuzz:0", "fuzz:1"};
  o.spin_ns = 0;
  o.stash_limit_bytes = 1 << 16;
  std::vector<Fd> conns(2);
  conns[0] = Fd(sv[1]);
  Engine engine(o, std::move(conns));
  std::vector<float> buf(64);
  Transfer t;
  t.peer = 0;
  t.data = reinterpret_cast<std::byte*>(buf.data());
  t.header.bytes = (mode >> 2) % 9 * 32;  // 0..256 bytes
  switch (mode % 3) {
    case 0:
      t.kind = Transfer::Kind::kRecv;
      t.header.op = Op::kSend;
      t.header.tag = (mode >> 6) & 1;
      break;
    case 1:
      t.kind = Transfer::Kind::kRecvReduce;
      t.header.op = Op::kAllReduce;
      t.header.dtype = static_cast<uint8_t>(1 + (mode >> 6) % 3);
      t.header.index = 1;
      break;
    default:
      t.kind = Transfer::Kind::kRecv;
      t.header.op = Op::kAllGather;
      t.header.index = 1;
      break;
  }
  Transfer batch[2] = {t, t};
  batch[1].header.tag = 0;
  (void)engine.Run(batch, NowNanos() + 1'000'000'000, OpLabel{"fuzz"});
  return 0;
}
