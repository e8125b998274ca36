#include "loom/cluster/link_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "loom/comm/benchmark.h"

namespace loom::cluster {

StatusOr<LinkProbeResult> RunLinkProbe(const LinkProbeSpec& spec, base::Fd listener) {
  comm::GroupConfig config;
  config.backend = "tcp";
  config.rank = spec.rank;
  config.size = 2;
  config.peers = {StrCat(spec.rank0_host, ":", spec.rank0_port), StrCat(spec.rank1_host, ":", spec.rank1_port)};
  config.group_id = StrCat("loom-cluster-probe-", spec.probe);
  config.secret = spec.secret;
  config.options = spec.options;
  config.options.timeout_seconds = 10;
  config.listen_fd = listener.Release();
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<comm::Group> group, comm::CreateGroup(config));
  // Latency: the ping-pong of 64-byte messages, the 10th percentile of the round trips, not the
  // median: what the link gives, without the waits of a busy scheduler (on a loaded machine the
  // median of a 300 us link was measured at 2-4 ms).
  comm::BenchOptions small;
  small.ops = {"sendrecv"};
  small.min_bytes = small.max_bytes = 64;
  small.target_seconds = 2.5 * spec.seconds_per_size;  // enough round trips for a steady p10
  LOOM_ASSIGN_OR_RETURN(std::vector<comm::BenchRow> rows,
                        comm::RunCommBenchmark(*group, small, nullptr));
  LinkProbeResult out;
  for (const comm::BenchRow& row : rows) out.latency_s = row.p10_us * 1e-6;
  // Bandwidth: back-to-back 4 MiB broadcasts from rank 0, which the tcp backend stripes over its
  // channels (and so over every link of an "a+b" address) as it does the pod's all-reduces;
  // point-to-point sends travel on one channel.  Rank 1 (the member that measures) times them
  // and chooses each round's count, so that a round takes about `seconds_per_size`; a warm-up
  // round, then the best of two.
  constexpr int64_t kBytes = int64_t{4} << 20;
  std::vector<std::byte> buf(static_cast<size_t>(kBytes));
  int64_t n = 2;
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    // Rank 1's count is rank 0's signal to start, so nothing is in flight before rank 1's clock
    // starts (a barrier let rank 0 send ahead into the socket buffers: +28% on a shaped link).
    const auto t0 = std::chrono::steady_clock::now();
    if (spec.rank == 1) {
      LOOM_RETURN_IF_ERROR(group->Send(&n, sizeof(n), 0));
    } else {
      LOOM_RETURN_IF_ERROR(group->Recv(&n, sizeof(n), 1));
      if (n < 1 || n > 1024) return DataLossError("cluster: probe round of ", n, " messages");
    }
    for (int64_t i = 0; i < n; ++i) LOOM_RETURN_IF_ERROR(group->Broadcast(buf.data(), kBytes, 0));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double per = s / static_cast<double>(n);
    if (round > 0) best = std::max(best, static_cast<double>(kBytes) / per);  // round 0 warms up
    n = std::clamp<int64_t>(static_cast<int64_t>(spec.seconds_per_size / std::max(per, 1e-6)), 2,
                            64);
  }
  out.bytes_per_s = best;
  if (out.latency_s <= 0 || out.bytes_per_s <= 0) {
    return InternalError("cluster: the link probe measured nothing");
  }
  return out;
}

}  // namespace loom::cluster
