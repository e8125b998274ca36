#include "loom/cluster/link_probe.h"

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
  comm::BenchOptions bench;
  bench.ops = {"sendrecv"};
  bench.min_bytes = 64;
  bench.max_bytes = int64_t{4} << 20;
  bench.size_factor = bench.max_bytes / bench.min_bytes;
  bench.target_seconds = spec.seconds_per_size;
  LOOM_ASSIGN_OR_RETURN(std::vector<comm::BenchRow> rows,
                        comm::RunCommBenchmark(*group, bench, nullptr));
  LinkProbeResult out;
  // The 10th percentile, not the median: what the link gives, without the waits of a busy
  // scheduler (on a loaded machine the median of a 300 us link was measured at 2-4 ms).
  for (const comm::BenchRow& row : rows) {
    if (row.bytes == bench.min_bytes) out.latency_s = row.p10_us * 1e-6;
    if (row.bytes == bench.max_bytes && row.p10_us > 0) {
      out.bytes_per_s = static_cast<double>(row.bytes) / (row.p10_us * 1e-6);
    }
  }
  if (out.latency_s <= 0 || out.bytes_per_s <= 0) {
    return InternalError("cluster: the link probe measured nothing");
  }
  return out;
}

}  // namespace loom::cluster
