#include "loom/network/ledger/credits.h"

#include <gtest/gtest.h>

namespace loom::network::ledger {
namespace {

int64_t LineOf(const store::LedgerTx& tx, std::string_view book) {
  int64_t sum = 0;
  for (const auto& l : tx.lines) sum += l.book == book ? l.amount : 0;
  return sum;
}

TEST(CreditsTest, ParsesAndFormatsCreditsExactly) {
  EXPECT_EQ(*ParseCredits("2.5"), 2'500'000);
  EXPECT_EQ(*ParseCredits("0.000001"), 1);
  EXPECT_EQ(*ParseCredits("12"), 12'000'000);
  EXPECT_EQ(*ParseCredits(".5"), 500'000);
  for (const char* bad : {"", ".", "1.", "-1", "1e3", "0.0000001", "1,5", "abc", "99999999999"}) {
    EXPECT_FALSE(ParseCredits(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatCredits(2'500'000), "2.500000");
  EXPECT_EQ(FormatCredits(-1), "-0.000001");
  EXPECT_EQ(FormatCredits(0), "0.000000");
}

TEST(CreditsTest, PriceFlagsSetModelsAndTheFallback) {
  Pricing p;
  ASSERT_TRUE(AddPriceFlag("stories260K=1:2.5", &p).ok());
  ASSERT_TRUE(AddPriceFlag("*=0.5", &p).ok());
  ASSERT_TRUE(AddPriceFlag("org/model=3", &p).ok());
  EXPECT_EQ(p.For("stories260K").prompt, 1'000'000);
  EXPECT_EQ(p.For("stories260K").completion, 2'500'000);
  EXPECT_EQ(p.For("org/model").completion, 3'000'000);
  EXPECT_EQ(p.For("other").prompt, 500'000);
  EXPECT_EQ(p.For("other").completion, 500'000);
  EXPECT_FALSE(AddPriceFlag("nomodel", &p).ok());
  EXPECT_FALSE(AddPriceFlag("=1", &p).ok());
  EXPECT_FALSE(AddPriceFlag("m=1:x", &p).ok());
  EXPECT_FALSE(AddPriceFlag("m=1000001", &p).ok());
  EXPECT_TRUE(Pricing{}.For("any").free());
}

TEST(CreditsTest, CostIsRoundedUpToAMicroCredit) {
  const Price p{1'000'000, 2'000'000};  // 1 and 2 micro-credits a token
  EXPECT_EQ(Cost(p, 10, 5), 20);
  const Price cheap{1, 1};  // a millionth of a micro-credit a token
  EXPECT_EQ(Cost(cheap, 1, 0), 1);
  EXPECT_EQ(Cost(cheap, 0, 0), 0);
  const Price top{kMaxPrice, kMaxPrice};
  EXPECT_EQ(Cost(top, int64_t{1} << 31, int64_t{1} << 31), (int64_t{1} << 32) * kMicro);
}

TEST(CreditsTest, SettlementPaysEachAttemptItsTokensAndThePromptOnce) {
  const Price p{1'000'000, 2'000'000};
  // Attempt 1 streamed 30 tokens and died; attempt 2 prefilled again and streamed 20 more.
  const std::vector<Work> work = {{"j-1", "node-a", 30}, {"j-2", "node-b", 20}};
  const store::LedgerTx tx = SettleTx("j", 7, 1000, p, 10, work, 9000, 5);
  ASSERT_TRUE(store::ValidateLedgerTx(tx).ok()) << store::ValidateLedgerTx(tx).ToString();
  const int64_t charge = 10 * 1 + 50 * 2;  // 110
  EXPECT_EQ(LineOf(tx, "held:7"), -1000);
  EXPECT_EQ(LineOf(tx, "consumer:7"), 1000 - charge);
  EXPECT_EQ(LineOf(tx, "pending:node-a"), (10 + 60) * 9 / 10);  // 63
  EXPECT_EQ(LineOf(tx, "pending:node-b"), 40 * 9 / 10);         // 36
  EXPECT_EQ(LineOf(tx, "fee"), charge - 63 - 36);
  EXPECT_EQ(tx.kind, "settle");
  EXPECT_EQ(tx.ref, "j");
}

TEST(CreditsTest, AnAttemptWithItsOwnShareIsPaidThatShareAndTheFeeTheRest) {
  const Price p{0, 1'000'000};
  // A reserved slot's attempt at 99% next to a spare one at the usual 90%.
  const std::vector<Work> work = {{"j-1", "slot", 100, 9900}, {"j-2", "spare", 100}};
  const store::LedgerTx tx = SettleTx("j", 7, 1000, p, 0, work, 9000, 5);
  ASSERT_TRUE(store::ValidateLedgerTx(tx).ok()) << store::ValidateLedgerTx(tx).ToString();
  EXPECT_EQ(LineOf(tx, "pending:slot"), 99);
  EXPECT_EQ(LineOf(tx, "pending:spare"), 90);
  EXPECT_EQ(LineOf(tx, "fee"), 200 - 99 - 90);
  // A share above 100% pays the whole charge and no more.
  const store::LedgerTx capped = SettleTx("k", 7, 1000, p, 0, {{"k-1", "slot", 100, 12000}}, 9000, 5);
  EXPECT_EQ(LineOf(capped, "pending:slot"), 100);
  EXPECT_EQ(LineOf(capped, "fee"), 0);
}

TEST(CreditsTest, ThePromptGoesToTheFirstAttemptThatStreamed) {
  const Price p{1'000'000, 1'000'000};
  const std::vector<Work> work = {{"j-1", "node-a", 0}, {"j-2", "node-b", 5}};
  const store::LedgerTx tx = SettleTx("j", 1, 100, p, 10, work, 10000, 5);
  EXPECT_EQ(LineOf(tx, "pending:node-a"), 0);
  EXPECT_EQ(LineOf(tx, "pending:node-b"), 15);
  EXPECT_EQ(LineOf(tx, "fee"), 0);
  EXPECT_TRUE(store::ValidateLedgerTx(tx).ok());
}

TEST(CreditsTest, NothingStreamedChargesNothing) {
  const Price p{1'000'000, 1'000'000};
  const store::LedgerTx tx = SettleTx("j", 1, 100, p, 10, {{"j-1", "node-a", 0}}, 9000, 5);
  EXPECT_EQ(LineOf(tx, "consumer:1"), 100);
  EXPECT_EQ(LineOf(tx, "held:1"), -100);
  EXPECT_EQ(tx.lines.size(), 2u);
  EXPECT_TRUE(store::ValidateLedgerTx(tx).ok());
}

TEST(CreditsTest, TheChargeNeverExceedsTheReservation) {
  const Price p{1'000'000, 1'000'000};
  const store::LedgerTx tx = SettleTx("j", 1, 50, p, 40, {{"j-1", "node-a", 60}}, 9000, 5);
  EXPECT_EQ(LineOf(tx, "consumer:1"), 0);
  EXPECT_EQ(LineOf(tx, "pending:node-a"), 45);  // 90% of the capped 50
  EXPECT_EQ(LineOf(tx, "fee"), 5);
  EXPECT_TRUE(store::ValidateLedgerTx(tx).ok());
}

TEST(CreditsTest, ReservationMovesTheWorstCaseIntoTheHold) {
  const store::LedgerTx tx = ReserveTx("j", 3, 77, 9);
  EXPECT_TRUE(store::ValidateLedgerTx(tx).ok());
  EXPECT_EQ(LineOf(tx, "consumer:3"), -77);
  EXPECT_EQ(LineOf(tx, "held:3"), 77);
  EXPECT_EQ(tx.at_ms, 9);
}

}  // namespace
}  // namespace loom::network::ledger
