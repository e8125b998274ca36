#include "loom/network/ledger/credits.h"

#include <algorithm>
#include <cstdio>

namespace loom::network::ledger {
namespace {

using Int128 = __int128;

int64_t CeilDiv(Int128 a, Int128 b) { return static_cast<int64_t>((a + b - 1) / b); }

}  // namespace

const Price& Pricing::For(std::string_view model) const {
  auto it = models.find(model);
  return it == models.end() ? fallback : it->second;
}

StatusOr<int64_t> ParseCredits(std::string_view text) {
  const std::string shown(text.substr(0, 40));
  auto bad = [&] {
    return InvalidArgumentError("'", shown,
                                "' is not an amount of credits (digits, at most 6 "
                                "decimals, e.g. 2.5)");
  };
  const size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  if ((whole.empty() && frac.empty()) || whole.size() > 10 || frac.size() > 6 ||
      (dot != std::string_view::npos && frac.empty())) {
    return bad();
  }
  int64_t micro = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') return bad();
    micro = micro * 10 + (c - '0');
  }
  micro *= kMicro;
  int64_t scale = kMicro / 10;
  for (char c : frac) {
    if (c < '0' || c > '9') return bad();
    micro += (c - '0') * scale;
    scale /= 10;
  }
  if (micro > store::kMaxLedgerAmount) return bad();
  return micro;
}

std::string FormatCredits(int64_t micro) {
  char buf[48];
  const uint64_t m = micro < 0 ? 0 - static_cast<uint64_t>(micro) : static_cast<uint64_t>(micro);
  std::snprintf(buf, sizeof(buf), "%s%llu.%06llu", micro < 0 ? "-" : "",
                static_cast<unsigned long long>(m / kMicro),
                static_cast<unsigned long long>(m % kMicro));
  return buf;
}

Status AddPriceFlag(std::string_view flag, Pricing* pricing) {
  const size_t eq = flag.rfind('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgumentError(
        "--price wants MODEL=PRICE or MODEL=PROMPT:COMPLETION (credits "
        "per million tokens; MODEL * for every other model), got '",
        flag.substr(0, 80), "'");
  }
  const std::string_view model = flag.substr(0, eq), prices = flag.substr(eq + 1);
  const size_t colon = prices.find(':');
  StatusOr<int64_t> prompt = ParseCredits(prices.substr(0, colon));
  if (!prompt.ok()) return prompt.status().WithContext("--price");
  StatusOr<int64_t> completion = prompt;
  if (colon != std::string_view::npos) completion = ParseCredits(prices.substr(colon + 1));
  if (!completion.ok()) return completion.status().WithContext("--price");
  if (*prompt > kMaxPrice || *completion > kMaxPrice) {
    return InvalidArgumentError("--price: at most ", kMaxPrice / kMicro,
                                " credits per million tokens");
  }
  const Price p{*prompt, *completion};
  if (model == "*") {
    pricing->fallback = p;
  } else {
    pricing->models[std::string(model)] = p;
  }
  return OkStatus();
}

std::string ConsumerBook(int64_t account_id) { return "consumer:" + std::to_string(account_id); }
std::string HeldBook(int64_t account_id) { return "held:" + std::to_string(account_id); }
std::string PendingBook(std::string_view node_id) { return "pending:" + std::string(node_id); }
std::string AvailableBook(std::string_view node_id) { return "available:" + std::string(node_id); }

int64_t Cost(const Price& price, int64_t prompt_tokens, int64_t completion_tokens) {
  const Int128 raw = Int128{std::max<int64_t>(0, prompt_tokens)} * price.prompt +
                     Int128{std::max<int64_t>(0, completion_tokens)} * price.completion;
  return CeilDiv(raw, kMicro);
}

store::LedgerTx ReserveTx(const std::string& job_id, int64_t account_id, int64_t amount,
                          int64_t now_ms) {
  store::LedgerTx tx;
  tx.kind = "reserve";
  tx.ref = job_id;
  tx.at_ms = now_ms;
  tx.memo = "worst case of the request";
  tx.lines = {{ConsumerBook(account_id), -amount, ""}, {HeldBook(account_id), amount, ""}};
  return tx;
}

store::LedgerTx SettleTx(const std::string& job_id, int64_t account_id, int64_t reserved,
                         const Price& price, int64_t prompt_tokens, const std::vector<Work>& work,
                         int32_t operator_share_bp, int64_t now_ms) {
  store::LedgerTx tx;
  tx.kind = "settle";
  tx.ref = job_id;
  tx.at_ms = now_ms;
  // Each attempt's cost in units of 1e-6 micro-credits (exact), the prompt on the first attempt
  // that streamed a token.
  std::vector<Int128> raw(work.size(), 0);
  Int128 total = 0;
  bool prompt_paid = false;
  for (size_t i = 0; i < work.size(); ++i) {
    if (work[i].tokens <= 0) continue;
    raw[i] = Int128{work[i].tokens} * price.completion;
    if (!prompt_paid) {
      raw[i] += Int128{std::max<int64_t>(0, prompt_tokens)} * price.prompt;
      prompt_paid = true;
    }
    total += raw[i];
  }
  const int64_t uncapped = CeilDiv(total, kMicro);
  const int64_t charge = std::min(uncapped, reserved);
  const int64_t share = std::clamp<int64_t>(operator_share_bp, 0, 10000);
  int64_t paid = 0;
  tx.lines.push_back({HeldBook(account_id), -reserved, ""});
  if (reserved - charge != 0) tx.lines.push_back({ConsumerBook(account_id), reserved - charge, ""});
  for (size_t i = 0; i < work.size(); ++i) {
    if (raw[i] == 0) continue;
    // raw / 1e6 micro-credits, scaled down when the charge was capped, times the share.
    const int64_t s = work[i].share_bp < 0 ? share : std::min<int64_t>(work[i].share_bp, 10000);
    Int128 pay = raw[i] * s / (Int128{kMicro} * 10000);
    if (charge < uncapped) pay = pay * charge / uncapped;
    if (pay == 0) continue;
    tx.lines.push_back(
        {PendingBook(work[i].node_id), static_cast<int64_t>(pay), work[i].attempt_id});
    paid += static_cast<int64_t>(pay);
  }
  if (charge - paid != 0) tx.lines.push_back({"fee", charge - paid, ""});
  tx.memo = "charged " + FormatCredits(charge) + " of " + FormatCredits(reserved) + " reserved";
  return tx;
}

}  // namespace loom::network::ledger
