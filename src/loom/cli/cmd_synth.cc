// TEMPORARY placeholder: replaced by the real `loom synth`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

void AddSynthCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("synth", "write a model with random weights");
  sub->callback([action] {
    *action = [] {
      std::fprintf(stderr, "loom synth: not built yet\n");
      return 1;
    };
  });
}

}  // namespace loom::cli
