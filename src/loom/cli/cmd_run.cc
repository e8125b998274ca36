// TEMPORARY placeholder: replaced by the real `loom run`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

void AddRunCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("run", "generate text from a model");
  sub->callback([action] {
    *action = [] {
      std::fprintf(stderr, "loom run: not built yet\n");
      return 1;
    };
  });
}

}  // namespace loom::cli
