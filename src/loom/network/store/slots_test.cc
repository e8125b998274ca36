// Reserved slots (store.h, "Reserved slots") on both engines: one slot per node and model, a lost
// slot stays lost, probes add up per day, and everything survives a reopen.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/network/store/store.h"
#include "loom/network/store/store_test_fixture.h"

namespace loom::network::store {
namespace {

class SlotsTest : public StoreTest {};

INSTANTIATE_TEST_SUITE_P(Engines, SlotsTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

SlotRecord Offer(std::string node, std::string model, int32_t begin = 0, int32_t end = 1440) {
  SlotRecord s;
  s.node_id = std::move(node);
  s.model = std::move(model);
  s.begin_minute = begin;
  s.end_minute = end;
  s.created_ms = 1000;
  return s;
}

TEST_P(SlotsTest, OfferingTwiceGivesTheSameSlotWithItsNewWindow) {
  LOOM_ASSERT_OK_AND_ASSIGN(SlotRecord a, store_->OfferSlot(Offer("node-a", "m")));
  EXPECT_GT(a.id, 0);
  EXPECT_EQ(a.state, SlotState::kActive);
  EXPECT_EQ(a.created_ms, 1000);
  LOOM_ASSERT_OK_AND_ASSIGN(SlotRecord again, store_->OfferSlot(Offer("node-a", "m", 1320, 360)));
  EXPECT_EQ(again.id, a.id);
  EXPECT_EQ(again.begin_minute, 1320);
  EXPECT_EQ(again.end_minute, 360);
  LOOM_ASSERT_OK_AND_ASSIGN(SlotRecord other, store_->OfferSlot(Offer("node-b", "m")));
  EXPECT_NE(other.id, a.id);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<SlotRecord> all, store_->ListSlots());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].node_id, "node-a");
  EXPECT_EQ(all[1].node_id, "node-b");
}

TEST_P(SlotsTest, BadOffersAreInvalidArguments) {
  EXPECT_EQ(store_->OfferSlot(Offer("", "m")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->OfferSlot(Offer("n", "m", 60, 60)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->OfferSlot(Offer("n", "m", 0, 1441)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(SlotsTest, ProbesAddUpPerDay) {
  LOOM_ASSERT_OK_AND_ASSIGN(SlotRecord s, store_->OfferSlot(Offer("node-a", "m")));
  for (bool answered : {true, true, false}) LOOM_ASSERT_OK(store_->RecordProbe(s.id, 100, answered));
  LOOM_ASSERT_OK(store_->RecordProbe(s.id, 101, true));
  LOOM_ASSERT_OK(store_->RecordProbe(s.id, 70, false));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<SlotDay> days, store_->SlotDays(s.id, 71));
  ASSERT_EQ(days.size(), 2u);
  EXPECT_EQ(days[0].day, 100);
  EXPECT_EQ(days[0].probes, 3);
  EXPECT_EQ(days[0].answered, 2);
  EXPECT_EQ(days[1].day, 101);
  EXPECT_EQ(days[1].probes, 1);
  EXPECT_EQ(days[1].answered, 1);
  EXPECT_EQ(store_->RecordProbe(s.id + 99, 100, true).code(), StatusCode::kNotFound);
}

TEST_P(SlotsTest, ALostSlotStaysLostAndKeepsItsFirstReason) {
  LOOM_ASSERT_OK_AND_ASSIGN(SlotRecord s, store_->OfferSlot(Offer("node-a", "m")));
  LOOM_ASSERT_OK(store_->LoseSlot(s.id, 5000, "availability 96.0% < 98%"));
  LOOM_ASSERT_OK(store_->LoseSlot(s.id, 6000, "again"));
  EXPECT_EQ(store_->LoseSlot(s.id + 99, 1, "x").code(), StatusCode::kNotFound);
  LOOM_ASSERT_OK_AND_ASSIGN(SlotRecord again, store_->OfferSlot(Offer("node-a", "m", 60, 120)));
  EXPECT_EQ(again.id, s.id);
  EXPECT_EQ(again.state, SlotState::kLost);
  EXPECT_EQ(again.lost_ms, 5000);
  EXPECT_EQ(again.lost_reason, "availability 96.0% < 98%");
  EXPECT_EQ(again.begin_minute, 0);  // a lost slot's window is not moved
  EXPECT_EQ(again.end_minute, 1440);
}

TEST_P(SlotsTest, SlotsAndProbesSurviveReopening) {
  LOOM_ASSERT_OK_AND_ASSIGN(SlotRecord s, store_->OfferSlot(Offer("node-a", "m", 480, 1200)));
  LOOM_ASSERT_OK(store_->RecordProbe(s.id, 200, true));
  Reopen();
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<SlotRecord> all, store_->ListSlots());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].begin_minute, 480);
  EXPECT_EQ(all[0].end_minute, 1200);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<SlotDay> days, store_->SlotDays(s.id, 0));
  ASSERT_EQ(days.size(), 1u);
  EXPECT_EQ(days[0].answered, 1);
}

}  // namespace
}  // namespace loom::network::store
