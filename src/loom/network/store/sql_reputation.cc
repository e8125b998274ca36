// The verification half of SqlStore (store.h, "Reputations"): node reputations and hub settings
// (schema.cc, migration 3).
#include <string>
#include <vector>

#include "loom/network/store/sql_store.h"

namespace loom::network::store {
namespace {

#define LOOM_REPUTATION_COLUMNS                                                             \
  "node_id, jobs, checks_passed, checks_failed, streak, window_start_ms, window_failures, " \
  "last_result, last_check_ms, untrusted, untrusted_ms, served_tokens, check_tokens"

StatusOr<NodeReputation> DecodeReputation(std::string_view op,
                                          const std::vector<std::string>& row) {
  RowReader r(row);
  NodeReputation n;
  n.node_id = r.Text(0);
  n.jobs = r.Int(1);
  n.checks_passed = r.Int(2);
  n.checks_failed = r.Int(3);
  n.streak = r.Int(4);
  n.window_start_ms = r.Int(5);
  n.window_failures = r.Int(6);
  n.last_result = r.Text(7);
  n.last_check_ms = r.Int(8);
  n.untrusted = r.Int(9) != 0;
  n.untrusted_ms = r.Int(10);
  n.served_tokens = r.Int(11);
  n.check_tokens = r.Int(12);
  if (!r.status().ok()) return r.status().WithContext(StrCat("store: ", op));
  return n;
}

}  // namespace

StatusOr<std::optional<NodeReputation>> SqlStore::FindReputation(std::string_view node_id) {
  const std::string op = StrCat("find the reputation of ", Quoted(node_id));
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT " LOOM_REPUTATION_COLUMNS " FROM node_reputation WHERE node_id = $1",
          {node_id}));
  if (r.rows.empty()) return std::optional<NodeReputation>();
  LOOM_ASSIGN_OR_RETURN(NodeReputation n, DecodeReputation(op, r.rows[0]));
  return std::optional<NodeReputation>(std::move(n));
}

StatusOr<std::vector<NodeReputation>> SqlStore::ListReputations() {
  constexpr std::string_view op = "list reputations";
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT " LOOM_REPUTATION_COLUMNS " FROM node_reputation ORDER BY node_id", {}));
  std::vector<NodeReputation> out;
  for (const auto& row : r.rows) {
    LOOM_ASSIGN_OR_RETURN(NodeReputation n, DecodeReputation(op, row));
    out.push_back(std::move(n));
  }
  return out;
}

Status SqlStore::PutReputation(const NodeReputation& n) {
  const std::string op = StrCat("put the reputation of ", Quoted(n.node_id));
  if (n.node_id.empty()) return InvalidArgumentError("store: ", op, ": the node id is empty");
  if (n.last_result != "" && n.last_result != "passed" && n.last_result != "failed") {
    return InvalidArgumentError("store: ", op, ": unknown last result ", Quoted(n.last_result));
  }
  return Run(op,
             "INSERT INTO node_reputation (" LOOM_REPUTATION_COLUMNS
             ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) "
             "ON CONFLICT (node_id) DO UPDATE SET jobs = excluded.jobs, "
             "checks_passed = excluded.checks_passed, checks_failed = excluded.checks_failed, "
             "streak = excluded.streak, window_start_ms = excluded.window_start_ms, "
             "window_failures = excluded.window_failures, last_result = excluded.last_result, "
             "last_check_ms = excluded.last_check_ms, untrusted = excluded.untrusted, "
             "untrusted_ms = excluded.untrusted_ms, served_tokens = excluded.served_tokens, "
             "check_tokens = excluded.check_tokens",
             {n.node_id, n.jobs, n.checks_passed, n.checks_failed, n.streak, n.window_start_ms,
              n.window_failures, n.last_result, n.last_check_ms, int64_t{n.untrusted ? 1 : 0},
              n.untrusted_ms, n.served_tokens, n.check_tokens})
      .status();
}

StatusOr<std::string> SqlStore::Setting(std::string_view name, std::string_view initial) {
  const std::string op = StrCat("setting ", Quoted(name));
  if (name.empty()) return InvalidArgumentError("store: ", op, ": the name is empty");
  LOOM_RETURN_IF_ERROR(Run(op,
                           "INSERT INTO hub_settings (name, value) VALUES ($1, $2) "
                           "ON CONFLICT (name) DO NOTHING",
                           {name, initial})
                           .status());
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op, "SELECT value FROM hub_settings WHERE name = $1", {name}));
  if (r.rows.empty()) return DataLossError("store: ", op, ": not there after it was written");
  RowReader row(r.rows[0]);
  std::string value = row.Text(0);
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  return value;
}

}  // namespace loom::network::store
