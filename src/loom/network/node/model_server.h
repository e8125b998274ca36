// One loaded model on a node: a `loom serve` child process on 127.0.0.1 (a free port, a random
// API key of its own), which brings the engine's continuous batching and, with --tp/--pp, a pod
// of local ranks.  The child dies with the agent (PR_SET_PDEATHSIG).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/base/status.h"

namespace boost::asio {
class io_context;
}

namespace loom::network::node {

struct ServeConfig {
  std::string loom_binary;  // the `loom` executable (this one: /proc/self/exe)
  int parallel = 4;         // sequences at once (--parallel)
  int64_t ctx = 2048;       // positions per sequence (--ctx)
  int threads = 0;          // 0: loom serve's default
  int tp = 1, pp = 1;       // a pod of local ranks
};

// The split of a pod of `ranks` local ranks for one model: of the plans `loom plan` predicts
// (the cost model of cluster/, calibrated on this machine) that use all the ranks, the one with
// the fastest generation.  Runs `loom plan --json` (a few seconds).
struct PodSplit {
  int tp = 1, pp = 1;
  double decode_tokens_per_s = 0;  // the plan's prediction
};
StatusOr<PodSplit> PlanPodSplit(const std::string& loom_binary, const std::string& model_path,
                                int ranks);

class ModelServer {
 public:
  // Starts the child; `ready` runs once on io's thread: OK when it listens, else why not.
  static StatusOr<std::unique_ptr<ModelServer>> Start(boost::asio::io_context& io,
                                                      const std::string& name,
                                                      const std::string& path,
                                                      const ServeConfig& config,
                                                      std::function<void(Status)> ready);
  ~ModelServer();  // SIGTERM, then SIGKILL after 5 s; joins the reader
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;

  bool ready() const;
  bool exited() const;  // the child is gone (crashed or was stopped)
  int port() const;
  int pid() const { return pid_; }
  const std::string& api_key() const { return api_key_; }

  struct Shared;

 private:
  ModelServer() = default;
  int pid_ = -1;
  std::string api_key_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace loom::network::node
