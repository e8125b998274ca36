// What the Hugging Face Hub says about a repository, parsed and checked, and which of its files a
// model needs.  Pure functions over the Hub's JSON (no I/O): the fuzz target drives them.
//
// GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true answers
//   {"id": "ORG/NAME", "sha": "<40-hex commit>", "private": false, "gated": false | "auto" |
//   "manual",
//    "siblings": [{"rfilename": "config.json", "size": 651, "blobId": "<git sha1>"},
//                 {"rfilename": "model.safetensors", "size": 2471645608, "blobId": "...",
//                  "lfs": {"sha256": "<64 hex>", "size": 2471645608, "pointerSize": 135}}, ...]}
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::fetch {

// How a file's bytes are checked, and what the cache names its blob by.
enum class HashKind : uint8_t {
  kSha256,   // Git LFS files: sha256 of the bytes
  kGitSha1,  // small files: git's blob id, sha1("blob <size>\0" + bytes)
};

struct RepoFile {
  std::string path;        // relative, '/'-separated, checked by IsSafeRepoPath
  int64_t size = -1;       // bytes; -1 when the hub did not say
  std::string blob_id;     // git blob sha1, 40 lower-case hex; "" when not given
  std::string lfs_sha256;  // 64 lower-case hex for Git LFS files; "" otherwise

  bool has_hash() const { return !lfs_sha256.empty() || !blob_id.empty(); }
  HashKind hash_kind() const { return lfs_sha256.empty() ? HashKind::kGitSha1 : HashKind::kSha256; }
  const std::string& hash() const { return lfs_sha256.empty() ? blob_id : lfs_sha256; }
};

struct RepoInfo {
  std::string id;      // "ORG/NAME" as the hub spells it
  std::string commit;  // the commit the revision resolved to (40 lower-case hex)
  std::string gated;   // "" when not gated; else the hub's word ("auto", "manual")
  bool is_private = false;
  std::vector<RepoFile> files;  // sorted by path
  int64_t skipped_files = 0;    // siblings with paths unsafe to create (left out of `files`)
};

// A path safe to create under a snapshot directory: relative, '/'-separated, no empty, "." or ".."
// components, no backslash or control byte, at most 1024 bytes (255 per component).
bool IsSafeRepoPath(std::string_view path);

// Parses the model-info answer above.  `source` names it in errors (the URL).
StatusOr<RepoInfo> ParseRepoInfo(std::string_view json, std::string_view source);

// The shard files named by model.safetensors.index.json's "weight_map" (sorted, unique).
StatusOr<std::vector<std::string>> ParseSafetensorsIndex(std::string_view json,
                                                         std::string_view source);

inline constexpr std::string_view kSafetensorsIndex = "model.safetensors.index.json";

// The files of `info` a model needs.  Without `include`: the configuration and tokenizer files
// (config.json, generation_config.json, tokenizer.json, tokenizer_config.json, tokenizer.model,
// special_tokens_map.json) and the weights: top-level *.safetensors and their index.  With
// `include` (fnmatch globs, where '*' also matches '/'): those small files and every file a glob
// matches, in place of the default weights.  Errors: nothing to download, a GGUF repository without
// --include (the message lists its .gguf files), a glob that matches nothing.
StatusOr<std::vector<RepoFile>> SelectModelFiles(const RepoInfo& info,
                                                 std::span<const std::string> include);

// With the index's shard list known: keeps only the *.safetensors files the index names (repos
// often hold the same weights twice, e.g. Mistral's consolidated.safetensors), and checks that
// every shard it names is in the repository.
StatusOr<std::vector<RepoFile>> KeepIndexedShards(std::vector<RepoFile> selected,
                                                  const RepoInfo& info,
                                                  std::span<const std::string> shards);

}  // namespace loom::fetch
