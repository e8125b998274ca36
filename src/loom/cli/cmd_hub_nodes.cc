// `loom hub node list|assign`: which operator account owns each enrolled node (store.h,
// "Operators"), read and written on the hub's store directly like the other account commands.
// A node enrolled with `loom hub token create --account` is owned from the start; `assign` gives
// a node enrolled before (or without an account) to one, or back to nobody.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/network/store/store.h"

namespace loom::cli {
namespace {

using json = nlohmann::json;
namespace store = network::store;

struct NodeFlags {
  std::string db = "loom-hub.db";
  std::string node_id;
  std::string account;
  bool nobody = false;
  bool json = false;
};

void AddDb(CLI::App* c, std::string* db) {
  c->add_option("--db", *db, "the hub's store: a SQLite file or postgresql://...")
      ->capture_default_str();
}

int Assign(const NodeFlags& f) {
  if (f.account.empty() == !f.nobody) {
    return Fail("hub", InvalidArgumentError("give --account NAME or --nobody (one of them)"));
  }
  auto s = store::OpenStore(f.db);
  if (!s.ok()) return Fail("hub", s.status());
  int64_t account_id = 0;
  if (!f.nobody) {
    auto a = (*s)->FindAccount(f.account);
    if (!a.ok()) return Fail("hub", a.status());
    account_id = a->id;
  }
  Status r = (*s)->AssignNode(f.node_id, account_id);
  if (!r.ok()) return Fail("hub", r);
  std::printf("node %s now belongs to %s\n", f.node_id.c_str(),
              f.nobody ? "no account" : ("account " + f.account).c_str());
  return 0;
}

int List(const NodeFlags& f) {
  auto s = store::OpenStore(f.db);
  if (!s.ok()) return Fail("hub", s.status());
  auto nodes = (*s)->ListNodes();
  if (!nodes.ok()) return Fail("hub", nodes.status());
  auto accounts = (*s)->ListAccounts();
  if (!accounts.ok()) return Fail("hub", accounts.status());
  auto name_of = [&](int64_t id) -> std::string {
    for (const store::Account& a : *accounts) {
      if (a.id == id) return a.name;
    }
    return "";
  };
  if (f.json) {
    json out = json::array();
    for (const store::NodeRecord& n : *nodes) {
      out.push_back(json{{"node_id", n.node_id},
                         {"name", n.name},
                         {"account_id", n.account_id},
                         {"account", n.account_id == 0 ? json(nullptr) : json(name_of(n.account_id))},
                         {"enrolled_ms", n.enrolled_ms},
                         {"last_seen_ms", n.last_seen_ms}});
    }
    std::printf("%s\n", json{{"nodes", out}}.dump().c_str());
    return 0;
  }
  for (const store::NodeRecord& n : *nodes) {
    const std::string owner = n.account_id == 0 ? "-" : name_of(n.account_id);
    std::printf("%-24s %-20s %s\n", n.node_id.c_str(), owner.c_str(), n.name.c_str());
  }
  return 0;
}

}  // namespace

void AddHubNodeCommands(CLI::App& hub, Action* action) {
  auto f = std::make_shared<NodeFlags>();
  CLI::App* node =
      hub.add_subcommand("node", "Enrolled nodes and the operator accounts that own them")
          ->require_subcommand(1);
  CLI::App* list = node->add_subcommand("list", "Every enrolled node with its account");
  list->add_flag("--json", f->json, "one JSON object");
  AddDb(list, &f->db);
  list->callback([f, action] { *action = [f] { return List(*f); }; });

  CLI::App* assign = node->add_subcommand(
      "assign", "Give a node to an operator account (its earnings show on that account's page)");
  assign->add_option("node", f->node_id, "the node's id (node-...)")->required();
  assign->add_option("--account", f->account, "the account that owns it from now on");
  assign->add_flag("--nobody", f->nobody, "take it from its account: it belongs to none");
  AddDb(assign, &f->db);
  assign->callback([f, action] { *action = [f] { return Assign(*f); }; });
}

}  // namespace loom::cli
