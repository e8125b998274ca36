// `loom pull ORG/NAME[@REVISION] [--revision R] [--include GLOB]... [--cache DIR] [--quiet]`:
// downloads a model from the Hugging Face Hub ($HF_ENDPOINT, token $HF_TOKEN) into the model cache
// (loom/model/model_cache.h), after which -m ORG/NAME finds it.  Progress on stderr; the path -m
// opens on stdout.  Exit 0 done, 1 failed (message on stderr; a partial download resumes when the
// same command runs again), 2 bad usage.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/fetch/hub_pull.h"
#include "loom/model/model_cache.h"

namespace loom::cli {
namespace {

struct PullFlags {
  std::string repo;
  std::string revision;
  std::vector<std::string> include;
  std::string cache;
  bool quiet = false;
};

int RunPull(const PullFlags& flags) {
  StatusOr<model::ModelName> name = model::ParseModelName(flags.repo);
  if (!name.ok()) {
    std::fprintf(stderr, "loom pull: %s\n", name.status().message().c_str());
    return 2;
  }
  if (name->revision_given && !flags.revision.empty()) {
    std::fprintf(stderr, "loom pull: give the revision either as %s@REVISION or --revision\n",
                 name->repo_id.c_str());
    return 2;
  }
  fetch::PullOptions options = fetch::PullOptionsFromEnvironment();
  options.repo_id = name->repo_id;
  options.revision = flags.revision.empty() ? name->revision : flags.revision;
  options.include = flags.include;
  if (!flags.cache.empty()) options.cache_dir = flags.cache;
  fetch::TransferProgress progress =
      flags.quiet ? fetch::TransferProgress(nullptr, false) : fetch::TransferProgress::ForStderr();
  StatusOr<fetch::PullResult> r = fetch::Pull(options, progress);
  if (!r.ok()) return Fail("pull", r.status());
  int64_t cached = 0;
  for (const fetch::PulledFile& f : r->files) cached += f.downloaded ? 0 : 1;
  if (!flags.quiet) {
    std::fprintf(stderr,
                 "loom pull: %s at commit %s: %zu files, %s downloaded, %lld already cached\n",
                 r->repo_id.c_str(), r->commit.substr(0, 12).c_str(), r->files.size(),
                 fetch::FormatBytes(r->bytes_downloaded).c_str(), static_cast<long long>(cached));
    if (!r->note.empty()) std::fprintf(stderr, "loom pull: note: %s\n", r->note.c_str());
  }
  std::printf("%s\n", r->model_path.c_str());
  return 0;
}

}  // namespace

void AddPullCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand(
      "pull",
      "download a model from the Hugging Face Hub into the model cache (then: -m ORG/NAME)");
  auto flags = std::make_shared<PullFlags>();
  sub->add_option("repo", flags->repo, "the repository, ORG/NAME or ORG/NAME@REVISION")->required();
  sub->add_option("--revision", flags->revision, "a branch, tag or commit (default: main)");
  sub->add_option("--include", flags->include,
                  "download the files matching this glob (repeatable; '*' matches '/' too) "
                  "instead of the default *.safetensors weights, e.g. --include '*Q4_K_M*.gguf'; "
                  "config and tokenizer files always come along");
  sub->add_option("--cache", flags->cache,
                  "the cache directory (default: $LOOM_CACHE, else ~/.cache/loom/hub)");
  sub->add_flag("-q,--quiet", flags->quiet, "no progress on stderr");
  sub->footer(
      "Environment: HF_TOKEN (an access token, for gated and private models), HF_ENDPOINT (the "
      "hub, default https://huggingface.co).");
  sub->callback([action, flags] { *action = [flags] { return RunPull(*flags); }; });
}

}  // namespace loom::cli
