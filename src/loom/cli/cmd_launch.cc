// TEMPORARY placeholder: replaced by the real `loom launch`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

void AddLaunchCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("launch", "start a group of ranks");
  sub->callback([action] {
    *action = [] {
      std::fprintf(stderr, "loom launch: not built yet\n");
      return 1;
    };
  });
}

}  // namespace loom::cli
