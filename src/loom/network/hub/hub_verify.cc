// Verified work (docs/network.md, "Verification"): after a consumer job ends, each of its attempts
// is re-executed on another node holding the model at the attempt's node's rate (a keyed hash of
// the attempt id decides, verify.h); canaries with a known greedy output go to random nodes as
// ordinary-looking requests.  A verifier scores the returned tokens (teacher forcing: loom serve's
// score_token_ids) and the hub compares (verify::Compare).  A failed check voids the attempt's
// pending credit back to the consumer; repeated failures make the node untrusted: no more work,
// and its pending credit is forfeited to the fee.
#include <algorithm>
#include <cstdio>

#include "loom/base/clock.h"
#include "loom/cluster/launch_plan.h"
#include "loom/network/hub/hub_impl.h"
#include "loom/network/ledger/credits.h"
#include "loom/network/verify/verify.h"

namespace loom::network::hub {
namespace {

constexpr size_t kMaxCheckLog = 256;
// Checks waiting or running at once; beyond, a sampled attempt is not checked (counted dropped).
constexpr size_t kMaxChecks = 4096;

// Canary prompts: short, plain text completions with a few max_tokens, as consumers send them.
struct CanaryPrompt {
  const char* text;
  int64_t max_tokens;
};
constexpr CanaryPrompt kCanaries[] = {
    {"Once upon a time, there was a little", 24},  {"The sun was shining and the birds", 16},
    {"Tom and his mom went to the park to", 32},   {"Lily had a red ball. One day", 20},
    {"In a small house near the woods lived", 28}, {"The cat looked at the big tree and", 18},
    {"Ben wanted to help his dad with the", 24},   {"It was a cold morning when Sue found", 30},
};

verify::RateConfig RateFor(const HubOptions& o) {
  verify::RateConfig c;
  c.initial = o.verify_rate;
  c.floor = std::min(o.verify_floor, o.verify_rate);
  return c;
}

// A fresh id in the shape of a consumer's completion attempt ("cmpl-<24 hex>-1").
std::string NewAttemptLikeId() {
  StatusOr<std::string> hex = cluster::RandomHex(12);
  return "cmpl-" + (hex.ok() ? *hex : std::to_string(base::UnixMillis())) + "-1";
}

}  // namespace

Status Hub::Impl::LoadVerification() {
  LOOM_ASSIGN_OR_RETURN(const std::string fresh, cluster::RandomHex(32));
  LOOM_ASSIGN_OR_RETURN(verify_seed_, store_->Setting("verify_seed", fresh));
  last_canary_ = base::NowSeconds();  // the first canary one interval after the start
  LOOM_ASSIGN_OR_RETURN(std::vector<store::NodeReputation> all, store_->ListReputations());
  for (store::NodeReputation& r : all) {
    if (r.untrusted) {
      untrusted_.insert(r.node_id);
      // A forfeit the last run did not get to (or credit settled after it).
      LogError(
          store_->ForfeitPending(r.node_id, "the node is untrusted", base::UnixMillis()).status());
    }
    reputations_[r.node_id] = std::move(r);
  }
  return OkStatus();
}

store::NodeReputation& Hub::Impl::ReputationOf(const std::string& node_id) {
  store::NodeReputation& r = reputations_[node_id];
  r.node_id = node_id;
  return r;
}

void Hub::Impl::SaveReputation(const store::NodeReputation& r) {
  LogError(store_->PutReputation(r));
}

void Hub::Impl::ConsiderChecks(const Job& job) {
  if (!job.prompt_known) return;
  const verify::RateConfig config = RateFor(options_);
  const verify::Decoding decoding = verify::DecodingOf(job.request);
  int64_t offset = 0;
  for (const ledger::Work& w : job.work) {
    const int64_t begin = offset;
    offset += w.tokens;
    if (w.tokens <= 0 || offset > static_cast<int64_t>(job.generated.size())) continue;
    store::NodeReputation& rep = ReputationOf(w.node_id);
    rep.jobs += 1;
    rep.served_tokens += static_cast<int64_t>(job.prompt_ids.size()) + begin + w.tokens;
    SaveReputation(rep);
    if (Untrusted(w.node_id)) {
      // It ran while it was found out: what it was just paid is forfeited too.
      LogError(
          store_->ForfeitPending(w.node_id, "the node is untrusted", base::UnixMillis()).status());
      continue;
    }
    if (options_.verify_rate <= 0 ||
        !verify::Sampled(verify_seed_, w.attempt_id, verify::CheckRate(rep, config))) {
      continue;
    }
    if (checks_.size() >= kMaxChecks) {
      checks_dropped_ += 1;
      continue;
    }
    auto check = std::make_unique<Check>();
    check->id = "check-" + w.attempt_id;
    check->attempt_id = w.attempt_id;
    check->node_id = w.node_id;
    check->model = job.model;
    check->account_id = job.account_id;
    check->priced = job.reserved > 0;
    check->prompt = job.prompt_ids;
    check->prompt.insert(check->prompt.end(), job.generated.begin(), job.generated.begin() + begin);
    check->tokens.assign(job.generated.begin() + begin, job.generated.begin() + offset);
    check->greedy = decoding.greedy;
    check->temperature = decoding.temperature;
    // A completion's first attempt: the verifier tokenizes the consumer's text itself, so a node
    // cannot make its output plausible by misreporting the prompt.
    if (begin == 0 && !job.chat && job.request.contains("prompt") &&
        job.request["prompt"].is_string()) {
      check->prompt_text = job.request["prompt"];
    }
    Check& ref = *check;
    if (!checks_.emplace(check->id, std::move(check)).second) continue;
    SendCheck(ref);
  }
}

void Hub::Impl::OnCanaryEnd(const Job& job) {
  if (job.generated.empty() || !job.prompt_known) return;
  {  // A canary is verification's cost too: its node's prompt and tokens.
    store::NodeReputation& rep = ReputationOf(job.node_id);
    rep.check_tokens += static_cast<int64_t>(job.prompt_ids.size() + job.generated.size());
    SaveReputation(rep);
  }
  auto expected = canary_expected_.find(job.canary_key);
  if (expected != canary_expected_.end() && expected->second == job.generated) {
    // The known greedy output, token for token: a pass without a re-execution.
    store::NodeReputation& rep = ReputationOf(job.node_id);
    verify::Record(&rep, true, base::UnixMillis(), RateFor(options_));
    SaveReputation(rep);
    checks_passed_ += 1;
    check_log_.push_back(json{{"node_id", job.node_id},
                              {"canary", job.canary_key},
                              {"passed", true},
                              {"how", "the canary's known output"}});
    if (check_log_.size() > kMaxCheckLog) check_log_.pop_front();
    return;
  }
  // Not known yet, or different: a re-execution decides (and on a pass makes it known).
  if (checks_.size() >= kMaxChecks) {
    checks_dropped_ += 1;
    return;
  }
  auto check = std::make_unique<Check>();
  check->id = "check-" + job.id;
  check->node_id = job.node_id;
  check->model = job.model;
  check->canary_key = job.canary_key;
  check->prompt = job.prompt_ids;
  check->tokens = job.generated;
  check->greedy = true;
  check->temperature = 0;
  check->prompt_text = job.request["prompt"];
  Check& ref = *check;
  if (!checks_.emplace(check->id, std::move(check)).second) return;
  SendCheck(ref);
}

void Hub::Impl::SendCheck(Check& check) {
  const double now = base::NowSeconds();
  if (check.deadline == 0) check.deadline = now + options_.check_wait_s;
  IndexModels();
  auto holders = holders_.find(check.model);
  NodeConn* best = nullptr;
  if (holders != holders_.end()) {
    for (int32_t i : holders->second) {
      const placement::Target& t = fleet_[static_cast<size_t>(i)];
      NodeConn& c = *conns_.at(fleet_conn_[static_cast<size_t>(i)]);
      if (c.node_id == check.node_id || Untrusted(c.node_id) ||
          t.state != placement::TargetState::kOnline || t.draining || t.paused ||
          std::find(check.tried.begin(), check.tried.end(), c.node_id) != check.tried.end()) {
        continue;
      }
      // Only a node that has the model in memory: a check never makes a node load one.  Of
      // those, the least busy.
      bool loaded = false;
      for (const placement::ModelOffer& m : t.models) loaded |= m.name == check.model && m.loaded;
      if (loaded && (best == nullptr || c.attempts.size() < best->attempts.size())) best = &c;
    }
  }
  if (best == nullptr) {  // CheckVerification looks again every second until the deadline
    check.next_look = now + 1;
    return;
  }
  check.verifier = best->node_id;
  check.tried.push_back(best->node_id);
  check.scoring_id = NewAttemptLikeId();
  check.deadline = now + options_.check_wait_s;
  check.next_index = 0;
  check.scored.clear();
  check.logprobs.clear();
  check.best.clear();
  check.verifier_prompt.clear();
  check_attempts_[check.scoring_id] = check.id;

  protocol::Assign a;
  a.attempt_id = check.scoring_id;
  a.model = check.model;
  a.endpoint = "completion";
  a.request = json{{"model", check.model},
                   {"prompt", check.prompt_text.is_null() ? json(check.prompt) : check.prompt_text},
                   {"score_token_ids", check.tokens},
                   {"logprobs", 1},
                   {"max_tokens", static_cast<int64_t>(check.tokens.size())},
                   {"temperature", 0},
                   {"stream", true},
                   {"return_token_ids", true}};
  a.first_token_deadline_ms = static_cast<int64_t>(options_.check_wait_s * 1000);
  // What checking costs the network: the verifier reads the prompt and every returned token.
  store::NodeReputation& rep = ReputationOf(check.node_id);
  rep.check_tokens += static_cast<int64_t>(check.prompt.size() + check.tokens.size());
  SaveReputation(rep);
  best->attempts.insert(check.scoring_id);
  UpdateLoad(*best);
  SendFrame(*best, a);
}

Check* Hub::Impl::CheckOfAttempt(const std::string& scoring_id) {
  auto a = check_attempts_.find(scoring_id);
  if (a == check_attempts_.end()) return nullptr;
  auto c = checks_.find(a->second);
  return c == checks_.end() ? nullptr : c->second.get();
}

void Hub::Impl::OnCheckAccepted(NodeConn& c, Check& check, const protocol::Accepted& f) {
  if (c.node_id == check.verifier) check.verifier_prompt = f.prompt_token_ids;
}

void Hub::Impl::OnCheckChunk(NodeConn& c, Check& check, const protocol::Chunk& f) {
  if (c.node_id != check.verifier) return;
  if (f.index != check.next_index || f.logprobs.size() != f.token_ids.size()) {
    return NextTry(
        check, "the verifier sent chunk " + std::to_string(f.index) +
                   (f.logprobs.size() != f.token_ids.size() ? " without scores" : " out of order"));
  }
  check.next_index += 1;
  check.scored.insert(check.scored.end(), f.token_ids.begin(), f.token_ids.end());
  check.logprobs.insert(check.logprobs.end(), f.logprobs.begin(), f.logprobs.end());
  check.best.insert(check.best.end(), f.best_logprobs.begin(), f.best_logprobs.end());
}

void Hub::Impl::OnCheckComplete(NodeConn& c, Check& check) {
  if (c.node_id != check.verifier) return;
  if (check.scored != check.tokens) {
    return NextTry(check, "the verifier scored other tokens than it was sent");
  }
  verify::Thresholds thresholds;
  verify::Verdict v =
      verify::Compare(check.greedy, check.temperature, check.logprobs, check.best, thresholds);
  if (!check.prompt_text.is_null() && check.verifier_prompt != check.prompt) {
    v.passed = false;
    v.reason = "the node reported other prompt tokens than the verifier's tokenization";
  }
  check.verdict = v;
  if (v.passed) return EndCheck(check.id, true, "");
  OnCheckFailed(check, v.reason);
}

void Hub::Impl::OnCheckFailed(Check& check, const std::string& why) {
  // A failure counts when the verifier is established (it passed a check of its own and failed
  // none in its window) or a second verifier agrees; else another verifier is asked.
  const auto it = reputations_.find(check.verifier);
  const bool established = it != reputations_.end() && it->second.checks_passed > 0 &&
                           it->second.window_failures == 0 && !it->second.untrusted;
  if (established || check.disputed) return EndCheck(check.id, false, why);
  check.disputed = true;
  NextTry(check, "an unestablished verifier failed it (" + why + "): a second must agree");
}

void Hub::Impl::StopTry(Check& check) {
  if (check.scoring_id.empty()) return;
  if (NodeConn* node = ReadyNode(check.verifier)) {
    node->attempts.erase(check.scoring_id);
    UpdateLoad(*node);
  }
  check_attempts_.erase(check.scoring_id);
  check.scoring_id.clear();
  check.verifier.clear();
}

void Hub::Impl::NextTry(Check& check, const std::string& why) {
  std::fprintf(stderr, "hub: check of %s on %s: %s\n", check.node_id.c_str(),
               check.verifier.c_str(), why.c_str());
  if (NodeConn* node = ReadyNode(check.verifier)) {
    protocol::Cancel cancel;
    cancel.attempt_id = check.scoring_id;
    SendFrame(*node, cancel);
  }
  StopTry(check);
  if (static_cast<int>(check.tried.size()) >= options_.check_tries) {
    return EndCheck(check.id, std::nullopt, why);
  }
  check.deadline = base::NowSeconds() + options_.check_wait_s;
  SendCheck(check);
}

void Hub::Impl::EndCheck(const std::string& check_id, std::optional<bool> passed,
                         const std::string& why) {
  auto it = checks_.find(check_id);
  if (it == checks_.end()) return;
  Check& check = *it->second;
  StopTry(check);
  const int64_t now_ms = base::UnixMillis();
  json log{{"node_id", check.node_id},
           {"verifiers", check.tried},
           {"tokens", static_cast<int64_t>(check.tokens.size())},
           {"greedy", check.greedy}};
  if (!check.attempt_id.empty()) log["attempt_id"] = check.attempt_id;
  if (!check.canary_key.empty()) log["canary"] = check.canary_key;
  if (!passed) {
    checks_dropped_ += 1;
    log["passed"] = nullptr;
    log["why"] = why;
  } else {
    store::NodeReputation& rep = ReputationOf(check.node_id);
    const bool newly_untrusted = verify::Record(&rep, *passed, now_ms, RateFor(options_));
    SaveReputation(rep);
    log["passed"] = *passed;
    if (check.verdict.tokens > 0) {
      log["mean_logprob"] = check.verdict.mean_logprob;
      log["min_logprob"] = check.verdict.min_logprob;
      log["mismatches"] = check.verdict.mismatches;
    }
    if (*passed) {
      checks_passed_ += 1;
      if (!check.canary_key.empty()) canary_expected_.emplace(check.canary_key, check.tokens);
    } else {
      checks_failed_ += 1;
      log["why"] = why;
      std::fprintf(stderr, "hub: node %s failed a check: %s\n", check.node_id.c_str(), why.c_str());
      if (check.priced && !check.attempt_id.empty()) {
        StatusOr<int64_t> voided =
            store_->VoidAttempt(check.attempt_id, ledger::ConsumerBook(check.account_id),
                                "failed a check: " + why, now_ms);
        LogError(voided.status());
        if (voided.ok()) log["voided"] = *voided;
      }
      if (newly_untrusted) MarkUntrusted(check.node_id);
    }
  }
  check_log_.push_back(std::move(log));
  if (check_log_.size() > kMaxCheckLog) check_log_.pop_front();
  checks_.erase(it);
}

void Hub::Impl::MarkUntrusted(const std::string& node_id) {
  untrusted_.insert(node_id);
  std::fprintf(stderr, "hub: node %s is untrusted now: it gets no work\n", node_id.c_str());
  LogError(store_->ForfeitPending(node_id, "the node is untrusted", base::UnixMillis()).status());
}

void Hub::Impl::CheckVerification(double now) {
  std::vector<std::string> ids;
  for (const auto& [id, check] : checks_) ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = checks_.find(id);
    if (it == checks_.end()) continue;
    Check& check = *it->second;
    if (check.verifier.empty()) {
      if (now > check.deadline) {
        EndCheck(id, std::nullopt, "no other node had '" + check.model + "' loaded");
      } else if (now >= check.next_look) {
        SendCheck(check);
      }
    } else if (now > check.deadline || ReadyNode(check.verifier) == nullptr) {
      NextTry(check, "the verifier did not answer in time");
    }
  }
  if (options_.canary_interval_s > 0 && now - last_canary_ >= options_.canary_interval_s) {
    last_canary_ = now;
    StartCanary();
  }
}

