// The `loom` subcommands.  Each Add*Command registers one subcommand with its options on `app`;
// when that subcommand is chosen on the command line, its callback stores the work to do in
// *action, which main() runs after parsing (so that parse errors never start any work).
// An action returns the process exit code: 0 success, 1 failure (message on stderr), 2 bad usage.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace loom::cli {

using Action = std::function<int()>;

void AddRunCommand(CLI::App& app, Action* action);        // cmd_run.cc: generate text
void AddTokenizeCommand(CLI::App& app, Action* action);   // cmd_tokenize.cc: text -> token ids
void AddInfoCommand(CLI::App& app, Action* action);       // cmd_info.cc: describe a model file
void AddSynthCommand(CLI::App& app, Action* action);      // cmd_synth.cc: write a synthetic model
void AddBenchCommand(CLI::App& app, Action* action);      // cmd_bench.cc: tokens/s and roofline
void AddLaunchCommand(CLI::App& app, Action* action);     // cmd_launch.cc: start a process group
void AddCommBenchCommand(CLI::App& app, Action* action);  // cmd_comm_bench.cc: collective speeds
void AddPlanCommand(CLI::App& app, Action* action);       // cmd_plan.cc: parallel plans, predicted
void AddServeCommand(CLI::App& app, Action* action);      // cmd_serve.cc: OpenAI-compatible server
void AddConvertCommand(CLI::App& app, Action* action);    // cmd_convert.cc: GGUF / HF / MLX
void AddPullCommand(CLI::App& app, Action* action);       // cmd_pull.cc: download from the Hub
void AddHubCommand(CLI::App& app, Action* action);        // cmd_hub.cc: the network's coordinator
// cmd_hub_ledger.cc: `loom hub account credit|show`, `loom hub ledger check`.
void AddHubLedgerCommands(CLI::App& hub, CLI::App& account, Action* action);
void AddHubNodeCommands(CLI::App& hub, Action* action);  // cmd_hub_nodes.cc: nodes' accounts
void AddNodeCommand(CLI::App& app, Action* action);       // cmd_node.cc: lend this machine
void AddClusterCommand(CLI::App& app, Action* action);    // cmd_cluster.cc: self-forming pods
void AddDoctorCommand(CLI::App& app, Action* action);     // cmd_doctor.cc: facts and advice

}  // namespace loom::cli
