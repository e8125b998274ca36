// `loom doctor -m MODEL`: does the model fit here, which split is fastest on these links and why
// (the cost model's compute and link time per token), and what a faster link would change.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "loom/cluster/doctor.h"
#include "loom/parallel/plan.h"

namespace loom::cluster {
namespace {

using json = nlohmann::json;

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// Bytes for people: GiB, or MiB / KiB below one of the larger unit.
std::string Size(double bytes) {
  if (bytes >= double(int64_t{1} << 30)) return Fixed(bytes / double(int64_t{1} << 30), 2) + " GiB";
  if (bytes >= double(int64_t{1} << 20)) return Fixed(bytes / double(int64_t{1} << 20), 1) + " MiB";
  return Fixed(bytes / 1024, 1) + " KiB";
}

std::string Gbits(const LinkFacts& l) {
  return l.bytes_per_s > 0 ? Fixed(l.bytes_per_s * 8 / 1e9, 1) + " Gbit/s" : "unlimited bandwidth";
}

std::string LinkText(const LinkFacts& l) {
  return Fixed(l.latency_s * 1e6, l.latency_s * 1e6 < 10 ? 1 : 0) + " us one-way, " + Gbits(l);
}

// The kinds of split, for people.
enum class Kind { kSingle, kTensor, kPipeline, kHybrid };

Kind KindOf(const Prediction& p) {
  if (p.group() == 1 && p.pp == 1) return Kind::kSingle;
  if (p.pp == 1) return Kind::kTensor;
  if (p.group() == 1) return Kind::kPipeline;
  return Kind::kHybrid;
}

std::string Short(const Prediction& p) { return p.Name(); }

// "tensor parallel" or, splitting experts, "expert parallel".
std::string GroupKind(const Prediction& p) { return p.ep > 1 ? "expert" : "tensor"; }

std::string Name(const Prediction& p) {
  switch (KindOf(p)) {
    case Kind::kSingle:
      return "one machine, no split (" + Short(p) + ")";
    case Kind::kTensor:
      return GroupKind(p) + " parallel over " + std::to_string(p.group()) + " machines (" +
             Short(p) + ")";
    case Kind::kPipeline:
      return "a pipeline of " + std::to_string(p.pp) + " stages (" + Short(p) + ")";
    case Kind::kHybrid:
      return GroupKind(p) + "-parallel groups of " + std::to_string(p.group()) + " in " +
             std::to_string(p.pp) +
             " pipeline stages (" + Short(p) + ")";
  }
  return Short(p);
}

std::string Numbers(const Prediction& p) {
  return Fixed(p.decode_tokens_per_s, 1) + " tokens/s (per token " +
         Fixed(p.decode_compute_s * 1e3, 2) + " ms reading weights + " +
         Fixed(p.decode_link_s * 1e3, 2) + " ms on the links)";
}

json PlansJson(const std::vector<Prediction>& all, const Prediction* best) {
  json plans = json::array();
  for (const Prediction& p : all) {
    json e = {{"tp", p.tp}, {"ep", p.ep}, {"pp", p.pp}, {"feasible", p.feasible}};
    if (p.feasible) {
      e["decode_tokens_per_s"] = p.decode_tokens_per_s;
      e["prompt_tokens_per_s"] = p.prompt_tokens_per_s;
      e["decode_compute_ms"] = p.decode_compute_s * 1e3;
      e["decode_link_ms"] = p.decode_link_s * 1e3;
      e["layout"] = p.plan.Describe();
      e["pick"] = &p == best;
    } else {
      e["why_not"] = p.why_not;
    }
    plans.push_back(std::move(e));
  }
  return plans;
}

json PickJson(const Prediction* best) {
  if (best == nullptr) return nullptr;
  return {{"tp", best->tp},
          {"ep", best->ep},
          {"pp", best->pp},
          {"name", Name(*best)},
          {"decode_tokens_per_s", best->decode_tokens_per_s},
          {"prompt_tokens_per_s", best->prompt_tokens_per_s},
          {"decode_compute_ms", best->decode_compute_s * 1e3},
          {"decode_link_ms", best->decode_link_s * 1e3}};
}

json LinkJson(const LinkFacts& l) {
  return {{"latency_us", l.latency_s * 1e6}, {"gbits_per_s", l.bytes_per_s * 8 / 1e9}};
}

// The fastest feasible prediction of a kind; null when none.
const Prediction* BestOf(const std::vector<Prediction>& all, Kind kind) {
  const Prediction* best = nullptr;
  for (const Prediction& p : all) {
    if (p.feasible && KindOf(p) == kind &&
        (best == nullptr || p.decode_tokens_per_s > best->decode_tokens_per_s)) {
      best = &p;
    }
  }
  return best;
}

// Why the best split beats the others, in the cost model's numbers.
void Explain(const std::vector<Prediction>& all, const Prediction& best, json* advice) {
  std::string against;
  for (Kind k : {Kind::kSingle, Kind::kTensor, Kind::kPipeline, Kind::kHybrid}) {
    const Prediction* other = BestOf(all, k);
    if (other == nullptr || k == KindOf(best)) continue;
    against += (against.empty() ? "" : "; ") + Name(*other) + ": " + Numbers(*other);
  }
  if (!against.empty())
    advice->push_back("The other kinds of split, at their best: " + against + ".");
  const Prediction* single = BestOf(all, Kind::kSingle);
  const Prediction* tensor = BestOf(all, Kind::kTensor);
  switch (KindOf(best)) {
    case Kind::kSingle:
      if (tensor != nullptr) {
        advice->push_back(
            "Splitting does not pay on these links: tensor parallelism (" + Short(*tensor) +
            ") would save " + Fixed((best.decode_compute_s - tensor->decode_compute_s) * 1e3, 2) +
            " ms of weight reading per token but spend " + Fixed(tensor->decode_link_s * 1e3, 2) +
            " ms on its all-reduces (two per layer). A pipeline split never speeds up one "
            "stream's generation (its stages run one after another); it makes room for models "
            "too big for one machine.");
      } else {
        advice->push_back(
            "One machine is fastest: a pipeline split never speeds up one stream's "
            "generation (its stages run one after another); it makes room for "
            "models too big for one machine.");
      }
      break;
    case Kind::kTensor:
    case Kind::kHybrid:
      advice->push_back(
          "Tensor parallelism wins: each machine reads only its share of the weights, " +
          Fixed(best.decode_compute_s * 1e3, 2) + " ms per token" +
          (single != nullptr
               ? " instead of " + Fixed(single->decode_compute_s * 1e3, 2) + " ms on one machine"
               : std::string()) +
          ", and on these links its all-reduces cost only " + Fixed(best.decode_link_s * 1e3, 2) +
          " ms per token.");
      break;
    case Kind::kPipeline:
      advice->push_back(
          std::string(single == nullptr ? "The model needs more than one machine here. " : "") +
          "A pipeline split wins: it sends one small message per stage and token, " +
          Fixed(best.decode_link_s * 1e3, 2) + " ms per token on these links" +
          (tensor != nullptr
               ? ", while tensor parallelism's two all-reduces per layer would cost " +
                     Fixed(tensor->decode_link_s * 1e3, 2) + " ms"
               : std::string()) +
          ".");
      break;
  }
}

}  // namespace

StatusOr<json> ModelSection(const model::ModelFile& file, const ModelAdviceInputs& in) {
  const model::HParams& hp = file.hparams;
  const int64_t context = in.cost.context > 0 ? in.cost.context : hp.context_length;
  parallel::PlanRequest whole;
  whole.context = context;
  LOOM_ASSIGN_OR_RETURN(parallel::ParallelPlan one, parallel::MakePlan(file, whole));
  const int64_t weights = one.rank(0).weight_bytes, kv = one.rank(0).kv_bytes;
  const bool fits = weights + kv <= in.available_here;

  const std::vector<Prediction> all = PredictAll(file, in.cost);
  const Prediction* best = PickBest(all);
  // The faster link is never slower than these links in either respect.
  CostInputs fast_in = in.cost;
  fast_in.link.latency_s = std::min(in.cost.link.latency_s, in.fast.latency_s);
  fast_in.link.bytes_per_s = in.cost.link.bytes_per_s == 0 || in.fast.bytes_per_s == 0
                                 ? 0.0
                                 : std::max(in.cost.link.bytes_per_s, in.fast.bytes_per_s);
  const std::vector<Prediction> fast = PredictAll(file, fast_in);
  const Prediction* fast_best = PickBest(fast);

  json advice = json::array();
  const std::string need = Size(static_cast<double>(weights + kv)) + " (weights " +
                           Size(static_cast<double>(weights)) + " + " +
                           Size(static_cast<double>(kv)) +
                           " of KV cache, the keys and values attention keeps, for " +
                           std::to_string(context) + " positions)";
  if (fits) {
    advice.push_back("It fits on this machine: it needs " + need + " of " +
                     Size(static_cast<double>(in.available_here)) + " available.");
  } else {
    advice.push_back("It does not fit on this machine: it needs " + need + " but only " +
                     Size(static_cast<double>(in.available_here)) +
                     " is available. A shorter context (--ctx) needs less KV cache; a split "
                     "over machines gives each only its share.");
  }
  const std::string over =
      in.hypothetical
          ? "up to " + std::to_string(in.cost.ranks) +
                " machines like this one (hypothetical; "
                "no cluster of several members answered), joined by links of " +
                LinkText(in.cost.link) + " (--ranks, --link-latency-us, --link-gbps)"
          : "the cluster's " + std::to_string(in.cost.ranks) +
                " members, each at the slowest member's speed and memory, over its slowest fastest "
                "link: " +
                LinkText(in.cost.link);
  advice.push_back("Predictions for " + over + ", each rank reading weights at " +
                   Fixed(in.cost.rank.decode_bytes_per_s / 1e9, 1) + " GB/s with " +
                   Size(static_cast<double>(in.cost.rank.memory_bytes)) + " of memory.");
  advice.push_back(
      "How to read the splits: tpN (tensor parallelism) divides every layer's weights among N "
      "machines, which combine their partial results twice per layer (an all-reduce: a message "
      "to every other machine); ppN (a pipeline) gives each of N machines a run of whole layers, "
      "and a token's activations pass from one to the next once per stage.");
  if (best == nullptr) {
    advice.push_back(
        "No split fits in memory on these machines: add machines or memory, or "
        "shorten the context (--ctx).");
  } else {
    advice.push_back("Fastest on these links: " + Name(*best) + " at " + Numbers(*best) + ".");
    Explain(all, *best, &advice);
  }

  const bool already_fast = fast_in.link.latency_s == in.cost.link.latency_s &&
                            fast_in.link.bytes_per_s == in.cost.link.bytes_per_s;
  const std::string assumed =
      "an RDMA-class link (an assumption: RDMA over Thunderbolt 5, " + LinkText(fast_in.link) + ")";
  json change = nullptr;
  if (already_fast) {
    advice.push_back("These links are already at least as fast as " + assumed +
                     ", so a faster link would change little.");
  } else if (fast_best != nullptr) {
    const bool same = best != nullptr && best->tp == fast_best->tp && best->pp == fast_best->pp;
    const double ratio =
        best != nullptr ? fast_best->decode_tokens_per_s / best->decode_tokens_per_s : 0.0;
    change = {{"best_changes", !same}, {"speedup", best != nullptr ? json(ratio) : json(nullptr)}};
    if (best == nullptr) {
      advice.push_back("With " + assumed + ": " + Name(*fast_best) + " at " + Numbers(*fast_best) +
                       ".");
    } else if (same && KindOf(*best) == Kind::kSingle) {
      const Prediction* split = nullptr;
      for (const Prediction& p : fast) {
        if (p.feasible && KindOf(p) != Kind::kSingle &&
            (split == nullptr || p.decode_tokens_per_s > split->decode_tokens_per_s)) {
          split = &p;
        }
      }
      advice.push_back("With " + assumed + " one machine would still be fastest" +
                       (split != nullptr ? "; the best split over machines would then be " +
                                               Name(*split) + " at " + Numbers(*split)
                                         : std::string()) +
                       ".");
    } else if (same) {
      advice.push_back("With " + assumed + " the fastest split would stay " + Short(*best) + ": " +
                       Fixed(fast_best->decode_tokens_per_s, 1) + " tokens/s instead of " +
                       Fixed(best->decode_tokens_per_s, 1) + " (" + Fixed(ratio, 2) +
                       " times as fast).");
    } else {
      advice.push_back("With " + assumed + " the fastest split would change to " +
                       Name(*fast_best) + ": " + Numbers(*fast_best) + ", " + Fixed(ratio, 2) +
                       " times the " + Fixed(best->decode_tokens_per_s, 1) + " tokens/s of " +
                       Short(*best) + " on these links.");
    }
  }

  const LinkFacts& fast_link = fast_in.link;
  return json{{"model", in.model},
              {"context", context},
              {"fit",
               {{"weights_bytes", weights},
                {"kv_bytes", kv},
                {"need_bytes", weights + kv},
                {"available_bytes", in.available_here},
                {"fits", fits}}},
              {"ranks", in.cost.ranks},
              {"hypothetical", in.hypothetical},
              {"rank",
               {{"memory_bytes", in.cost.rank.memory_bytes},
                {"decode_gbytes_per_s", in.cost.rank.decode_bytes_per_s / 1e9},
                {"decode_gbytes_per_s_shared", in.cost.rank.decode_bytes_per_s_shared / 1e9},
                {"prompt_gflops", in.cost.rank.prompt_flops / 1e9}}},
              {"link", LinkJson(in.cost.link)},
              {"plans", PlansJson(all, best)},
              {"pick", PickJson(best)},
              {"fast_link",
               {{"latency_us", fast_link.latency_s * 1e6},
                {"gbits_per_s", fast_link.bytes_per_s * 8 / 1e9},
                {"assumption",
                 "RDMA over Thunderbolt 5: its 80 Gbit/s each way and an assumed "
                 "one-way latency (RDMA brings Macs under 50 us)"}}},
              {"fast_plans", PlansJson(fast, fast_best)},
              {"fast_pick", PickJson(fast_best)},
              {"change", change},
              {"advice", advice}};
}

}  // namespace loom::cluster
