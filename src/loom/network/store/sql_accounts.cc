// Operators (store.h, "Operators"): the account an enrolment token gives the node it enrols, the
// nodes an account owns, and what each node earned, read from the ledger, in the SQL both engines
// share.
#include "loom/network/store/sql_store.h"

namespace loom::network::store {

StatusOr<int64_t> SqlStore::EnrollTokenAccount(std::string_view token_hash) {
  constexpr std::string_view op = "account of an enrolment token";
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT account_id FROM enroll_tokens WHERE token_hash = $1", {token_hash}));
  if (r.rows.empty()) return NotFoundError("store: ", op, ": no such token");
  RowReader row(r.rows[0]);
  const int64_t account_id = row.Int(0);
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  return account_id;
}

StatusOr<Account> SqlStore::FindAccountById(int64_t account_id) {
  const std::string op = StrCat("find account ", account_id);
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT id, name, created_ms FROM accounts WHERE id = $1", {account_id}));
  if (r.rows.empty()) return NotFoundError("store: ", op, ": no such account");
  RowReader row(r.rows[0]);
  Account a{row.Int(0), row.Text(1), row.Int(2)};
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  return a;
}

StatusOr<std::vector<NodeRecord>> SqlStore::NodesOfAccount(int64_t account_id) {
  const std::string op = StrCat("nodes of account ", account_id);
  LOOM_ASSIGN_OR_RETURN(SqlResult r, Run(op,
                                         "SELECT " LOOM_NODE_COLUMNS
                                         " FROM nodes WHERE account_id = $1 ORDER BY node_id",
                                         {account_id}));
  return DecodeAll<NodeRecord>(op, r, DecodeNode);
}

Status SqlStore::AssignNode(std::string_view node_id, int64_t account_id) {
  const std::string op = StrCat("assign node ", Quoted(node_id), " to account ", account_id);
  if (account_id != 0) {
    Status found = FindAccountById(account_id).status();
    if (!found.ok()) return found.WithContext(StrCat("store: ", op));
  }
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op, "UPDATE nodes SET account_id = $2 WHERE node_id = $1",
                            {node_id, account_id}));
  if (r.affected == 0) return NotFoundError("store: ", op, ": no such node");
  return OkStatus();
}

StatusOr<std::vector<Store::NodeEarning>> SqlStore::NodeEarnings(std::string_view node_id,
                                                                 int64_t limit) {
  const std::string op = StrCat("earnings of node ", Quoted(node_id));
  if (limit <= 0) return InvalidArgumentError("store: ", op, ": the limit must be positive");
  const std::string pending = StrCat("pending:", node_id);
  const std::string available = StrCat("available:", node_id);
  // Releases only move credit from one of these books to the other: left out, the rest sums to
  // both balances.  The attempt's tokens and its job's model come from the jobs it paid.
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op,
          "SELECT t.id, t.kind, t.ref, l.attempt_id, COALESCE(j.model, ''), "
          "COALESCE(a.tokens, 0), l.amount, l.book, t.at_ms, t.memo "
          "FROM ledger_lines l JOIN ledger_tx t ON t.id = l.tx_id "
          "LEFT JOIN attempts a ON l.attempt_id != '' AND a.attempt_id = l.attempt_id "
          "LEFT JOIN jobs j ON j.job_id = a.job_id "
          "WHERE l.book IN ($1, $2) AND t.kind != 'release' "
          "ORDER BY l.tx_id DESC, l.id DESC LIMIT $3",
          {pending, available, limit}));
  std::vector<NodeEarning> out;
  out.reserve(r.rows.size());
  for (const auto& row : r.rows) {
    RowReader rr(row);
    NodeEarning e;
    e.tx_id = rr.Int(0);
    e.kind = rr.Text(1);
    e.ref = rr.Text(2);
    e.attempt_id = rr.Text(3);
    e.model = rr.Text(4);
    e.tokens = rr.Int(5);
    e.amount = rr.Int(6);
    e.book = rr.Text(7);
    e.at_ms = rr.Int(8);
    e.memo = rr.Text(9);
    if (!rr.status().ok()) return rr.status().WithContext(StrCat("store: ", op));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace loom::network::store
