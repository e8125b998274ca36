// Checks the words of a command line before CLI11 parses it, so that a mistyped command or flag
// is named in the error with the nearest known word ("loom: unknown command 'rnu'; did you mean
// 'run'?" and the list of commands) instead of CLI11's "A subcommand is required".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace loom::cli {

// Optimal string alignment distance: insertions, deletions, substitutions and transpositions of
// adjacent characters each cost 1 ("rnu" -> "run" is 1).
int EditDistance(std::string_view a, std::string_view b);

// The candidate nearest to `word` when it is near enough to be a likely typo (distance at most
// max(1, |word| / 3) for words of 3 or more characters, or `word` is a prefix of exactly one), else
// "".
std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates);

// The error message for the first unknown command or flag in `args` (argv without the program
// name), walking `app`'s subcommands as CLI11 would; nullopt when every word is known (CLI11 then
// reports anything else).
std::optional<std::string> CheckUsage(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace loom::cli
