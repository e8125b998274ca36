// The local model cache: `loom pull` fills it, every command that takes -m resolves names in it.
//
// The layout is huggingface_hub's, so each tool can read the other's cache:
//   CACHE/models--ORG--NAME/refs/REVISION          the commit REVISION (a branch or tag) named when
//                                                  it was last pulled completely (40 hex digits)
//   CACHE/models--ORG--NAME/blobs/HASH             a file's bytes, named by their sha256 (Git LFS
//                                                  files) or git blob sha1 (small files)
//   CACHE/models--ORG--NAME/blobs/HASH.part        a download in progress (resumable)
//   CACHE/models--ORG--NAME/snapshots/COMMIT/PATH  a relative symlink to ../../blobs/HASH
// Loom's cache is $LOOM_CACHE, else $XDG_CACHE_HOME/loom/hub, else $HOME/.cache/loom/hub.  Names
// are also looked up (read-only) in huggingface_hub's cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::model {

// "ORG/NAME" or "ORG/NAME@REVISION".
struct ModelName {
  std::string repo_id;   // "ORG/NAME"
  std::string revision;  // "main" unless given
  bool revision_given = false;
};

// A Hub repository id: two parts of letters, digits, '-', '_' and '.', each at most 96 bytes, not
// starting or ending with '-' or '.', without "--" or "..".
bool IsValidRepoId(std::string_view repo_id);
// A branch, tag or commit: letters, digits, '-', '_', '.', '/'; no "..", "//", leading or trailing
// '/'; at most 255 bytes (it names a file under refs/).
bool IsValidRevision(std::string_view revision);
// 40 lower-case hex digits.
bool IsCommitHash(std::string_view text);

// Parses a model name; errors say what is wrong with it.
StatusOr<ModelName> ParseModelName(std::string_view text);

// Loom's cache directory (see above); "" when neither $LOOM_CACHE, $XDG_CACHE_HOME nor $HOME is
// set.
std::string DefaultCacheDir();
// Where names are looked up, first match wins: loom's cache, then huggingface_hub's.  Only
// directories that exist are listed.
std::vector<std::string> CacheSearchPath();

// Paths inside a cache directory.  `repo_id`, `revision`, `commit` and `hash` must be valid (the
// functions above); callers validate what came from outside first.
std::string RepoCacheDir(std::string_view cache_dir, std::string_view repo_id);
std::string RefPath(std::string_view cache_dir, std::string_view repo_id,
                    std::string_view revision);
std::string SnapshotDir(std::string_view cache_dir, std::string_view repo_id,
                        std::string_view commit);
std::string BlobPath(std::string_view cache_dir, std::string_view repo_id, std::string_view hash);

// The commit refs/REVISION records; NotFound when there is none, DataLoss when it is not a commit.
StatusOr<std::string> ReadRef(std::string_view cache_dir, std::string_view repo_id,
                              std::string_view revision);
// Records `commit` as refs/REVISION (atomically).
Status WriteRef(std::string_view cache_dir, std::string_view repo_id, std::string_view revision,
                std::string_view commit);

// What -m should open inside a snapshot directory: the directory itself when it holds
// Hugging Face files (config.json or *.safetensors), else its only .gguf file.  Several .gguf
// files and no config: FailedPrecondition listing them; nothing usable: NotFound.
StatusOr<std::string> ModelPathInSnapshot(const std::string& snapshot_dir);

// Finds a cached model by name in `cache_dirs` (first match wins) and returns ModelPathInSnapshot
// of its snapshot.  NotFound, suggesting `loom pull`, when no cache holds it.
StatusOr<std::string> FindCachedModel(const ModelName& name,
                                      std::span<const std::string> cache_dirs);

// What -m accepts: an existing file or directory is returned as it is; otherwise a name
// "ORG/NAME[@REVISION]" pulled into a cache resolves to its model path; otherwise NotFound.
StatusOr<std::string> ResolveModelPath(const std::string& text);
StatusOr<std::string> ResolveModelPath(const std::string& text,
                                       std::span<const std::string> cache_dirs);

}  // namespace loom::model