void Hub::Impl::StartCanary() {
  std::vector<NodeConn*> free;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    const placement::Target& t = fleet_[i];
    NodeConn& c = *conns_.at(fleet_conn_[i]);
    if (t.state == placement::TargetState::kOnline && !t.draining && !t.paused &&
        !Untrusted(c.node_id) && !c.models.empty() &&
        static_cast<int64_t>(c.attempts.size()) < c.max_concurrency) {
      free.push_back(&c);
    }
  }
  if (free.empty()) return;
  NodeConn& node = *free[random_() % free.size()];
  // A model it holds in memory if it has one (a cold load would stand out), else any.
  std::vector<const protocol::ModelInfo*> models;
  for (const auto& m : node.models) {
    if (m.loaded) models.push_back(&m);
  }
  if (models.empty()) {
    for (const auto& m : node.models) models.push_back(&m);
  }
  const protocol::ModelInfo& model = *models[random_() % models.size()];
  const size_t k = random_() % std::size(kCanaries);
  auto job = std::make_unique<Job>();
  job->id = NewAttemptLikeId();
  job->id.resize(job->id.size() - 2);  // "cmpl-<hex>", its attempts "-1"
  job->model = model.name;
  job->stream = true;
  job->canary = true;
  // Keyed by the weights the node claims: one model name may name different files.
  job->canary_key = model.sha256 + ":" + std::to_string(k);
  job->max_tokens = kCanaries[k].max_tokens;
  job->created_unix = base::UnixMillis() / 1000;
  job->created_at = base::NowSeconds();
  job->request = json{{"model", model.name},
                      {"prompt", kCanaries[k].text},
                      {"max_tokens", kCanaries[k].max_tokens},
                      {"temperature", 0},
                      {"stream", true},
                      {"return_token_ids", true}};
  Job& ref = *job;
  jobs_[job->id] = std::move(job);
  canaries_sent_ += 1;
  StartAttempt(ref, node, placement::Decision{});
}

