#include "loom/parallel/plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <tuple>

namespace loom::parallel {

namespace {

// Largest quantization block among the tensors whose columns a tensor-parallel split cuts.
int64_t ColumnBlock(const model::ModelFile& file, const std::string& suffix) {
  int64_t block = 1;
  for (const auto& [name, t] : file.tensors) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      block = std::max(block, kernels::Traits(t.type).block_elems);
    }
  }
  return block;
}

std::string GiB(int64_t bytes) {
  std::ostringstream s;
  s.precision(2);
  s << std::fixed << static_cast<double>(bytes) / (1 << 30) << " GiB";
  return s.str();
}

}  // namespace

int64_t TensorLayer(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t l = 0;
  size_t i = 4;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') l = l * 10 + (name[i++] - '0');
  return l;
}

int64_t ShardWeightBytes(const model::ModelFile& file, const model::ShardSpec& s) {
  const model::HParams& hp = file.hparams;
  const int64_t layer_end = s.layer_end < 0 ? hp.n_layers : s.layer_end;
  const int64_t heads = s.n_heads < 0 ? hp.n_heads - s.head_begin : s.n_heads;
  const int64_t ffn = s.ffn_dim < 0 ? hp.ffn_dim - s.ffn_begin : s.ffn_dim;
  const int64_t group = hp.n_heads / hp.n_kv_heads;
  const int64_t kv_heads = (s.head_begin + heads - 1) / group + 1 - s.head_begin / group;
  const double q_frac = static_cast<double>(heads) / static_cast<double>(hp.n_heads);
  const double kv_frac = static_cast<double>(kv_heads) / static_cast<double>(hp.n_kv_heads);
  const double ffn_frac = static_cast<double>(ffn) / static_cast<double>(hp.ffn_dim);
  const int64_t experts = s.n_experts < 0 ? hp.n_experts - s.expert_begin : s.n_experts;
  const double expert_frac =
      hp.n_experts > 0 ? static_cast<double>(experts) / static_cast<double>(hp.n_experts) /
                             static_cast<double>(std::max<int64_t>(1, s.expert_parts))
                       : 1.0;
  const int64_t shared_all = hp.shared_ffn();
  const int64_t shared = s.shared_dim < 0 ? shared_all - s.shared_begin : s.shared_dim;
  const double shared_frac =
      shared_all > 0 ? static_cast<double>(shared) / static_cast<double>(shared_all) : 1.0;
  double bytes = 0;
  for (const auto& [name, t] : file.tensors) {
    // MLX types keep a scale and a bias per group beside the packed values.
    const double size = static_cast<double>(t.size_bytes + 2 * t.scales_bytes);
    const int64_t layer = TensorLayer(name);
    if (layer < 0) {
      const bool embed = name == "token_embd.weight";
      const double vocab_frac =
          s.vocab_count < 0 ? 1.0
                            : static_cast<double>(s.vocab_count) / static_cast<double>(hp.vocab_size);
      if (embed && (s.embed || (s.head && hp.tied_embeddings))) {
        bytes += size;  // the embedding table is read a row per token, but held whole
      } else if (!embed && s.head) {
        bytes += name == "output.weight" ? size * vocab_frac : size;
      }
      continue;
    }
    if (layer < s.layer_begin || layer >= layer_end) continue;
    auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
    if (has("_exps.")) {
      bytes += size * expert_frac;
    } else if (has("_shexp.")) {
      bytes += size * shared_frac;
    } else if (has(".attn_q.") || has(".attn_output.") || has(".attn_q_b.") ||
               has(".attn_kv_b.") || has(".attn_k_b.") || has(".attn_v_b.")) {
      bytes += size * q_frac;
    } else if (name.find(".attn_k.") != std::string::npos ||
               name.find(".attn_v.") != std::string::npos) {
      bytes += size * kv_frac;
    } else if (name.find(".ffn_gate.") != std::string::npos ||
               name.find(".ffn_up.") != std::string::npos ||
               name.find(".ffn_down.") != std::string::npos) {
      bytes += size * ffn_frac;
    } else {
      bytes += size;  // norms and anything replicated
    }
  }
  return static_cast<int64_t>(std::ceil(bytes));
}

std::string ParallelPlan::Describe() const {
  std::ostringstream s;
  s << "pp=" << pp << (ep ? " ep=" : " tp=") << tp;
  if (ep) s << (ranks.empty() || ranks[0].shard.expert_parts > 1 ? " (expert rows)" : " (whole experts)");
  for (int stage = 0; stage < pp; ++stage) {
    const RankPlan& r = ranks[static_cast<size_t>(stage * tp)];
    s << (stage ? "; " : ": ") << "stage " << stage << " layers [" << r.shard.layer_begin << ", "
      << r.shard.layer_end << ") ranks " << stage * tp;
    if (tp > 1) s << "-" << stage * tp + tp - 1;
  }
  return s.str();
}

