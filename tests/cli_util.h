// Running the real `loom` binary from integration tests: a shell command with a hard time limit
// (a test fails rather than hangs), its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace loom::testing {

inline const std::string kLoom = std::string(LOOM_BINARY_DIR) + "/src/loom/cli/loom";

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out, err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline CommandResult RunShell(const std::string& command, int timeout_s = 120) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("loom_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string full = "timeout -k 5 " + std::to_string(timeout_s) + " " + command + " >" +
                           dir + "/out 2>" + dir + "/err";
  const int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(dir + "/out");
  r.err = Slurp(dir + "/err");
  std::filesystem::remove_all(dir);
  return r;
}

// Quotes `s` for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace loom::testing
