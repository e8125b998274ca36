// What a request costs and who is paid for it, as transactions for the store's ledger (store.h,
// "Ledger").  Amounts are integer micro-credits (1 credit = 1,000,000); prices are credits per
// million tokens, so a price of P credits per million tokens costs P micro-credits per token.
//
// At admission the hub reserves the request's worst case (the prompt's upper bound plus
// max_tokens, at the model's price) from the consumer's book into its held book.  At the end it
// charges what it counted itself: the prompt as the first node tokenized it (the hub keeps those
// ids and resends them on failover) and every token it streamed, rounded up to a micro-credit and
// never more than the reservation; gives the rest of the hold back; and credits each attempt's
// node (pending, until the verification window passes) its share of the tokens that attempt
// streamed, the prompt going to the attempt that first produced a token.  The network keeps the
// remainder (the fee), so every settlement sums to zero and no attempt is paid twice.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/network/store/store.h"

namespace loom::network::ledger {

inline constexpr int64_t kMicro = 1'000'000;         // micro-credits per credit
inline constexpr int64_t kMaxPrice = 1000000 * kMicro;  // per million tokens: 1 credit a token

struct Price {
  int64_t prompt = 0;      // micro-credits per million prompt tokens (= credits x 1e6)
  int64_t completion = 0;  // ...per million generated tokens
  bool free() const { return prompt == 0 && completion == 0; }
};

struct Pricing {
  std::map<std::string, Price, std::less<>> models;
  Price fallback;                    // models without a price of their own ("*")
  int32_t operator_share_bp = 9000;  // of each charge, to the node that did the work
  const Price& For(std::string_view model) const;
};

// "2.5" -> 2'500'000 micro-credits: up to 6 decimals, no sign, no exponent, at most 2^53.
StatusOr<int64_t> ParseCredits(std::string_view text);
// Micro-credits as credits with 6 decimals, e.g. "2.500000".
std::string FormatCredits(int64_t micro);
// "MODEL=P" or "MODEL=PROMPT:COMPLETION" in credits per million tokens; MODEL "*" sets the
// fallback.  Each at most kMaxPrice.
Status AddPriceFlag(std::string_view flag, Pricing* pricing);

std::string ConsumerBook(int64_t account_id);
std::string HeldBook(int64_t account_id);
std::string PendingBook(std::string_view node_id);
std::string AvailableBook(std::string_view node_id);

// Micro-credits for tokens at a price, rounded up.
int64_t Cost(const Price& price, int64_t prompt_tokens, int64_t completion_tokens);

// The reservation of `amount` (> 0) for a job.
store::LedgerTx ReserveTx(const std::string& job_id, int64_t account_id, int64_t amount,
                          int64_t now_ms);

// One attempt's work as the hub counted it.
struct Work {
  std::string attempt_id;
  std::string node_id;
  int64_t tokens = 0;  // tokens this attempt streamed to the consumer
  // This attempt's share of what its tokens are charged, in basis points (a reserved slot earns
  // more than the usual operator share); -1: the settlement's operator_share_bp.
  int32_t share_bp = -1;
};

// The settlement of a job that reserved `reserved`: charges `prompt_tokens` and the attempts'
// tokens at `price` (at most `reserved`), pays each attempt's node its share into its pending book
// and the fee the rest, and gives the remaining hold back.  A job that streamed nothing pays
// nothing (its prompt included).
store::LedgerTx SettleTx(const std::string& job_id, int64_t account_id, int64_t reserved,
                         const Price& price, int64_t prompt_tokens, const std::vector<Work>& work,
                         int32_t operator_share_bp, int64_t now_ms);

}  // namespace loom::network::ledger
