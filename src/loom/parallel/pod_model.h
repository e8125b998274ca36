// One model run by a pod of ranks (tensor and/or pipeline parallel), each rank holding the shard its
// plan gives it.  Rank 0 drives: PodModel is a model::ForwardPass that generation loops use exactly
// like a local model.  Every other rank runs RunFollower() until rank 0 shuts the pod down.
//
// A step: rank 0 sends the step (tokens, positions, slots, wanted logit rows) to the other ranks of
// stage 0 (tensor-parallel broadcast); stage 0 embeds and runs its layers, summing partial
// attention/FFN outputs with an all-reduce inside its tensor-parallel group; each rank sends the
// step and its hidden states to the rank with the same tensor-parallel position in the next stage;
// the last stage's first rank computes the wanted logits and sends them to rank 0.  A step that
// wants no logits (a prompt chunk before the last) returns on rank 0 as soon as stage 0 has handed
// it on, so the next chunk runs on stage 0 while stage 1 works on this one: long prompts flow
// through the stages pipelined.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/comm/group.h"
#include "loom/model/forward_pass.h"
#include "loom/model/transformer.h"
#include "loom/parallel/plan.h"
#include "loom/parallel/step_wire.h"

namespace loom::parallel {

// The pieces of one rank of a pod.  `world` holds every rank; `tp_group` the ranks of this rank's
// stage (null when tp == 1).  `local` runs this rank's shard.  All must outlive the users below.
struct PodRank {
  comm::Group* world = nullptr;
  comm::Group* tp_group = nullptr;
  const ParallelPlan* plan = nullptr;
  model::Transformer* local = nullptr;
};

// Creates this rank's tensor-parallel group (Split of the world by stage); null when tp == 1.
StatusOr<std::unique_ptr<comm::Group>> MakeTensorParallelGroup(comm::Group& world,
                                                               const ParallelPlan& plan);

// Shared by the driver and the followers: moves steps and activations between the ranks.
class PodRunner {
 public:
  explicit PodRunner(const PodRank& pod);
  // Runs one step on this rank (the driver passes the step it made; followers receive theirs).
  // For a forward step on rank 0 that wants logits, they are written to `logits`.
  Status RunStep(Step* step, float* logits);
  // Followers: receives the next step from rank 0's side of the pod.
  Status ReceiveStep(Step* step);

 private:
  Status Exchange(const std::vector<std::byte>& buffer, int peer, bool send);
  Status LastStageLogits(const Step& step, float* out);
  bool driver() const { return pod_.world->rank() == 0; }

  PodRank pod_;
  const RankPlan& me_;
  uint32_t next_seq_ = 0;
  std::vector<std::byte> wire_;            // an encoded step (at least kInlineBytes)
  base::AlignedBuffer<float> logits_;       // (max_batch, vocab) on the last stage's first rank
  base::AlignedBuffer<float> part_logits_;  // (max_batch, vocab slice) on the last stage
  class TpCollective;
  std::unique_ptr<model::Collective> collective_;
};

class PodModel : public model::ForwardPass {
 public:
  // Rank 0 only.
  explicit PodModel(const PodRank& pod);
  ~PodModel() override;

  Status Forward(const model::Batch& batch, float* logits) override;
  // Tells every rank to leave its follower loop.  Called by the destructor if not before.
  Status Shutdown();
  // Sends an empty step so idle followers do not hit their receive deadline.
  Status Ping();
  Status KeepAlive() override { return Ping(); }

  const model::HParams& hparams() const override { return pod_.local->hparams(); }
  int64_t context() const override { return pod_.local->context(); }
  int64_t max_batch() const override { return pod_.local->max_batch(); }
  int64_t n_slots() const override { return pod_.local->n_slots(); }

 private:
  PodRank pod_;
  PodRunner runner_;
  Step step_;
  bool shut_down_ = false;
};

// Every rank but 0: runs steps until rank 0 sends shutdown (OK) or something fails.
Status RunFollower(const PodRank& pod);

}  // namespace loom::parallel
