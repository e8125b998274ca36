// `loom hub account credit|show` and `loom hub ledger check`: the ledger (network/store/store.h,
// "Ledger"; network/ledger/credits.h), read and written on the hub's store directly, like the
// other account commands (SQLite in WAL mode lets them run beside the hub).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/base/clock.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/cluster/launch_plan.h"
#include "loom/network/ledger/credits.h"
#include "loom/network/store/store.h"

namespace loom::cli {
namespace {

using json = nlohmann::json;
namespace ledger = network::ledger;
namespace store = network::store;

json TxJson(const store::LedgerTx& t) {
  json lines = json::array();
  for (const store::LedgerLine& l : t.lines) {
    lines.push_back(json{{"book", l.book}, {"amount", l.amount}, {"attempt_id", l.attempt_id}});
  }
  return json{{"id", t.id},       {"kind", t.kind}, {"ref", t.ref},
              {"at_ms", t.at_ms}, {"memo", t.memo}, {"lines", lines}};
}

struct LedgerFlags {
  std::string db = "loom-hub.db";
  std::string name;
  std::string amount;
  std::string memo;
  int64_t lines = 20;
  bool json = false;
};

void AddDb(CLI::App* c, std::string* db) {
  c->add_option("--db", *db, "the hub's store: a SQLite file or postgresql://...")
      ->capture_default_str();
}

int Credit(const LedgerFlags& f) {
  auto amount = ledger::ParseCredits(f.amount);
  if (!amount.ok()) return Fail("hub", amount.status());
  if (*amount == 0) return Fail("hub", InvalidArgumentError("the amount must be more than 0"));
  auto s = store::OpenStore(f.db);
  if (!s.ok()) return Fail("hub", s.status());
  auto account = (*s)->FindAccount(f.name);
  if (!account.ok()) return Fail("hub", account.status());
  auto random = cluster::RandomHex(8);
  if (!random.ok()) return Fail("hub", random.status());
  store::LedgerTx grant;
  grant.kind = "grant";
  grant.ref = "grant-" + *random;
  grant.at_ms = base::UnixMillis();
  grant.memo = f.memo.empty() ? "credited by an operator of the hub" : f.memo;
  grant.lines = {{"issued", -*amount, ""}, {ledger::ConsumerBook(account->id), *amount, ""}};
  auto id = (*s)->Post(grant);
  if (!id.ok()) return Fail("hub", id.status());
  auto balance = (*s)->Balance(ledger::ConsumerBook(account->id));
  if (!balance.ok()) return Fail("hub", balance.status());
  std::printf("credited %s to %s (transaction %lld); balance %s\n",
              ledger::FormatCredits(*amount).c_str(), account->name.c_str(),
              static_cast<long long>(*id), ledger::FormatCredits(*balance).c_str());
  return 0;
}

int Show(const LedgerFlags& f) {
  auto s = store::OpenStore(f.db);
  if (!s.ok()) return Fail("hub", s.status());
  auto account = (*s)->FindAccount(f.name);
  if (!account.ok()) return Fail("hub", account.status());
  const std::string available = ledger::ConsumerBook(account->id);
  const std::string held = ledger::HeldBook(account->id);
  auto a = (*s)->Balance(available);
  auto h = (*s)->Balance(held);
  if (!a.ok()) return Fail("hub", a.status());
  if (!h.ok()) return Fail("hub", h.status());
  auto history = (*s)->BookHistory(available, f.lines);
  if (!history.ok()) return Fail("hub", history.status());
  auto holds = (*s)->BookHistory(held, f.lines);
  if (!holds.ok()) return Fail("hub", holds.status());
  if (f.json) {
    json lines = json::array(), hold_lines = json::array();
    for (const auto& t : *history) lines.push_back(TxJson(t));
    for (const auto& t : *holds) hold_lines.push_back(TxJson(t));
    std::printf("%s\n", json{{"account", account->name},
                             {"account_id", account->id},
                             {"available", *a},
                             {"held", *h},
                             {"transactions", lines},
                             {"holds", hold_lines}}
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("account %s (id %lld): %s credits available, %s held for running requests\n",
              account->name.c_str(), static_cast<long long>(account->id),
              ledger::FormatCredits(*a).c_str(), ledger::FormatCredits(*h).c_str());
  for (const store::LedgerTx& t : *history) {
    int64_t change = 0;
    for (const store::LedgerLine& l : t.lines) change += l.book == available ? l.amount : 0;
    char when[32] = "";
    const std::time_t secs = static_cast<std::time_t>(t.at_ms / 1000);
    std::tm tm{};
    if (gmtime_r(&secs, &tm)) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    std::printf("  %s  %-7s %-30s %15s  %s\n", when, t.kind.c_str(), t.ref.c_str(),
                ledger::FormatCredits(change).c_str(), t.memo.c_str());
  }
  return 0;
}

// Any book, e.g. an operator's pending:<node id> and available:<node id>.
int ShowBook(const LedgerFlags& f) {
  auto s = store::OpenStore(f.db);
  if (!s.ok()) return Fail("hub", s.status());
  auto balance = (*s)->Balance(f.name);
  if (!balance.ok()) return Fail("hub", balance.status());
  auto history = (*s)->BookHistory(f.name, f.lines);
  if (!history.ok()) return Fail("hub", history.status());
  if (f.json) {
    json lines = json::array();
    for (const auto& t : *history) lines.push_back(TxJson(t));
    std::printf(
        "%s\n",
        json{{"book", f.name}, {"balance", *balance}, {"transactions", lines}}.dump().c_str());
    return 0;
  }
  std::printf("%s: %s credits\n", f.name.c_str(), ledger::FormatCredits(*balance).c_str());
  for (const store::LedgerTx& t : *history) {
    int64_t change = 0;
    std::string attempt;
    for (const store::LedgerLine& l : t.lines) {
      if (l.book != f.name) continue;
      change += l.amount;
      if (!l.attempt_id.empty()) attempt = l.attempt_id;
    }
    std::printf("  %-7s %-30s %15s  %s\n", t.kind.c_str(),
                (attempt.empty() ? t.ref : attempt).c_str(), ledger::FormatCredits(change).c_str(),
                t.memo.c_str());
  }
  return 0;
}

int Check(const LedgerFlags& f) {
  auto s = store::OpenStore(f.db);
  if (!s.ok()) return Fail("hub", s.status());
  auto problems = (*s)->CheckLedger();
  if (!problems.ok()) return Fail("hub", problems.status());
  auto issued = (*s)->Balance("issued");
  auto fee = (*s)->Balance("fee");
  if (!issued.ok()) return Fail("hub", issued.status());
  if (!fee.ok()) return Fail("hub", fee.status());
  if (f.json) {
    std::printf("%s\n", json{{"sound", problems->empty()},
                             {"problems", *problems},
                             {"issued", -*issued},
                             {"fee", *fee}}
                            .dump()
                            .c_str());
    return problems->empty() ? 0 : 1;
  }
  for (const std::string& p : *problems) std::printf("problem: %s\n", p.c_str());
  std::printf("ledger %s: %s credits issued, %s earned by the network (fee)\n",
              problems->empty() ? "sound" : "BROKEN", ledger::FormatCredits(-*issued).c_str(),
              ledger::FormatCredits(*fee).c_str());
  return problems->empty() ? 0 : 1;
}

}  // namespace

void AddHubLedgerCommands(CLI::App& hub, CLI::App& account, Action* action) {
  auto f = std::make_shared<LedgerFlags>();
  CLI::App* credit = account.add_subcommand("credit", "Grant an account credits");
  credit->add_option("name", f->name, "account name")->required();
  credit->add_option("credits", f->amount, "how many, e.g. 10 or 2.5 (6 decimals at most)")
      ->required();
  credit->add_option("--memo", f->memo, "why, kept with the transaction");
  AddDb(credit, &f->db);
  credit->callback([f, action] { *action = [f] { return Credit(*f); }; });

  CLI::App* show =
      account.add_subcommand("show", "An account's balances and the lines behind them");
  show->add_option("name", f->name, "account name")->required();
  show->add_option("--lines", f->lines, "latest transactions shown")->capture_default_str();
  show->add_flag("--json", f->json, "one JSON object");
  AddDb(show, &f->db);
  show->callback([f, action] { *action = [f] { return Show(*f); }; });

  CLI::App* book =
      hub.add_subcommand("ledger", "The hub's ledger of credits")->require_subcommand(1);
  CLI::App* book_show = book->add_subcommand(
      "show", "One book: consumer:ID, held:ID, pending:NODE, available:NODE, fee or issued");
  book_show->add_option("book", f->name, "the book's name")->required();
  book_show->add_option("--lines", f->lines, "latest transactions shown")->capture_default_str();
  book_show->add_flag("--json", f->json, "one JSON object");
  AddDb(book_show, &f->db);
  book_show->callback([f, action] { *action = [f] { return ShowBook(*f); }; });
  CLI::App* check = book->add_subcommand(
      "check", "Verify every invariant (zero-sum transactions, balances, holds, payments)");
  check->add_flag("--json", f->json, "one JSON object");
  AddDb(check, &f->db);
  check->callback([f, action] { *action = [f] { return Check(*f); }; });
}

}  // namespace loom::cli
