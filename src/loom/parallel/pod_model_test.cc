// A pod's logits equal one process's, for every plan shape, on a synthetic model with uneven
// shapes (7 layers, 8 query heads over 2 KV heads, 160 feed-forward columns = 5 blocks of 32).  The ranks are threads
// of this process joined by real shared-memory groups, so the full PodModel/RunFollower protocol
// runs; process-level pods are tested in tests/parallel.
#include "loom/parallel/pod_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <thread>

#include "loom/comm/config.h"
#include "loom/model/synth.h"

namespace loom::parallel {
namespace {

double RelDiff(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

struct Model {
  std::vector<std::byte> bytes;
  std::unique_ptr<model::ModelFile> file;
};

Model Uneven(kernels::DType type) {
  Model m;
  model::SynthOptions o;
  o.shape = {"uneven", 128, 160, 7, 8, 2, 300, 64, 1e-5f, 10000.0f};
  o.type = type;
  o.threads = 1;
  EXPECT_TRUE(model::WriteSynthModelToMemory(o, &m.bytes).ok());
  auto file = model::OpenModelFromBytes(m.bytes, "uneven.gguf");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (file.ok()) m.file = std::move(*file);
  return m;
}

const std::vector<int32_t> kPrompt = {1, 17, 230, 5, 99, 142, 7, 61, 250};
constexpr int64_t kDecodeSteps = 4;

// Runs the prompt in chunks of 4 (rows of every position wanted), then kDecodeSteps greedy steps,
// returning every logits row produced, in order.
StatusOr<std::vector<float>> Drive(model::ForwardPass& fwd) {
  const int64_t vocab = fwd.hparams().vocab_size;
  std::vector<float> all;
  std::vector<float> logits(static_cast<size_t>(4 * vocab));
  std::vector<int32_t> tokens = kPrompt;
  int64_t done = 0;
  auto run = [&](int64_t begin, int64_t count) -> Status {
    std::vector<int32_t> pos, slots(static_cast<size_t>(count), 0), rows;
    for (int64_t i = 0; i < count; ++i) {
      pos.push_back(static_cast<int32_t>(begin + i));
      rows.push_back(static_cast<int32_t>(i));
    }
    LOOM_RETURN_IF_ERROR(fwd.Forward(
        {std::span(tokens).subspan(static_cast<size_t>(begin), static_cast<size_t>(count)), pos,
         slots, rows},
        logits.data()));
    all.insert(all.end(), logits.begin(), logits.begin() + count * vocab);
    return OkStatus();
  };
  for (; done < static_cast<int64_t>(kPrompt.size()); done += 4) {
    LOOM_RETURN_IF_ERROR(run(done, std::min<int64_t>(4, kPrompt.size() - done)));
  }
  for (int64_t s = 0; s < kDecodeSteps; ++s) {
    const float* last = all.data() + all.size() - vocab;
    tokens.push_back(static_cast<int32_t>(std::max_element(last, last + vocab) - last));
    LOOM_RETURN_IF_ERROR(run(static_cast<int64_t>(tokens.size()) - 1, 1));
  }
  return all;
}

std::vector<float> RunPod(const model::ModelFile& file, int tp, int pp, const std::string& id) {
  PlanRequest request;
  request.tp = tp;
  request.pp = pp;
  auto plan = MakePlan(file, request);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  std::vector<float> result;
  std::vector<Status> status(static_cast<size_t>(tp * pp));
  std::vector<std::thread> threads;
  for (int r = 0; r < tp * pp; ++r) {
    threads.emplace_back([&, r]() {
      status[r] = [&]() -> Status {
        comm::GroupConfig config;
        config.backend = "shm";
        config.rank = r;
        config.size = tp * pp;
        config.group_id = id;
        config.options.timeout_seconds = 30;
        LOOM_ASSIGN_OR_RETURN(auto world, comm::CreateGroup(config));
        LOOM_ASSIGN_OR_RETURN(auto weights, model::BindWeights(file, plan->rank(r).shard));
        base::ThreadPool pool(1);
        model::TransformerOptions options;
        options.max_batch = 4;
        LOOM_ASSIGN_OR_RETURN(auto local, model::Transformer::Create(weights, options, pool));
        LOOM_ASSIGN_OR_RETURN(auto tp_group, MakeTensorParallelGroup(*world, *plan));
        PodRank rank{world.get(), tp_group.get(), &*plan, local.get()};
        if (r != 0) return RunFollower(rank);
        PodModel pod(rank);
        LOOM_ASSIGN_OR_RETURN(result, Drive(pod));
        return pod.Shutdown();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < tp * pp; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  return result;
}

class PodModelTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(PodModelTest, LogitsMatchOneProcess) {
  const auto [tp, pp] = GetParam();
  for (kernels::DType type : {kernels::DType::kF32, kernels::DType::kQ8_0, kernels::DType::kQ4_0}) {
    if (type != kernels::DType::kF32 && tp > 5) continue;  // 5 blocks of columns to share
    Model m = Uneven(type);
    ASSERT_NE(m.file, nullptr);
    auto weights = model::BindWeights(*m.file);
    ASSERT_TRUE(weights.ok());
    base::ThreadPool pool(1);
    model::TransformerOptions options;
    options.max_batch = 4;
    auto local = model::Transformer::Create(*weights, options, pool);
    ASSERT_TRUE(local.ok());
    auto want = Drive(**local);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    const std::string id = "podtest-" + std::to_string(::getpid()) + "-" + std::to_string(tp) +
                           "x" + std::to_string(pp) + "-" + std::string(kernels::Traits(type).name);
    const std::vector<float> got = RunPod(*m.file, tp, pp, id);
    ASSERT_EQ(got.size(), want->size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, RelDiff(got[i], (*want)[i]));
    // The uneven split's sums differ from one process's in the last bits (f32 worst ~2e-7); with
    // Q4_0 weights an activation's 8-bit rounding can flip on such a difference and move a logit
    // by ~0.5% (tp 2, since the one-pass attention kernel): bounded, not exact, for that type.
    const double limit = type == kernels::DType::kQ4_0 ? 1e-2 : 1e-4;
    EXPECT_LT(worst, limit) << kernels::Traits(type).name;
    std::printf("tp %d pp %d %s: worst relative difference %.3g\n", tp, pp,
                std::string(kernels::Traits(type).name).c_str(), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, PodModelTest,
                         ::testing::Values(std::pair{2, 1}, std::pair{4, 1}, std::pair{8, 1},
                                           std::pair{1, 2}, std::pair{1, 3}, std::pair{1, 7},
                                           std::pair{2, 2}, std::pair{4, 2}));

}  // namespace
}  // namespace loom::parallel
