// TEMPORARY placeholder: replaced by the real `loom comm-bench`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

void AddCommBenchCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("comm-bench", "measure collective latency and bandwidth");
  sub->callback([action] {
    *action = [] {
      std::fprintf(stderr, "loom comm-bench: not built yet\n");
      return 1;
    };
  });
}

}  // namespace loom::cli
