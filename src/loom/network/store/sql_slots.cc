// Reserved slots and their probes (store.h, "Reserved slots"), in the SQL both engines share.
#include "loom/network/store/sql_store.h"

namespace loom::network::store {
namespace {

#define LOOM_SLOT_COLUMNS \
  "id, node_id, model, begin_minute, end_minute, state, created_ms, lost_ms, lost_reason"

StatusOr<SlotRecord> DecodeSlot(const std::vector<std::string>& row) {
  RowReader r(row);
  SlotRecord s;
  s.id = r.Int(0);
  s.node_id = r.Text(1);
  s.model = r.Text(2);
  const int64_t begin = r.Int(3), end = r.Int(4);
  const std::string state = r.Text(5);
  s.created_ms = r.Int(6);
  s.lost_ms = r.Int(7);
  s.lost_reason = r.Text(8);
  if (!r.status().ok()) return r.status();
  if (begin < 0 || begin > 1439 || end < 1 || end > 1440) {
    return DataLossError("slot ", s.id, " has the window ", begin, "-", end);
  }
  s.begin_minute = static_cast<int32_t>(begin);
  s.end_minute = static_cast<int32_t>(end);
  const std::optional<SlotState> parsed = ParseSlotState(state);
  if (!parsed) return DataLossError("slot ", s.id, " has unknown state ", Quoted(state));
  s.state = *parsed;
  return s;
}

}  // namespace

StatusOr<SlotRecord> SqlStore::OfferSlot(const SlotRecord& offer) {
  const std::string op = StrCat("offer slot ", Quoted(offer.model), " on ", Quoted(offer.node_id));
  if (offer.node_id.empty() || offer.model.empty()) {
    return InvalidArgumentError("store: ", op, ": the node id and the model must not be empty");
  }
  if (offer.begin_minute < 0 || offer.begin_minute > 1439 || offer.end_minute < 1 ||
      offer.end_minute > 1440 || offer.begin_minute == offer.end_minute) {
    return InvalidArgumentError("store: ", op, ": the window ", offer.begin_minute, "-",
                                offer.end_minute, " is not a window of minutes of a day");
  }
  // Insert, or move an active slot's window; either way read the row back.
  LOOM_RETURN_IF_ERROR(
      Run(op,
          "INSERT INTO slots (node_id, model, begin_minute, end_minute, state, created_ms) "
          "VALUES ($1, $2, $3, $4, 'active', $5) "
          "ON CONFLICT (node_id, model) DO UPDATE SET begin_minute = excluded.begin_minute, "
          "end_minute = excluded.end_minute WHERE slots.state = 'active'",
          {offer.node_id, offer.model, int64_t{offer.begin_minute}, int64_t{offer.end_minute},
           offer.created_ms})
          .status());
  LOOM_ASSIGN_OR_RETURN(SqlResult r, Run(op,
                                         "SELECT " LOOM_SLOT_COLUMNS
                                         " FROM slots WHERE node_id = $1 AND model = $2",
                                         {offer.node_id, offer.model}));
  if (r.rows.size() != 1) return InternalError("store: ", op, ": the slot was not written");
  auto slot = DecodeSlot(r.rows[0]);
  if (!slot.ok()) return slot.status().WithContext(StrCat("store: ", op));
  return slot;
}

Status SqlStore::RecordProbe(int64_t slot_id, int64_t day, bool answered) {
  const std::string op = StrCat("record a probe of slot ", slot_id);
  const int64_t ok = answered ? 1 : 0;
  StatusOr<SqlResult> r =
      Run(op,
          "INSERT INTO slot_days (slot_id, day, probes, answered) VALUES ($1, $2, 1, $3) "
          "ON CONFLICT (slot_id, day) DO UPDATE SET probes = slot_days.probes + 1, "
          "answered = slot_days.answered + excluded.answered",
          {slot_id, day, ok});
  if (!r.ok() && r.status().code() == StatusCode::kNotFound) {  // the foreign key to slots
    return NotFoundError("store: ", op, ": no such slot");
  }
  return r.status();
}

StatusOr<std::vector<SlotDay>> SqlStore::SlotDays(int64_t slot_id, int64_t from_day) {
  const std::string op = StrCat("read the probes of slot ", slot_id);
  LOOM_ASSIGN_OR_RETURN(SqlResult r, Run(op,
                                         "SELECT day, probes, answered FROM slot_days "
                                         "WHERE slot_id = $1 AND day >= $2 ORDER BY day",
                                         {slot_id, from_day}));
  std::vector<SlotDay> days;
  days.reserve(r.rows.size());
  for (const auto& row : r.rows) {
    RowReader reader(row);
    SlotDay d{reader.Int(0), reader.Int(1), reader.Int(2)};
    if (!reader.status().ok()) return reader.status().WithContext(StrCat("store: ", op));
    days.push_back(d);
  }
  return days;
}

Status SqlStore::LoseSlot(int64_t slot_id, int64_t now_ms, std::string_view reason) {
  const std::string op = StrCat("lose slot ", slot_id);
  LOOM_RETURN_IF_ERROR(Run(op,
                           "UPDATE slots SET state = 'lost', lost_ms = $2, lost_reason = $3 "
                           "WHERE id = $1 AND state = 'active'",
                           {slot_id, now_ms, reason})
                           .status());
  LOOM_ASSIGN_OR_RETURN(SqlResult r, Run(op, "SELECT id FROM slots WHERE id = $1", {slot_id}));
  if (r.rows.empty()) return NotFoundError("store: ", op, ": no such slot");
  return OkStatus();
}

StatusOr<std::vector<SlotRecord>> SqlStore::ListSlots() {
  constexpr std::string_view op = "list slots";
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op, "SELECT " LOOM_SLOT_COLUMNS " FROM slots ORDER BY id", {}));
  return DecodeAll<SlotRecord>(op, r, DecodeSlot);
}

}  // namespace loom::network::store