StatusOr<ParallelPlan> MakePlan(const model::ModelFile& file, const PlanRequest& req) {
  const model::HParams& hp = file.hparams;
  if (req.tp < 1 || req.pp < 1 || req.tp > 4096 || req.pp > 4096) {
    return InvalidArgumentError("plan: tp and pp must be between 1 and 4096 (got tp=", req.tp,
                                ", pp=", req.pp, ")");
  }
  if (req.pp > hp.n_layers) {
    return InvalidArgumentError("plan: pp=", req.pp, " stages but the model has only ",
                                hp.n_layers, " layers");
  }
  if (req.ep < 1 || req.ep > 4096 || (req.ep > 1 && req.tp > 1)) {
    return InvalidArgumentError("plan: ep must be between 1 and 4096, and tp 1 when ep > 1 (got ",
                                "tp=", req.tp, ", ep=", req.ep, ")");
  }
  if (req.ep > 1 && !hp.is_moe()) {
    return InvalidArgumentError("plan: ep=", req.ep,
                                " needs a mixture-of-experts model; this one is dense (use --tp)");
  }
  if (hp.is_moe() && req.tp > 1) {
    return UnimplementedError(
        "plan: tensor parallelism of mixture-of-experts layers is not supported yet; use --pp, "
        "or --ep to split the experts across the ranks");
  }
  const bool ep = req.ep > 1;
  const int group_size = ep ? req.ep : req.tp;  // ranks per stage
  if (hp.n_heads % group_size != 0) {
    return InvalidArgumentError("plan: ", ep ? "ep=" : "tp=", group_size, " does not divide the ",
                                hp.n_heads, " attention heads");
  }
  if (ep && req.ep_whole_experts && hp.n_experts < group_size) {
    return InvalidArgumentError("plan: ep=", group_size, " ranks but only ", hp.n_experts,
                                " experts per layer");
  }
  // Row parts split on 4-row tiles (model::ExpertRowsOf): each rank needs at least one tile.
  if (ep && !req.ep_whole_experts && std::min(hp.expert_ffn_dim, hp.dim) < 4 * group_size) {
    return InvalidArgumentError("plan: ep=", group_size, " ranks but experts of only ",
                                std::min(hp.expert_ffn_dim, hp.dim), " rows to split");
  }
  const int64_t heads = hp.n_heads / group_size;
  const int64_t out_head = hp.is_mla() ? hp.v_head_dim : hp.head_dim;  // attn_output columns
  const int64_t out_block = ColumnBlock(file, ".attn_output.weight");
  if ((heads * out_head) % out_block != 0) {
    return InvalidArgumentError("plan: ", group_size, " ranks give each ", heads * out_head,
                                " attention-output columns, which cuts its blocks of ", out_block);
  }
  // Column splits in whole blocks, spread as evenly as possible (the first ranks take one more):
  // (begin, count) of rank t.  Dense feed-forward layers (and DeepSeek's leading dense layers
  // under ep) and shared experts.
  auto column_split = [&](int64_t cols, int64_t block, const char* what,
                          std::vector<std::pair<int64_t, int64_t>>* out) -> Status {
    if (cols % block != 0 || cols / block < group_size) {
      return InvalidArgumentError("plan: the ", cols, " ", what, " columns (blocks of ", block,
                                  ") cannot be split over ", group_size, " ranks");
    }
    const int64_t blocks = cols / block, per = blocks / group_size, extra = blocks % group_size;
    for (int64_t t = 0; t < group_size; ++t) {
      out->push_back({(t * per + std::min(t, extra)) * block, (per + (t < extra ? 1 : 0)) * block});
    }
    return OkStatus();
  };
  std::vector<std::pair<int64_t, int64_t>> ffn_cols, shared_cols;
  const bool dense_ffn = !hp.is_moe() || hp.n_dense_layers > 0;
  if (dense_ffn) {
    LOOM_RETURN_IF_ERROR(
        column_split(hp.ffn_dim, ColumnBlock(file, ".ffn_down.weight"), "feed-forward", &ffn_cols));
  }
  if (hp.n_shared_experts > 0) {
    LOOM_RETURN_IF_ERROR(column_split(hp.shared_ffn(), ColumnBlock(file, ".ffn_down_shexp.weight"),
                                      "shared-expert", &shared_cols));
  }

  // Layers per stage.
  std::vector<int64_t> layers = req.stage_layers;
  if (!layers.empty()) {
    if (static_cast<int>(layers.size()) != req.pp) {
      return InvalidArgumentError("plan: ", layers.size(), " stage layer counts for pp=", req.pp);
    }
    int64_t total = 0;
    for (int64_t n : layers) {
      if (n < 1) return InvalidArgumentError("plan: every stage needs at least one layer");
      total += n;
    }
    if (total != hp.n_layers) {
      return InvalidArgumentError("plan: stage layer counts sum to ", total, ", not the model's ",
                                  hp.n_layers, " layers");
    }
  } else {
    std::vector<double> weight = req.stage_weights;
    if (weight.empty()) weight.assign(static_cast<size_t>(req.pp), 1.0);
    if (static_cast<int>(weight.size()) != req.pp) {
      return InvalidArgumentError("plan: ", weight.size(), " stage weights for pp=", req.pp);
    }
    for (double w : weight) {
      if (!(w > 0)) return InvalidArgumentError("plan: stage weights must be positive");
    }
    // Largest-remainder apportionment with at least one layer per stage.
    const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
    const int64_t spare = hp.n_layers - req.pp;
    layers.assign(static_cast<size_t>(req.pp), 1);
    std::vector<std::pair<double, int>> remainders;
    int64_t given = 0;
    for (int s = 0; s < req.pp; ++s) {
      const double exact = static_cast<double>(spare) * weight[static_cast<size_t>(s)] / sum;
      const int64_t whole = static_cast<int64_t>(std::floor(exact));
      layers[static_cast<size_t>(s)] += whole;
      given += whole;
      remainders.push_back({exact - static_cast<double>(whole), s});
    }
    std::stable_sort(remainders.begin(), remainders.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int64_t i = 0; i < spare - given; ++i) {
      layers[static_cast<size_t>(remainders[static_cast<size_t>(i)].second)] += 1;
    }
  }

  ParallelPlan plan;
  plan.tp = group_size;
  plan.pp = req.pp;
  plan.ep = ep;
  const int64_t ctx = req.context > 0 ? req.context : hp.context_length;
  int64_t layer = 0;
  for (int stage = 0; stage < req.pp; ++stage) {
    const int64_t begin = layer;
    layer += layers[static_cast<size_t>(stage)];
    for (int t = 0; t < group_size; ++t) {
      const size_t ti = static_cast<size_t>(t);
      RankPlan r;
      r.rank = stage * group_size + t;
      r.stage = stage;
      r.tp_rank = t;
      r.shard.layer_begin = begin;
      r.shard.layer_end = layer;
      r.shard.head_begin = t * heads;
      r.shard.n_heads = heads;
      if (!ffn_cols.empty()) std::tie(r.shard.ffn_begin, r.shard.ffn_dim) = ffn_cols[ti];
      if (!shared_cols.empty()) std::tie(r.shard.shared_begin, r.shard.shared_dim) = shared_cols[ti];
      if (ep && req.ep_whole_experts) {
        const int64_t per = hp.n_experts / group_size, extra = hp.n_experts % group_size;
        r.shard.expert_begin = t * per + std::min<int64_t>(t, extra);
        r.shard.n_experts = per + (t < extra ? 1 : 0);
      } else if (ep) {
        r.shard.expert_part = t;
        r.shard.expert_parts = group_size;
      }
      r.shard.embed = stage == 0;
      r.shard.head = stage == req.pp - 1;
      // The output head by vocabulary rows, as evenly as possible (the first ranks take one more).
      const int64_t vocab_per = hp.vocab_size / group_size;
      const int64_t vocab_extra = hp.vocab_size % group_size;
      r.shard.vocab_begin = t * vocab_per + std::min<int64_t>(t, vocab_extra);
      r.shard.vocab_count = vocab_per + (t < vocab_extra ? 1 : 0);
      r.weight_bytes = ShardWeightBytes(file, r.shard);
      const int64_t group = hp.n_heads / hp.n_kv_heads;
      const int64_t kv_heads = (r.shard.head_begin + heads - 1) / group + 1 - r.shard.head_begin / group;
      // Latent attention keeps one latent and rope key per position and layer (no TP there).
      const int64_t kv_values =
          hp.is_mla() ? hp.kv_values_per_token_layer() : 2 * kv_heads * hp.head_dim;
      r.kv_bytes = layers[static_cast<size_t>(stage)] * req.n_slots * ctx * kv_values *
                   static_cast<int64_t>(sizeof(float));
      plan.ranks.push_back(r);
    }
  }

  if (!req.rank_memory.empty()) {
    if (req.rank_memory.size() != 1 && static_cast<int>(req.rank_memory.size()) != plan.world_size()) {
      return InvalidArgumentError("plan: ", req.rank_memory.size(), " memory sizes for ",
                                  plan.world_size(), " ranks");
    }
    for (const RankPlan& r : plan.ranks) {
      const int64_t have = req.rank_memory.size() == 1
                               ? req.rank_memory[0]
                               : req.rank_memory[static_cast<size_t>(r.rank)];
      const int64_t need = r.weight_bytes + r.kv_bytes;
      if (need > have) {
        return ResourceExhaustedError("plan: rank ", r.rank, " (stage ", r.stage, ", layers [",
                                      r.shard.layer_begin, ", ", r.shard.layer_end, ")) needs ",
                                      GiB(need), " (weights ", GiB(r.weight_bytes), " + KV cache ",
                                      GiB(r.kv_bytes), ") but has ", GiB(have), " available");
      }
    }
  }
  return plan;
}

}  // namespace loom::parallel
