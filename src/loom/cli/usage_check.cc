#include "loom/cli/usage_check.h"

#include <CLI/CLI.hpp>

#include <algorithm>

namespace loom::cli {
namespace {

std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// "loom hub key" for a nested command.
std::string Path(const CLI::App* app) {
  std::string path = app->get_name();
  for (const CLI::App* p = app->get_parent(); p != nullptr; p = p->get_parent()) {
    path = p->get_name() + " " + path;
  }
  return path;
}

bool LooksLikeNumber(std::string_view s) {
  return s.size() >= 2 && s[0] == '-' &&
         (std::isdigit(static_cast<unsigned char>(s[1])) != 0 || s[1] == '.');
}

std::string UnknownCommand(const CLI::App& app, const std::string& word) {
  const std::vector<std::string> names = CommandNames(app);
  std::string msg = Path(&app) + ": unknown command '" + word + "'";
  if (const std::string near = NearestWord(word, names); !near.empty()) {
    msg += "; did you mean '" + near + "'?";
  }
  msg += "\ncommands: " + Join(names) + "\nRun `" + Path(&app) + " --help` for what each does.";
  return msg;
}

std::string UnknownFlag(const CLI::App& app, const std::string& flag) {
  std::string msg = Path(&app) + ": unknown option '" + flag + "'";
  if (const std::string near = NearestWord(flag, FlagNames(app)); !near.empty()) {
    msg += "; did you mean '" + near + "'?";
  }
  msg += "\nRun `" + Path(&app) + " --help` for its options.";
  return msg;
}

}  // namespace

int EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_distance = 1 << 30;
  for (const std::string& c : candidates) {
    const int d = EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // A one-letter flag ("-x") is no typo of another one-letter flag.
  const int allowed = word.size() < 3 ? 0 : std::max<int>(1, static_cast<int>(word.size()) / 3);
  if (!best.empty() && best_distance <= allowed) return best;
  std::string prefixed;
  int count = 0;
  for (const std::string& c : candidates) {
    if (word.size() >= 2 && c.size() > word.size() && c.compare(0, word.size(), word) == 0) {
      prefixed = c;
      ++count;
    }
  }
  return count == 1 ? prefixed : std::string();
}

std::optional<std::string> CheckUsage(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* current = &app;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--" || current->get_allow_extras() || current->get_prefix_command()) break;
    if (word.size() >= 2 && word[0] == '-' && !LooksLikeNumber(word)) {
      const bool long_form = word[1] == '-';
      // --name=value, -n5: the option's name alone.
      const std::string name = long_form ? word.substr(0, word.find('=')) : word.substr(0, 2);
      const CLI::Option* opt = nullptr;
      for (const CLI::App* a = current; a != nullptr && opt == nullptr; a = a->get_parent()) {
        opt = a->get_option_no_throw(name);
        if (!a->get_fallthrough()) break;
      }
      if (opt == nullptr) {
        if (name == "--help" || name == "-h" || name == "--help-all") return std::nullopt;
        return UnknownFlag(*current, name);
      }
      const bool value_attached = long_form ? word.find('=') != std::string::npos : word.size() > 2;
      if (!value_attached && opt->get_items_expected_min() > 0) ++i;  // its value
      continue;
    }
    const std::vector<const CLI::App*> subs =
        current->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) continue;  // a positional argument
    const auto it = std::find_if(subs.begin(), subs.end(),
                                 [&](const CLI::App* s) { return s->check_name(word); });
    if (it != subs.end()) {
      current = *it;
      continue;
    }
    const bool has_positionals =
        !current->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
    if (!has_positionals) return UnknownCommand(*current, word);
  }
  return std::nullopt;
}

}  // namespace loom::cli
