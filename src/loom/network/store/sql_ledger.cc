// The ledger half of SqlStore (store.h, "Ledger"): transactions, lines and running balances in
// three tables (schema.cc, migrations 2 and 3), written in the caller's transaction or one of
// their own.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loom/network/store/sql_store.h"

namespace loom::network::store {
namespace {

bool IsDigits(std::string_view s) {
  return !s.empty() && s.size() <= 19 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Node ids as the network protocol allows them (frames.h): 1-128 bytes of [A-Za-z0-9._:/@+-].
bool IsNodeId(std::string_view s) {
  return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("._:/@+-").find(c) != std::string_view::npos;
  });
}

// Whether `book` names a ledger book, and whether its balance may go below zero.
bool KnownBook(std::string_view book, bool* may_go_negative) {
  *may_go_negative = false;
  if (book == "fee") return true;
  if (book == "issued") {
    *may_go_negative = true;
    return true;
  }
  const size_t colon = book.find(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view kind = book.substr(0, colon), owner = book.substr(colon + 1);
  if (kind == "consumer" || kind == "held") return IsDigits(owner);
  if (kind == "pending" || kind == "available") return IsNodeId(owner);
  return false;
}

bool KnownKind(std::string_view kind) {
  return kind == "grant" || kind == "reserve" || kind == "settle" || kind == "release" ||
         kind == "void" || kind == "forfeit";
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

Status ValidateLedgerTx(const LedgerTx& tx) {
  const std::string what = StrCat("ledger transaction ", Quoted(tx.kind), " ", Quoted(tx.ref));
  if (!KnownKind(tx.kind)) return InvalidArgumentError(what, ": unknown kind");
  if (tx.ref.empty() || tx.ref.size() > 256) return InvalidArgumentError(what, ": bad ref");
  if (tx.lines.empty() || tx.lines.size() > kMaxLedgerLines) {
    return InvalidArgumentError(what, ": ", tx.lines.size(), " lines (1 to ", kMaxLedgerLines,
                                " allowed)");
  }
  int64_t sum = 0;
  std::set<std::string> paid;
  for (const LedgerLine& l : tx.lines) {
    bool negative_ok = false;
    if (!KnownBook(l.book, &negative_ok)) {
      return InvalidArgumentError(what, ": unknown book ", Quoted(l.book));
    }
    if (l.amount > kMaxLedgerAmount || l.amount < -kMaxLedgerAmount) {
      return InvalidArgumentError(what, ": amount ", l.amount, " beyond 2^53");
    }
    if (l.attempt_id.size() > 256) return InvalidArgumentError(what, ": attempt id too long");
    if (StartsWith(l.book, "pending:") && l.amount > 0 && !l.attempt_id.empty() &&
        !paid.insert(l.attempt_id).second) {
      return InvalidArgumentError(what, ": attempt ", Quoted(l.attempt_id), " paid twice");
    }
    sum += l.amount;  // |amount| <= 2^53 and at most 1024 lines: no overflow
  }
  if (sum != 0) return InvalidArgumentError(what, ": the lines sum to ", sum, ", not 0");
  return OkStatus();
}

StatusOr<int64_t> SqlStore::PostIn(const LedgerTx& tx) {
  LOOM_RETURN_IF_ERROR(ValidateLedgerTx(tx).WithContext("store"));
  const std::string op = StrCat("post ", tx.kind, " ", Quoted(tx.ref));
  // Not RETURNING: SQLite gathers a RETURNING statement's rows in a temporary b-tree, whose
  // allocation and release per transaction cost more than the index lookup below (and, with
  // glibc trimming the heap each time, a TLB flush on every core).
  LOOM_ASSIGN_OR_RETURN(SqlResult inserted,
                        Run(op,
                            "INSERT INTO ledger_tx (kind, ref, at_ms, memo) VALUES ($1, $2, $3, $4) "
                            "ON CONFLICT (kind, ref) DO NOTHING",
                            {tx.kind, tx.ref, tx.at_ms, tx.memo}));
  if (inserted.affected == 0) return FailedPreconditionError("store: ", op, ": already posted");
  LOOM_ASSIGN_OR_RETURN(
      SqlResult found,
      Run(op, "SELECT id FROM ledger_tx WHERE kind = $1 AND ref = $2", {tx.kind, tx.ref}));
  if (found.rows.size() != 1) return DataLossError("store: ", op, ": the posted row is missing");
  RowReader row(found.rows[0]);
  const int64_t id = row.Int(0);
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  // The lines in one INSERT (a statement per line count, each compiled once).
  std::string sql = "INSERT INTO ledger_lines (tx_id, book, amount, attempt_id) VALUES ";
  std::vector<SqlParam> params;
  params.reserve(tx.lines.size() * 4);
  std::map<std::string, int64_t> per_book;
  for (size_t i = 0; i < tx.lines.size(); ++i) {
    const LedgerLine& l = tx.lines[i];
    sql += StrCat(i ? ", " : "", "($", 4 * i + 1, ", $", 4 * i + 2, ", $", 4 * i + 3, ", $",
                  4 * i + 4, ")");
    params.insert(params.end(), {id, std::string_view(l.book), l.amount,
                                 std::string_view(l.attempt_id)});
    per_book[l.book] += l.amount;
  }
  LOOM_RETURN_IF_ERROR(Run(op, sql, params).status());
  // One statement per book: a credit adds (creating the book), a debit of a book that may not go
  // below zero changes it only if it covers the amount.
  for (const auto& [book, delta] : per_book) {
    bool negative_ok = false;
    KnownBook(book, &negative_ok);
    LOOM_ASSIGN_OR_RETURN(
        SqlResult updated,
        Run(op,
            delta >= 0 || negative_ok
                ? "INSERT INTO ledger_balances (book, balance) VALUES ($1, $2) ON CONFLICT (book) "
                  "DO UPDATE SET balance = ledger_balances.balance + excluded.balance"
                : "UPDATE ledger_balances SET balance = balance + $2 "
                  "WHERE book = $1 AND balance + $2 >= 0",
            {book, delta}));
    if (updated.affected != 1) {
      LOOM_ASSIGN_OR_RETURN(int64_t has, Balance(book));
      return ResourceExhaustedError("store: ", op, ": ", Quoted(book), " holds ", has,
                                    " micro-credits, ", -delta, " needed");
    }
  }
  return id;
}

StatusOr<int64_t> SqlStore::Post(const LedgerTx& tx) {
  const std::string op = StrCat("post ", tx.kind, " ", Quoted(tx.ref));
  Transaction t(*conn_);
  Status begun = t.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  LOOM_ASSIGN_OR_RETURN(int64_t id, PostIn(tx));
  Status committed = t.Commit();
  if (!committed.ok()) return committed.WithContext(StrCat("store: ", op));
  return id;
}

StatusOr<int64_t> SqlStore::Balance(std::string_view book) {
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(StrCat("balance of ", Quoted(book)),
                            "SELECT balance FROM ledger_balances WHERE book = $1", {book}));
  if (r.rows.empty()) return int64_t{0};
  RowReader row(r.rows[0]);
  const int64_t balance = row.Int(0);
  if (!row.status().ok()) return row.status().WithContext("store: balance");
  return balance;
}

StatusOr<std::vector<LedgerTx>> SqlStore::BookHistory(std::string_view book, int64_t limit) {
  const std::string op = StrCat("history of ", Quoted(book));
  if (limit <= 0) return InvalidArgumentError("store: ", op, ": the limit must be positive");
  LOOM_ASSIGN_OR_RETURN(
      SqlResult txs,
      Run(op,
          "SELECT id, kind, ref, at_ms, memo FROM ledger_tx WHERE id IN "
          "(SELECT tx_id FROM ledger_lines WHERE book = $1) ORDER BY id DESC LIMIT $2",
          {book, limit}));
  std::vector<LedgerTx> out;
  for (const auto& r : txs.rows) {
    RowReader row(r);
    LedgerTx t;
    t.id = row.Int(0);
    t.kind = row.Text(1);
    t.ref = row.Text(2);
    t.at_ms = row.Int(3);
    t.memo = row.Text(4);
    if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
    LOOM_ASSIGN_OR_RETURN(SqlResult lines,
                          Run(op,
                              "SELECT book, amount, attempt_id FROM ledger_lines WHERE tx_id = $1 "
                              "ORDER BY id",
                              {t.id}));
    for (const auto& lr : lines.rows) {
      RowReader line(lr);
      LedgerLine l{line.Text(0), line.Int(1), line.Text(2)};
      if (!line.status().ok()) return line.status().WithContext(StrCat("store: ", op));
      t.lines.push_back(std::move(l));
    }
    out.push_back(std::move(t));
  }
  return out;
}

StatusOr<Store::Released> SqlStore::ReleasePending(int64_t settled_by_ms, int64_t now_ms,
                                                   int64_t after_tx, int64_t limit) {
  constexpr std::string_view op = "release pending credits";
  if (limit <= 0 || limit > 1000000) {
    return InvalidArgumentError("store: ", op, ": the limit must be in 1..1000000");
  }
  Transaction t(*conn_);
  Status begun = t.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  // Every settlement after the cursor, with its pending credits (none: one row of NULLs).
  LOOM_ASSIGN_OR_RETURN(
      SqlResult rows, Run(op,
                          "SELECT t.id, t.at_ms, l.attempt_id, l.book, l.amount FROM ledger_tx t "
                          "LEFT JOIN ledger_lines l ON l.tx_id = t.id AND l.book LIKE 'pending:%' "
                          "AND l.amount > 0 AND l.attempt_id != '' "
                          "WHERE t.kind = 'settle' AND t.id > $1 ORDER BY t.id, l.id LIMIT $2",
                          {after_tx, limit + 1}));
  Released out;
  out.through_tx = after_tx;
  // One row more than the limit tells whether the last settlement was cut off: if so it is
  // handled next time, from its start.
  const bool cut = static_cast<int64_t>(rows.rows.size()) > limit;
  const std::string last_id = cut ? rows.rows.back()[0] : "";
  for (const auto& r : rows.rows) {
    RowReader row(r);
    const int64_t tx_id = row.Int(0), at_ms = row.Int(1);
    if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
    if (at_ms > settled_by_ms || (cut && r[0] == last_id)) break;  // in id order: the rest later
    out.through_tx = tx_id;
    const std::string attempt = row.Text(2), book = row.Text(3);
    if (attempt.empty()) continue;  // a settlement that paid no node
    const int64_t amount = row.Int(4);
    if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
    // What is still pending: nothing once released, voided (a failed check) or forfeited.
    LOOM_ASSIGN_OR_RETURN(const int64_t left, PendingOf(attempt, book));
    if (left <= 0) continue;
    LedgerTx release;
    release.kind = "release";
    release.ref = attempt;
    release.at_ms = now_ms;
    release.memo = "verification window passed";
    release.lines = {{book, -std::min(left, amount), attempt},
                     {"available:" + book.substr(std::string_view("pending:").size()),
                      std::min(left, amount), attempt}};
    LOOM_RETURN_IF_ERROR(PostIn(release).status());
    out.count += 1;
  }
  Status committed = t.Commit();
  if (!committed.ok()) return committed.WithContext(StrCat("store: ", op));
  return out;
}

StatusOr<int64_t> SqlStore::PendingOf(std::string_view attempt_id, std::string_view book) {
  LOOM_ASSIGN_OR_RETURN(SqlResult r, Run(StrCat("pending credit of ", Quoted(attempt_id)),
                                         "SELECT COALESCE(SUM(amount), 0) FROM ledger_lines "
                                         "WHERE attempt_id = $1 AND book = $2",
                                         {attempt_id, book}));
  if (r.rows.empty()) return int64_t{0};
  RowReader row(r.rows[0]);
  const int64_t left = row.Int(0);
  if (!row.status().ok()) return row.status().WithContext("store: pending credit");
  return left;
}

StatusOr<int64_t> SqlStore::VoidAttempt(std::string_view attempt_id, std::string_view to_book,
                                        std::string_view memo, int64_t now_ms) {
  const std::string op = StrCat("void attempt ", Quoted(attempt_id));
  if (to_book != "fee" && !StartsWith(to_book, "consumer:")) {
    return InvalidArgumentError("store: ", op, ": a void pays a consumer or the fee, not ",
                                Quoted(to_book));
  }
  Transaction t(*conn_);
  Status begun = t.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  LOOM_ASSIGN_OR_RETURN(SqlResult books,
                        Run(op,
                            "SELECT DISTINCT book FROM ledger_lines WHERE attempt_id = $1 "
                            "AND book LIKE 'pending:%' ORDER BY book",
                            {attempt_id}));
  LedgerTx v;
  v.kind = "void";
  v.ref = std::string(attempt_id);
  v.at_ms = now_ms;
  v.memo = std::string(memo).substr(0, 200);
  int64_t total = 0;
  for (const auto& r : books.rows) {
    RowReader row(r);
    const std::string book = row.Text(0);
    if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
    LOOM_ASSIGN_OR_RETURN(const int64_t left, PendingOf(attempt_id, book));
    if (left <= 0) continue;
    v.lines.push_back({book, -left, std::string(attempt_id)});
    total += left;
  }
  if (total == 0) return int64_t{0};  // (rolled back: nothing was written)
  v.lines.push_back({std::string(to_book), total, std::string(attempt_id)});
  LOOM_RETURN_IF_ERROR(PostIn(v).status());
  Status committed = t.Commit();
  if (!committed.ok()) return committed.WithContext(StrCat("store: ", op));
  return total;
}

StatusOr<int64_t> SqlStore::ForfeitPending(std::string_view node_id, std::string_view memo,
                                           int64_t now_ms) {
  const std::string op = StrCat("forfeit the pending credit of ", Quoted(node_id));
  const std::string book = StrCat("pending:", node_id);
  Transaction t(*conn_);
  Status begun = t.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  LOOM_ASSIGN_OR_RETURN(SqlResult rows,
                        Run(op,
                            "SELECT attempt_id, SUM(amount) FROM ledger_lines WHERE book = $1 "
                            "GROUP BY attempt_id HAVING SUM(amount) > 0 ORDER BY attempt_id",
                            {book}));
  int64_t total = 0;
  // At most kMaxLedgerLines - 1 attempts a transaction (one line goes to the fee).
  for (size_t first = 0, part = 0; first < rows.rows.size(); ++part) {
    LedgerTx f;
    f.kind = "forfeit";
    f.ref = StrCat(node_id, "@", now_ms, part ? StrCat("#", part) : "");
    f.at_ms = now_ms;
    f.memo = std::string(memo).substr(0, 200);
    int64_t sum = 0;
    for (; first < rows.rows.size() && f.lines.size() + 1 < kMaxLedgerLines; ++first) {
      RowReader row(rows.rows[first]);
      const std::string attempt = row.Text(0);
      const int64_t amount = row.Int(1);
      if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
      f.lines.push_back({book, -amount, attempt});
      sum += amount;
    }
    f.lines.push_back({"fee", sum, ""});
    LOOM_RETURN_IF_ERROR(PostIn(f).status());
    total += sum;
  }
  if (total == 0) return int64_t{0};
  Status committed = t.Commit();
  if (!committed.ok()) return committed.WithContext(StrCat("store: ", op));
  return total;
}

Status SqlStore::ReturnHoldsOfRunningJobs(std::string_view why, int64_t now_ms) {
  constexpr std::string_view op = "return the holds of unfinished jobs";
  LOOM_ASSIGN_OR_RETURN(SqlResult holds,
                        Run(op,
                            "SELECT t.ref, l.book, l.amount FROM ledger_tx t "
                            "JOIN ledger_lines l ON l.tx_id = t.id JOIN jobs j ON j.job_id = t.ref "
                            "WHERE t.kind = 'reserve' AND j.state = 'running' AND NOT EXISTS "
                            "(SELECT 1 FROM ledger_tx s WHERE s.kind = 'settle' AND s.ref = t.ref) "
                            "ORDER BY t.id, l.id",
                            {}));
  // Each reservation's lines, negated: the hold goes back where it came from.
  std::map<std::string, LedgerTx> settles;
  for (const auto& r : holds.rows) {
    RowReader row(r);
    const std::string job = row.Text(0), book = row.Text(1);
    const int64_t amount = row.Int(2);
    if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
    LedgerTx& s = settles[job];
    s.kind = "settle";
    s.ref = job;
    s.at_ms = now_ms;
    s.memo = std::string(why).substr(0, 200);
    s.lines.push_back({book, -amount, ""});
  }
  for (const auto& [job, s] : settles) LOOM_RETURN_IF_ERROR(PostIn(s).status());
  return OkStatus();
}

StatusOr<std::vector<std::string>> SqlStore::CheckLedger() {
  constexpr std::string_view op = "check the ledger";
  std::vector<std::string> problems;
  auto each = [&](std::string_view sql, auto describe) -> Status {
    LOOM_ASSIGN_OR_RETURN(SqlResult r, Run(op, sql, {}));
    for (const auto& row : r.rows) problems.push_back(describe(row));
    return OkStatus();
  };
  auto col = [](const std::vector<std::string>& row, size_t i) {
    return i < row.size() ? row[i] : std::string();
  };
  LOOM_RETURN_IF_ERROR(
      each("SELECT tx_id, SUM(amount) FROM ledger_lines GROUP BY tx_id HAVING SUM(amount) != 0",
           [&](const auto& r) {
             return StrCat("transaction ", col(r, 0), " sums to ", col(r, 1), ", not 0");
           }));
  LOOM_RETURN_IF_ERROR(each(
      "SELECT id, kind, ref FROM ledger_tx t WHERE NOT EXISTS "
      "(SELECT 1 FROM ledger_lines l WHERE l.tx_id = t.id)",
      [&](const auto& r) {
        return StrCat("transaction ", col(r, 0), " (", col(r, 1), " ", col(r, 2), ") has no lines");
      }));
  LOOM_RETURN_IF_ERROR(each(
      "SELECT b.book, b.balance, COALESCE(s.total, 0) FROM ledger_balances b LEFT JOIN "
      "(SELECT book, SUM(amount) AS total FROM ledger_lines GROUP BY book) s ON s.book = b.book "
      "WHERE b.balance != COALESCE(s.total, 0) "
      "UNION ALL SELECT s.book, 0, s.total FROM "
      "(SELECT book, SUM(amount) AS total FROM ledger_lines GROUP BY book) s "
      "WHERE NOT EXISTS (SELECT 1 FROM ledger_balances b WHERE b.book = s.book)",
      [&](const auto& r) {
        return StrCat("book ", col(r, 0), " has balance ", col(r, 1), " but its lines sum to ",
                      col(r, 2));
      }));
  LOOM_RETURN_IF_ERROR(
      each("SELECT l.attempt_id, COUNT(*) FROM ledger_lines l JOIN ledger_tx t ON t.id = l.tx_id "
           "WHERE t.kind = 'settle' AND l.book LIKE 'pending:%' AND l.amount > 0 "
           "AND l.attempt_id != '' GROUP BY l.attempt_id HAVING COUNT(*) > 1",
           [&](const auto& r) {
             return StrCat("attempt ", col(r, 0), " was paid ", col(r, 1), " times");
           }));
  LOOM_RETURN_IF_ERROR(each(
      "SELECT attempt_id, SUM(amount) FROM ledger_lines WHERE book LIKE 'pending:%' "
      "AND attempt_id != '' GROUP BY attempt_id HAVING SUM(amount) < 0",
      [&](const auto& r) {
        return StrCat("attempt ", col(r, 0), " was released beyond its credit (", col(r, 1), ")");
      }));
  LOOM_RETURN_IF_ERROR(each(
      "SELECT t.ref, SUM(l.amount) FROM ledger_tx t JOIN ledger_lines l ON l.tx_id = t.id "
      "WHERE t.kind IN ('reserve', 'settle') AND l.book LIKE 'held:%' "
      "AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = t.ref AND j.state = 'running') "
      "GROUP BY t.ref HAVING SUM(l.amount) != 0",
      [&](const auto& r) {
        return StrCat("job ", col(r, 0), " is not running but holds ", col(r, 1), " micro-credits");
      }));
  LOOM_RETURN_IF_ERROR(each(
      "SELECT t.id, t.kind, l.book, l.attempt_id FROM ledger_tx t "
      "JOIN ledger_lines l ON l.tx_id = t.id WHERE t.kind IN ('void', 'forfeit') AND l.amount < 0 "
      "AND (l.book NOT LIKE 'pending:%' OR l.attempt_id = '' "
      "OR (t.kind = 'void' AND l.attempt_id != t.ref)) ORDER BY t.id, l.id",
      [&](const auto& r) {
        return StrCat("transaction ", col(r, 0), " (", col(r, 1), ") takes from ", col(r, 2),
                      " for attempt '", col(r, 3), "', not from that attempt's pending credit");
      }));
  LOOM_RETURN_IF_ERROR(
      each("SELECT t.id, t.kind, l.book FROM ledger_tx t JOIN ledger_lines l ON l.tx_id = t.id "
           "WHERE t.kind IN ('void', 'forfeit') AND l.amount > 0 AND l.book != 'fee' "
           "AND l.book NOT LIKE 'consumer:%' ORDER BY t.id, l.id",
           [&](const auto& r) {
             return StrCat("transaction ", col(r, 0), " (", col(r, 1), ") pays ", col(r, 2),
                           ", not a consumer or the fee");
           }));
  LOOM_RETURN_IF_ERROR(
      each("SELECT r.node_id, b.balance FROM node_reputation r JOIN ledger_balances b "
           "ON b.book = 'pending:' || r.node_id WHERE r.untrusted != 0 AND b.balance != 0 "
           "ORDER BY r.node_id",
           [&](const auto& r) {
             return StrCat("node ", col(r, 0), " is untrusted but still has ", col(r, 1),
                           " micro-credits pending");
           }));
  LOOM_RETURN_IF_ERROR(
      each("SELECT t.ref, l.amount FROM ledger_tx t JOIN ledger_lines l ON l.tx_id = t.id "
           "WHERE t.kind = 'settle' AND l.book LIKE 'consumer:%' AND l.amount < 0",
           [&](const auto& r) {
             return StrCat("job ", col(r, 0), " was charged ", col(r, 1).substr(1),
                           " micro-credits beyond its reservation");
           }));
  return problems;
}

}  // namespace loom::network::store
