// TEMPORARY placeholder: replaced by the real `loom info`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

void AddInfoCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("info", "describe a model file");
  sub->callback([action] {
    *action = [] {
      std::fprintf(stderr, "loom info: not built yet\n");
      return 1;
    };
  });
}

}  // namespace loom::cli
