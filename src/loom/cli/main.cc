// loom: run large language models on one machine, a pod of machines, or a network of them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/usage_check.h"

int main(int argc, char** argv) {
  CLI::App app{
      "loom — run large language models on one machine or across several.\n"
      "Run `loom <command> --help` for the options of a command."};
  app.name("loom");
  app.require_subcommand(1);
  loom::cli::Action action;
  loom::cli::AddRunCommand(app, &action);
  loom::cli::AddTokenizeCommand(app, &action);
  loom::cli::AddInfoCommand(app, &action);
  loom::cli::AddSynthCommand(app, &action);
  loom::cli::AddBenchCommand(app, &action);
  loom::cli::AddLaunchCommand(app, &action);
  loom::cli::AddCommBenchCommand(app, &action);
  loom::cli::AddPlanCommand(app, &action);
  loom::cli::AddServeCommand(app, &action);
  loom::cli::AddConvertCommand(app, &action);
  loom::cli::AddPullCommand(app, &action);
  loom::cli::AddHubCommand(app, &action);
  loom::cli::AddNodeCommand(app, &action);
  loom::cli::AddClusterCommand(app, &action);
  loom::cli::AddDoctorCommand(app, &action);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "%s\n", app.help().c_str());
    return 2;
  }
  if (const auto error = loom::cli::CheckUsage(app, args)) {
    std::fprintf(stderr, "%s\n", error->c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return action ? action() : 2;
}
