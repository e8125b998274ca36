// TEMPORARY placeholder: replaced by the real `loom bench`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

void AddBenchCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("bench", "measure prompt and generation speed");
  sub->callback([action] {
    *action = [] {
      std::fprintf(stderr, "loom bench: not built yet\n");
      return 1;
    };
  });
}

}  // namespace loom::cli
