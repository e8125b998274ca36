// `loom pull`: downloads the files a model needs from a Hugging Face-style hub into the model cache
// (layout in loom/model/model_cache.h).
//
// One pull: ask the hub which commit the revision is and what files it has (with sizes and hashes);
// choose the model's files (SelectModelFiles); fetch each one not yet in the cache from
// {endpoint}/{repo}/resolve/{commit}/{path} (the hub redirects large files to a CDN) into
// blobs/HASH.part, resuming a partial file with an HTTP Range request and retrying a dropped
// connection; check its size and hash; rename it to blobs/HASH; then link the snapshot and record
// refs/REVISION.  An interrupted or failed pull leaves only .part files and complete blobs: never a
// truncated file under a final name, and a name resolves only after its pull completed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/fetch/http_client.h"
#include "loom/fetch/progress.h"

namespace loom::fetch {

struct PullOptions {
  std::string repo_id;               // "ORG/NAME"
  std::string revision = "main";     // a branch, tag or commit
  std::vector<std::string> include;  // globs choosing the weight files (see SelectModelFiles)
  std::string cache_dir;             // the cache directory that gets models--ORG--NAME
  std::string endpoint = "https://huggingface.co";
  std::string token;  // a Hub access token; "" to ask anonymously
  HttpOptions http;
  int max_attempts = 5;           // per file; each retry resumes where the last one stopped
  int64_t retry_delay_ms = 1000;  // before the first retry; doubles each time, at most 30 s
};

// Defaults from the environment: endpoint $HF_ENDPOINT, token $HF_TOKEN, cache
// model::DefaultCacheDir().
PullOptions PullOptionsFromEnvironment();

struct PulledFile {
  std::string path;  // in the repository
  int64_t size = 0;
  bool downloaded = false;  // false: it was already in the cache
};

struct PullResult {
  std::string repo_id;
  std::string commit;
  std::string snapshot_dir;
  std::string model_path;  // what -m opens: the snapshot, or its only .gguf file
  std::string note;        // why model_path is the snapshot although -m ORG/NAME will not open it
  std::vector<PulledFile> files;
  int64_t bytes_downloaded = 0;
};

// Errors name the repository, the file and the cause: Unavailable (the hub cannot be reached; a
// transfer that kept failing, with where its partial file is), PermissionDenied (gated or private:
// the message says what to do about HF_TOKEN), NotFound (repository, revision or file),
// DataLoss (a size or hash that does not match what the hub reported; the bad file is discarded).
StatusOr<PullResult> Pull(const PullOptions& options, TransferProgress& progress);

}  // namespace loom::fetch
