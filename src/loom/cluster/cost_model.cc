#include "loom/cluster/cost_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>

#include "loom/base/clock.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/matmul.h"
#include "loom/model/transformer.h"
#include "loom/model/weight_copy.h"

namespace loom::cluster {

namespace {

double Transfer(const LinkFacts& link, double bytes) {
  return link.latency_s + (link.bytes_per_s > 0 ? bytes / link.bytes_per_s : 0.0);
}

int64_t TensorBytes(const model::ModelFile& file, const char* name) {
  auto it = file.tensors.find(name);
  return it == file.tensors.end() ? 0 : it->second.size_bytes;
}

// Weight bytes a rank reads per decode step: everything it holds (its slice of the output head
// included), except the embedding table, of which a token reads one row; a tied head reads its
// vocabulary slice of the table.  Of a mixture of experts' stacked expert tensors a token reads
// `active` experts' share (k, or under expert parallelism the busiest rank's expected count:
// every layer's all-reduce waits for it).
double DecodeReadBytes(const model::ModelFile& file, const parallel::RankPlan& r,
                       double active = -1) {
  const model::HParams& hp = file.hparams;
  double bytes = static_cast<double>(r.weight_bytes);
  const double embd = static_cast<double>(TensorBytes(file, "token_embd.weight"));
  if (r.shard.embed || (r.shard.head && hp.tied_embeddings)) bytes -= embd;
  if (r.shard.head && hp.tied_embeddings) {
    bytes += embd * static_cast<double>(r.shard.vocab_count) / static_cast<double>(hp.vocab_size);
  }
  if (hp.is_moe()) {
    // Router, attention and shared experts are read whole; of the experts, `active` of n.
    if (active < 0) active = static_cast<double>(hp.n_experts_used);
    const int64_t held = r.shard.n_experts < 0 ? hp.n_experts : r.shard.n_experts;
    // Row parts: each rank holds and reads 1/parts of every expert it computes.
    const double n = static_cast<double>(hp.n_experts) *
                     static_cast<double>(std::max<int64_t>(1, r.shard.expert_parts));
    for (const auto& [name, t] : file.tensors) {
      if (name.find("_exps.") == std::string::npos) continue;
      const int64_t layer = parallel::TensorLayer(name);
      if (layer < r.shard.layer_begin || layer >= r.shard.layer_end) continue;
      const double size = static_cast<double>(t.size_bytes + 2 * t.scales_bytes);
      bytes += size * (active - static_cast<double>(held)) / n;
    }
  }
  return std::max(0.0, bytes);
}

// Values per byte of the weights, for the FLOPs of prompt chunks.  Dense models: from the
// hyperparameters (the Llama layout); mixtures of experts: from the tensors themselves.
double ElemsPerByte(const model::ModelFile& file) {
  const model::HParams& hp = file.hparams;
  if (!hp.is_moe()) {
    return static_cast<double>(hp.n_layers * (2 * hp.dim * hp.dim + 3 * hp.dim * hp.ffn_dim) +
                               2 * hp.vocab_size * hp.dim) /
           std::max<double>(1.0, static_cast<double>(file.total_tensor_bytes()));
  }
  double elems = 0;
  for (const auto& [name, t] : file.tensors) elems += static_cast<double>(t.elements());
  return elems / std::max<double>(1.0, static_cast<double>(file.total_tensor_bytes()));
}

// A barrier for the calibration's copies, met where a tensor-parallel rank all-reduces: spinning
// (with yields), as the pod's transports wait, since a blocked thread wakes up late here.
class SpinBarrier {
 public:
  explicit SpinBarrier(int parties) : parties_(parties) {}

  void ArriveAndWait() {
    const int64_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (int i = 0; generation_.load(std::memory_order_acquire) == generation; ++i) {
      if (i > 1024) std::this_thread::yield();
    }
  }

  // One copy's view: its "all-reduce" is the barrier (the values are left as they are).
  class Member : public model::Collective {
   public:
    explicit Member(SpinBarrier* barrier) : barrier_(barrier) {}
    Status AllReduceSum(float*, int64_t) override {
      barrier_->ArriveAndWait();
      return OkStatus();
    }

