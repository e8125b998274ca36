#include "loom/parallel/pod_model.h"

#include <cstring>
#include <vector>

#include "loom/kernels/ops.h"

namespace loom::parallel {

class PodRunner::TpCollective : public model::Collective {
 public:
  explicit TpCollective(comm::Group& group) : group_(group) {}
  // The ranks' partial sums are added in SumTree's order, so that a row-split product's canonical
  // leaf tree (kernels/matmul.h) is completed exactly as one process completes it.  Two ranks
  // need nothing special (one addition commutes); more gather every partial and add them here.
  Status AllReduceSum(float* data, int64_t n) override {
    const int ranks = group_.size();
    if (ranks <= 2) return group_.AllReduceSum(data, n, comm::ElementType::kF32);
    if (gathered_.size() < ranks * n) gathered_ = base::AlignedBuffer<float>(ranks * n);
    LOOM_RETURN_IF_ERROR(group_.AllGather(data, gathered_.data(), n * int64_t{sizeof(float)}));
    parts_.resize(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) parts_[static_cast<size_t>(r)] = gathered_.data() + r * n;
    kernels::SumTree(parts_.data(), ranks, n);
    std::memcpy(data, gathered_.data(), static_cast<size_t>(n) * sizeof(float));
    return OkStatus();
  }

