// TEMPORARY placeholder: replaced by the real `loom tokenize`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

void AddTokenizeCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of a text");
  sub->callback([action] {
    *action = [] {
      std::fprintf(stderr, "loom tokenize: not built yet\n");
      return 1;
    };
  });
}

}  // namespace loom::cli