   private:
    SpinBarrier* barrier_;
  };

 private:
  const int parties_;
  std::atomic<int> arrived_{0};
  std::atomic<int64_t> generation_{0};
};

// `tp` is the group size: tensor-parallel ranks, or for a mixture of experts expert-parallel ones
// (TP of its experts is not built).
Prediction PredictSplit(const model::ModelFile& file, const CostInputs& in, int tp, int pp,
                        bool whole_experts) {
  const model::HParams& hp = file.hparams;
  Prediction p;
  (hp.is_moe() ? p.ep : p.tp) = tp;
  p.pp = pp;
  parallel::PlanRequest req;
  req.tp = p.tp;
  req.ep = p.ep;
  req.ep_whole_experts = whole_experts;
  req.pp = pp;
  req.context = in.context;
  if (static_cast<int>(in.rank_memory.size()) >= tp * pp) {
    req.rank_memory.assign(in.rank_memory.begin(), in.rank_memory.begin() + tp * pp);
    for (int s = 0; s < pp && pp > 1; ++s) {
      const auto first = req.rank_memory.begin() + s * tp;
      req.stage_weights.push_back(static_cast<double>(*std::min_element(first, first + tp)));
    }
  } else if (in.rank.memory_bytes > 0) {
    req.rank_memory = {in.rank.memory_bytes};
  }
  auto plan = parallel::MakePlan(file, req);
  if (!plan.ok()) {
    p.why_not = plan.status().message();
    return p;
  }
  p.plan = std::move(*plan);
  p.feasible = true;

  const double alone = in.rank.decode_bytes_per_s;
  const double shared =
      in.rank.decode_bytes_per_s_shared > 0 ? in.rank.decode_bytes_per_s_shared : alone;
  const double hidden = static_cast<double>(hp.dim) * 4;
  const double elems_per_byte = ElemsPerByte(file);
  const int64_t chunk = std::min(in.chunk, in.prompt_tokens);
  const int64_t chunks = (in.prompt_tokens + chunk - 1) / chunk;

  double decode_compute = 0, decode_link = 0, prompt_first = 0, prompt_slowest = 0;
  for (int s = 0; s < pp; ++s) {
    const int64_t layers =
        p.plan.rank(s * tp).shard.layer_end - p.plan.rank(s * tp).shard.layer_begin;
    double read = 0, elems = 0;
    std::vector<int64_t> groups;  // experts per rank of the stage
    for (int t = 0; t < tp; ++t) groups.push_back(p.plan.rank(s * tp + t).shard.n_experts);
    const model::ShardSpec& first = p.plan.rank(s * tp).shard;
    // Row parts (the default): every rank computes its rows of all k experts, evenly; whole
    // experts: the busiest rank's share of the k.
    const bool parted = first.expert_parts > 1;
    const double k = static_cast<double>(hp.n_experts_used);
    const double active = !p.plan.ep ? -1.0 : parted ? k : ExpectedBusiestExperts(groups, hp.n_experts_used);
    for (int t = 0; t < tp; ++t) {
      const parallel::RankPlan& r = p.plan.rank(s * tp + t);
      read = std::max(read, DecodeReadBytes(file, r, active));
      // Prompts: a chunk's tokens spread over the experts, each rank computes its share.
      elems = std::max(elems, DecodeReadBytes(file, r, parted ? k : k / tp) * elems_per_byte);
    }
    // Row parts gather each layer's expert activations (k rows of expert_ffn_dim a token).
    int64_t moe_layers = 0;
    for (int64_t l = first.layer_begin; l < first.layer_end; ++l) moe_layers += hp.is_moe_layer(l);
    const double gathered = parted ? k * static_cast<double>(hp.expert_ffn_dim) * 4 : 0.0;
    decode_compute += read / (tp > 1 ? shared : alone);
    // One-shot all-reduce: each rank sends its vector to the tp - 1 others.
    const double tp_link = tp > 1 ? 2.0 * static_cast<double>(layers) *
                                        Transfer(in.link, static_cast<double>(tp - 1) * hidden)
                                  : 0.0;
    const double gather_link =
        parted ? static_cast<double>(moe_layers) *
                     Transfer(in.link, static_cast<double>(tp - 1) * gathered)
               : 0.0;
    decode_link += tp_link + gather_link + (s == 0 && tp > 1 ? Transfer(in.link, 256) : 0.0);
    // Prompt: one chunk through this stage.
    const double c = static_cast<double>(chunk);
    const double stage = 2.0 * c * elems / in.rank.prompt_flops +
                         (tp > 1 ? 2.0 * static_cast<double>(layers) *
                                       Transfer(in.link, static_cast<double>(tp - 1) * c * hidden)
                                 : 0.0) +
                         (parted ? static_cast<double>(moe_layers) *
                                       Transfer(in.link, static_cast<double>(tp - 1) * c * gathered)
                                 : 0.0) +
                         (s + 1 < pp ? Transfer(in.link, c * hidden) : 0.0);
    prompt_first += stage;
    prompt_slowest = std::max(prompt_slowest, stage);
  }
  const double logits_back = pp > 1 ? Transfer(in.link, static_cast<double>(hp.vocab_size) * 4) : 0;
  // The head's vocabulary slices gathered on the last stage's first rank.
  const double gather =
      tp > 1 ? Transfer(in.link, static_cast<double>(hp.vocab_size) * 4 / tp) : 0.0;
  decode_link += (pp - 1) * Transfer(in.link, hidden + 256) + logits_back + gather;
  p.decode_compute_s = decode_compute;
  p.decode_link_s = decode_link;
  p.decode_tokens_per_s = 1.0 / (decode_compute + decode_link);
  const double prompt_s =
      prompt_first + static_cast<double>(chunks - 1) * prompt_slowest + logits_back;
  p.prompt_tokens_per_s = static_cast<double>(in.prompt_tokens) / prompt_s;
  return p;
}

// Expert parallelism as `--ep` runs it: every rank holds rows of every expert (even work, one more
// all-reduce a layer).  PredictSplit also prices whole experts per rank
// (PlanRequest::ep_whole_experts), which the runtime does not run, so plans are not picked by it.
Prediction Predict(const model::ModelFile& file, const CostInputs& in, int tp, int pp) {
  return PredictSplit(file, in, tp, pp, /*whole_experts=*/false);
}

}  // namespace

std::vector<Prediction> PredictAll(const model::ModelFile& file, const CostInputs& in) {
  std::vector<Prediction> out;
  for (int tp = 1; tp <= in.ranks; ++tp) {
    for (int pp = 1; tp * pp <= in.ranks; ++pp) out.push_back(Predict(file, in, tp, pp));
  }
  return out;
}

// E[max] = sum over m >= 0 of P(max > m), with
// P(max <= m) = [x^k] prod_r sum_{c <= m} C(group[r], c) x^c / C(n, k).
double ExpectedBusiestExperts(const std::vector<int64_t>& group, int64_t k) {
  if (group.size() <= 1) return static_cast<double>(k);
  auto choose = [](int64_t a, int64_t b) {
    if (b < 0 || b > a) return 0.0;
    double c = 1.0;  // exact in double well past any model's C(n, k)
    for (int64_t i = 1; i <= b; ++i) c = c * static_cast<double>(a - b + i) / static_cast<double>(i);
    return c;
  };
  int64_t n = 0;
  for (int64_t g : group) n += g;
  const double all = choose(n, k);
  double expected = 0;
  for (int64_t m = 0; m < k; ++m) {
    std::vector<double> ways(static_cast<size_t>(k + 1), 0.0);  // [j]: ways to pick j so far
    ways[0] = 1.0;
    for (int64_t g : group) {
      std::vector<double> next(ways.size(), 0.0);
      for (int64_t j = 0; j <= k; ++j) {
        if (ways[static_cast<size_t>(j)] == 0) continue;
        for (int64_t c = 0; c <= std::min(m, g) && j + c <= k; ++c) {
          next[static_cast<size_t>(j + c)] += ways[static_cast<size_t>(j)] * choose(g, c);
        }
      }
      ways.swap(next);
    }
    expected += 1.0 - ways[static_cast<size_t>(k)] / all;
  }
  return expected;
}

std::string SplitName(int tp, int ep, int pp) {
  return (ep > 1 ? "ep" + std::to_string(ep) : "tp" + std::to_string(tp)) + " pp" +
         std::to_string(pp);
}

std::string Prediction::Name() const { return SplitName(tp, ep, pp); }

const Prediction* PickBest(const std::vector<Prediction>& predictions) {
  const Prediction* best = nullptr;
  for (const Prediction& p : predictions) {
    if (!p.feasible) continue;
    if (best == nullptr || p.decode_tokens_per_s > best->decode_tokens_per_s * 1.0001 ||
        (p.decode_tokens_per_s > best->decode_tokens_per_s * 0.9999 &&
         p.ranks() < best->ranks())) {
      best = &p;
    }
  }
  return best;
}

StatusOr<RankFacts> Calibrate(const model::ModelFile& file, int ranks_on_host) {
  // Each copy (rank) decodes its own layers, as the ranks of a pod read different weights: copies
  // reading the same pages would share the cache and measure more than memory delivers.  Layers per
  // copy: up to a volume well past the caches, and no more than an equal share of the model.
  const model::HParams& hp = file.hparams;
  const int copies_max = std::max(1, ranks_on_host);
  // The weight bytes a decode step reads in layer l: every matrix of the layer, and of a mixture
  // of experts' stacked expert tensors the k of n experts a token runs.
  auto layer_bytes = [&](int64_t l) {
    double bytes = 0;
    const std::string prefix = "blk." + std::to_string(l) + ".";
    for (const auto& [name, t] : file.tensors) {
      if (name.rfind(prefix, 0) != 0 || t.shape.size() < 2) continue;
      double size = static_cast<double>(t.size_bytes + 2 * t.scales_bytes);
      if (name.find("_exps.") != std::string::npos && hp.n_experts > 0) {
        size *= static_cast<double>(hp.n_experts_used) / static_cast<double>(hp.n_experts);
      }
      bytes += size;
    }
    return static_cast<int64_t>(bytes);
  };
  const int64_t share = std::max<int64_t>(1, hp.n_layers / copies_max);
  int64_t layers = 0, volume = 0;  // per copy (the layers of a model are alike)
  while (layers < share && volume < (int64_t{256} << 20)) volume += layer_bytes(layers++);
  if (volume == 0) return NotFoundError(file.path, ": no layer matrices to calibrate with");
  // Copy c decodes layers [c * layers, (c + 1) * layers), wrapping round a model with too few.
  std::vector<model::TransformerWeights> weights;
  for (int c = 0; c < copies_max; ++c) {
    model::ShardSpec shard;
    shard.layer_begin = c * layers + layers <= hp.n_layers ? c * layers : 0;
    shard.layer_end = shard.layer_begin + layers;
    shard.head = false;
    LOOM_ASSIGN_OR_RETURN(model::TransformerWeights w, model::BindWeights(file, shard));
    // Placed as `loom run` places them by default (engine::WeightPlacement::kAuto).
    if (model::CopyFitsInMemory(w, copies_max))
      LOOM_RETURN_IF_ERROR(model::CopyMatricesToMemory(&w));
    weights.push_back(std::move(w));
  }

  // Decode as it runs: those layers of the real forward pass (attention, norms and all), one token
  // per step, one thread per copy.  Copies running together meet at a barrier wherever a
  // tensor-parallel rank all-reduces (twice per layer), so each step waits for the slowest copy as
  // a TP step waits for its slowest rank; the link's own cost is added by the model.
  std::vector<std::unique_ptr<model::Transformer>> transformers;
  std::vector<std::unique_ptr<base::ThreadPool>> pools;
  for (int c = 0; c < copies_max; ++c) {
    pools.push_back(std::make_unique<base::ThreadPool>(1));
    model::TransformerOptions options;
    options.context = 64;
    options.max_batch = 1;
    LOOM_ASSIGN_OR_RETURN(auto t, model::Transformer::Create(weights[static_cast<size_t>(c)],
                                                             options, *pools.back()));
    transformers.push_back(std::move(t));
  }
  // Returns the weight bytes per second of one copy; `steps` = 0: as many steps as fit in 0.15 s
  // (one copy alone only).
  auto decode_rate = [&](int copies, int64_t steps) -> StatusOr<double> {
    SpinBarrier barrier(copies);
    std::vector<double> seconds(static_cast<size_t>(copies));
    std::vector<int64_t> done(static_cast<size_t>(copies));
    std::vector<Status> errors(static_cast<size_t>(copies));
    std::vector<std::thread> threads;
    for (int c = 0; c < copies; ++c) {
      threads.emplace_back([&, c] {
        const size_t ci = static_cast<size_t>(c);
        model::Transformer& t = *transformers[ci];
        SpinBarrier::Member member(&barrier);
        t.set_collective(copies > 1 ? &member : nullptr);
        const int32_t token = 1, slot = 0;
        auto step = [&](int32_t pos) {
          const model::Batch batch{{&token, 1}, {&pos, 1}, {&slot, 1}, {}};
          Status st = t.Embed(batch.tokens);
          return st.ok() ? t.Layers(batch) : st;
        };
        // One untimed step maps the file's pages (page faults are load time, not decode time).
        errors[ci] = step(0);
        int64_t n = 0;
        base::Stopwatch watch;
        while (errors[ci].ok() && (steps > 0 ? n < steps : watch.Seconds() < 0.15 || n < 2)) {
          errors[ci] = step(static_cast<int32_t>(1 + n % 62));
          ++n;
        }
        seconds[ci] = watch.Seconds();
        done[ci] = n;
        t.set_collective(nullptr);
      });
    }
    for (auto& t : threads) t.join();
    for (const Status& e : errors) LOOM_RETURN_IF_ERROR(e);
    double slowest = 0;
    for (size_t c = 0; c < seconds.size(); ++c) {
      slowest = std::max(slowest, seconds[c] / static_cast<double>(done[c]));
    }
    return static_cast<double>(volume) / slowest;
  };
  // Memory bandwidth drifts over seconds on shared machines: alternate the two measurements and
  // take the medians.
  constexpr int kRounds = 5;
  std::vector<double> alone, shared;
  for (int round = 0; round < kRounds; ++round) {
    LOOM_ASSIGN_OR_RETURN(const double a, decode_rate(1, 0));
    alone.push_back(a);
    if (ranks_on_host > 1) {
      // As many steps as one copy alone ran in 0.15 s: every copy must take the same number.
      const int64_t steps = std::max<int64_t>(2, static_cast<int64_t>(0.15 * a / volume));
      LOOM_ASSIGN_OR_RETURN(const double b, decode_rate(ranks_on_host, steps));
      shared.push_back(b);
    }
  }
  auto median = [](std::vector<double>& v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  RankFacts facts;
  facts.decode_bytes_per_s = median(alone);
  facts.decode_bytes_per_s_shared = median(shared);
  {
    // Prompts: a batched product with one of the layer matrices.
    constexpr int64_t kBatch = 64;
    base::ThreadPool pool(1);
    kernels::Workspace ws;
    // A feed-forward matrix: the dense block's down projection, or a mixture's first expert's.
    const model::LayerWeights& L = weights.front().layers.front();
    const kernels::MatrixView& m =
        L.w_down.data != nullptr ? L.w_down
        : !L.experts.empty() && L.experts.front().down.data != nullptr ? L.experts.front().down
                                                                        : L.wo;
    std::vector<float> x(static_cast<size_t>(kBatch * m.cols), 0.5f),
        y(static_cast<size_t>(kBatch * m.rows));
    int64_t flops = 0;
    base::Stopwatch watch;
    while (watch.Seconds() < 0.3) {
      kernels::MatMul(m, x.data(), kBatch, y.data(), ws, pool);
      flops += 2 * kBatch * m.rows * m.cols;
    }
    facts.prompt_flops = static_cast<double>(flops) / watch.Seconds();
  }
  return facts;
}

}  // namespace loom::cluster