 private:
  comm::Group& group_;
  base::AlignedBuffer<float> gathered_;  // (ranks, n) every rank's partial sums
  std::vector<float*> parts_;            // (ranks) rows of gathered_
};

StatusOr<std::unique_ptr<comm::Group>> MakeTensorParallelGroup(comm::Group& world,
                                                               const ParallelPlan& plan) {
  if (world.size() != plan.world_size()) {
    return InvalidArgumentError("pod: the group has ", world.size(), " ranks but the plan (tp=",
                                plan.tp, ", pp=", plan.pp, ") needs ", plan.world_size());
  }
  if (plan.tp == 1) return std::unique_ptr<comm::Group>();
  const RankPlan& me = plan.rank(world.rank());
  return world.Split(me.stage, me.tp_rank);
}

PodRunner::PodRunner(const PodRank& pod) : pod_(pod), me_(pod.plan->rank(pod.world->rank())) {
  const int64_t max_batch = pod_.local->max_batch();
  wire_.reserve(static_cast<size_t>(std::max(StepBytes(max_batch, max_batch), kInlineBytes)));
  const ParallelPlan& plan = *pod_.plan;
  if (me_.stage == plan.pp - 1 && me_.tp_rank == 0 && !driver()) {
    logits_ = base::AlignedBuffer<float>(max_batch * pod_.local->hparams().vocab_size);
  }
  if (me_.stage == plan.pp - 1 && plan.tp > 1) {
    int64_t widest = 0;  // the largest vocabulary slice of the stage
    for (int t = 0; t < plan.tp; ++t) {
      widest = std::max(widest, plan.rank((plan.pp - 1) * plan.tp + t).shard.vocab_count);
    }
    part_logits_ = base::AlignedBuffer<float>(max_batch * widest);
  }
  if (pod_.tp_group != nullptr) {
    collective_ = std::make_unique<TpCollective>(*pod_.tp_group);
    pod_.local->set_collective(collective_.get());
  }
}

Status PodRunner::ReceiveStep(Step* step) {
  const int64_t max_batch = pod_.local->max_batch();
  wire_.resize(static_cast<size_t>(kInlineBytes));
  const int prev = pod_.world->rank() - pod_.plan->tp;
  if (me_.stage == 0) {
    LOOM_RETURN_IF_ERROR(pod_.tp_group->Broadcast(wire_.data(), kInlineBytes, 0));
  } else {
    LOOM_RETURN_IF_ERROR(pod_.world->Recv(wire_.data(), kInlineBytes, prev));
  }
  StepHeader h;
  std::memcpy(&h, wire_.data(), sizeof(h));
  LOOM_RETURN_IF_ERROR(ValidateStepHeader(h, next_seq_, max_batch));
  const int64_t total = StepBytes(h.n_tokens, h.n_logits);
  if (total > kInlineBytes) {
    wire_.resize(static_cast<size_t>(total));
    std::byte* rest = wire_.data() + kInlineBytes;
    if (me_.stage == 0) {
      LOOM_RETURN_IF_ERROR(pod_.tp_group->Broadcast(rest, total - kInlineBytes, 0));
    } else {
      LOOM_RETURN_IF_ERROR(pod_.world->Recv(rest, total - kInlineBytes, prev));
    }
  }
  const model::HParams& hp = pod_.local->hparams();
  return DecodeStep(wire_, next_seq_, max_batch, hp.vocab_size, pod_.local->context(),
                    pod_.local->n_slots(), step);
}

// The output head is split by vocabulary rows over the last stage's tensor-parallel ranks (each
// reads only its share of the largest matrix); their slices are gathered on the stage's first
// rank into out(rows, vocab).
Status PodRunner::LastStageLogits(const Step& step, float* out) {
  const ParallelPlan& plan = *pod_.plan;
  const int64_t rows = static_cast<int64_t>(step.logit_rows.size());
  const int64_t vocab = pod_.local->hparams().vocab_size;
  const int first = (plan.pp - 1) * plan.tp;  // the stage's tensor-parallel rank 0
  if (plan.tp == 1) return pod_.local->Logits(step.logit_rows, out);
  // (rows, this rank's slice) into the part buffer, then into place.
  float* part = part_logits_.data();
  LOOM_RETURN_IF_ERROR(pod_.local->Logits(step.logit_rows, part));
  if (me_.tp_rank != 0) {
    return pod_.world->Send(part, rows * pod_.local->local().vocab_count * 4, first);
  }
  for (int t = 0; t < plan.tp; ++t) {
    const model::ShardSpec& s = plan.rank(first + t).shard;
    const int64_t count = s.vocab_count;
    if (t != 0) LOOM_RETURN_IF_ERROR(pod_.world->Recv(part, rows * count * 4, first + t));
    for (int64_t j = 0; j < rows; ++j) {
      std::memcpy(out + j * vocab + s.vocab_begin, part + j * count,
                  static_cast<size_t>(count) * sizeof(float));
    }
  }
  return OkStatus();
}

Status PodRunner::RunStep(Step* step, float* logits) {
  const ParallelPlan& plan = *pod_.plan;
  const int rank = pod_.world->rank();
  if (driver()) {
    step->seq = next_seq_;
    EncodeStep(*step, &wire_);
    if (pod_.tp_group != nullptr) {
      LOOM_RETURN_IF_ERROR(pod_.tp_group->Broadcast(wire_.data(), kInlineBytes, 0));
      const int64_t total = static_cast<int64_t>(wire_.size());
      if (total > kInlineBytes) {
        LOOM_RETURN_IF_ERROR(
            pod_.tp_group->Broadcast(wire_.data() + kInlineBytes, total - kInlineBytes, 0));
      }
    }
  }
  ++next_seq_;
  const bool last_stage = me_.stage == plan.pp - 1;
  const int next = rank + plan.tp;
  const int64_t dim = pod_.local->hparams().dim;
  const int64_t n = static_cast<int64_t>(step->tokens.size());
  const int64_t wire_bytes = std::max(StepBytes(n, static_cast<int64_t>(step->logit_rows.size())),
                                      kInlineBytes);
  auto forward_step = [&]() -> Status {
    LOOM_RETURN_IF_ERROR(pod_.world->Send(wire_.data(), kInlineBytes, next));
    if (wire_bytes > kInlineBytes) {
      LOOM_RETURN_IF_ERROR(
          pod_.world->Send(wire_.data() + kInlineBytes, wire_bytes - kInlineBytes, next));
    }
    return OkStatus();
  };
  if (step->op != StepOp::kForward) return last_stage ? OkStatus() : forward_step();

  model::Batch batch{step->tokens, step->positions, step->slots, step->logit_rows};
  if (me_.stage == 0) {
    LOOM_RETURN_IF_ERROR(pod_.local->Embed(step->tokens));
  } else {
    LOOM_RETURN_IF_ERROR(
        pod_.world->Recv(pod_.local->hidden_state(), n * dim * 4, rank - plan.tp));
  }
  LOOM_RETURN_IF_ERROR(pod_.local->Layers(batch));
  const int64_t rows = static_cast<int64_t>(step->logit_rows.size());
  const int64_t vocab_bytes = pod_.local->hparams().vocab_size * 4;
  if (!last_stage) {
    LOOM_RETURN_IF_ERROR(forward_step());
    LOOM_RETURN_IF_ERROR(pod_.world->Send(pod_.local->hidden_state(), n * dim * 4, next));
  } else if (rows > 0) {
    LOOM_RETURN_IF_ERROR(LastStageLogits(*step, driver() ? logits : logits_.data()));
    if (me_.tp_rank == 0 && !driver()) {
      LOOM_RETURN_IF_ERROR(pod_.world->Send(logits_.data(), rows * vocab_bytes, 0));
    }
  }
  if (driver() && rows > 0 && !last_stage) {
    LOOM_RETURN_IF_ERROR(pod_.world->Recv(logits, rows * vocab_bytes, (plan.pp - 1) * plan.tp));
  }
  return OkStatus();
}

PodModel::PodModel(const PodRank& pod) : pod_(pod), runner_(pod) {
  const int64_t max_batch = pod.local->max_batch();
  for (auto* v : {&step_.tokens, &step_.positions, &step_.slots, &step_.logit_rows}) {
    v->reserve(static_cast<size_t>(max_batch));
  }
}

PodModel::~PodModel() {
  if (!shut_down_) Shutdown().ok();  // best effort: followers also stop when rank 0 goes away
}

Status PodModel::Forward(const model::Batch& batch, float* logits) {
  if (shut_down_) return FailedPreconditionError("pod: forward after shutdown");
  if (batch.tokens.empty() || static_cast<int64_t>(batch.tokens.size()) > max_batch()) {
    return InvalidArgumentError("pod: batch of ", batch.tokens.size(), " tokens (max ",
                                max_batch(), ")");
  }
  step_.op = StepOp::kForward;
  step_.tokens.assign(batch.tokens.begin(), batch.tokens.end());
  step_.positions.assign(batch.positions.begin(), batch.positions.end());
  step_.slots.assign(batch.slots.begin(), batch.slots.end());
  step_.logit_rows.assign(batch.logit_rows.begin(), batch.logit_rows.end());
  return runner_.RunStep(&step_, logits);
}

Status PodModel::Shutdown() {
  if (shut_down_) return OkStatus();
  shut_down_ = true;
  step_.op = StepOp::kShutdown;
  for (auto* v : {&step_.tokens, &step_.positions, &step_.slots, &step_.logit_rows}) v->clear();
  LOOM_RETURN_IF_ERROR(runner_.RunStep(&step_, nullptr));
  // Nobody leaves before everyone has the shutdown: a transport may take a finished peer for a
  // failed one while others still wait for messages relayed through the pipeline.
  return pod_.world->Barrier();
}

Status PodModel::Ping() {
  if (shut_down_) return OkStatus();
  step_.op = StepOp::kPing;
  for (auto* v : {&step_.tokens, &step_.positions, &step_.slots, &step_.logit_rows}) v->clear();
  return runner_.RunStep(&step_, nullptr);
}

Status RunFollower(const PodRank& pod) {
  PodRunner runner(pod);
  Step step;
  const int64_t max_batch = pod.local->max_batch();
  for (auto* v : {&step.tokens, &step.positions, &step.slots, &step.logit_rows}) {
    v->reserve(static_cast<size_t>(max_batch));
  }
  for (;;) {
    LOOM_RETURN_IF_ERROR(runner.ReceiveStep(&step));
    LOOM_RETURN_IF_ERROR(runner.RunStep(&step, nullptr));
    if (step.op == StepOp::kShutdown) return pod.world->Barrier();  // see PodModel::Shutdown
  }
}

}  // namespace loom::parallel