json Hub::Impl::VerificationJson() const {
  const verify::RateConfig config = RateFor(options_);
  int64_t served = 0, checked = 0;
  json nodes = json::array();
  for (const auto& [id, r] : reputations_) {
    served += r.served_tokens;
    checked += r.check_tokens;
    nodes.push_back(json{{"node_id", id},
                         {"jobs", r.jobs},
                         {"checks_passed", r.checks_passed},
                         {"checks_failed", r.checks_failed},
                         {"streak", r.streak},
                         {"window_failures", r.window_failures},
                         {"last_result", r.last_result},
                         {"rate", verify::CheckRate(r, config)},
                         {"untrusted", r.untrusted},
                         {"served_tokens", r.served_tokens},
                         {"check_tokens", r.check_tokens}});
  }
  json recent = json::array();
  for (const json& l : check_log_) recent.push_back(l);
  return json{{"rate_initial", config.initial},
              {"rate_floor", config.floor},
              {"checks_passed", checks_passed_},
              {"checks_failed", checks_failed_},
              {"checks_dropped", checks_dropped_},
              {"checks_running", static_cast<int64_t>(checks_.size())},
              {"canaries_sent", canaries_sent_},
              {"canaries_known", static_cast<int64_t>(canary_expected_.size())},
              {"served_tokens", served},
              {"check_tokens", checked},
              // Tokens spent on checks over all tokens the network computed (its work and checks).
              {"share", served + checked > 0
                            ? static_cast<double>(checked) / static_cast<double>(served + checked)
                            : 0.0},
              {"nodes", nodes},
              {"recent", recent}};
}

}  // namespace loom::network::hub
