// Fuzzes what `loom pull` parses from a hub: the model-info JSON (ParseRepoInfo, then the file
// selection over whatever it accepted), model.safetensors.index.json (ParseSafetensorsIndex), and
// the names -m and `loom pull` take (ParseModelName).  Input layout: byte 0 selects the parser
// (mod 3); the rest is the text.  Accepted results are checked against the parsers' promises.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "loom/fetch/hub_api.h"
#include "loom/model/model_cache.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

bool IsLowerHex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void FuzzRepoInfo(std::string_view text) {
  loom::StatusOr<loom::fetch::RepoInfo> info = loom::fetch::ParseRepoInfo(text, "fuzz");
  if (!info.ok()) {
    Check(!info.status().message().empty(), "an error says why");
    return;
  }
  Check(loom::model::IsCommitHash(info->commit), "commit is 40 lower-case hex");
  for (const loom::fetch::RepoFile& f : info->files) {
    Check(loom::fetch::IsSafeRepoPath(f.path), "file paths are safe");
    Check(f.size >= -1, "size is -1 or a byte count");
    Check(f.blob_id.empty() || IsLowerHex(f.blob_id, 40), "blob id is 40 hex");
    Check(f.lfs_sha256.empty() || IsLowerHex(f.lfs_sha256, 64), "lfs sha256 is 64 hex");
  }
  const std::vector<std::string> none;
  const std::vector<std::string> globs = {"*.gguf", "*Q4*"};
  for (const auto* include : {&none, &globs}) {
    loom::StatusOr<std::vector<loom::fetch::RepoFile>> files =
        loom::fetch::SelectModelFiles(*info, *include);
    if (!files.ok()) continue;
    Check(files->size() <= info->files.size(), "selection is a subset");
    const std::vector<std::string> shards = {"model-00001-of-00002.safetensors"};
    (void)loom::fetch::KeepIndexedShards(*files, *info, shards);
  }
}

void FuzzIndex(std::string_view text) {
  loom::StatusOr<std::vector<std::string>> shards =
      loom::fetch::ParseSafetensorsIndex(text, "fuzz");
  if (!shards.ok()) return;
  Check(!shards->empty(), "an accepted index names a shard");
  for (size_t i = 0; i < shards->size(); ++i) {
    Check(loom::fetch::IsSafeRepoPath((*shards)[i]), "shard paths are safe");
    Check(i == 0 || (*shards)[i - 1] < (*shards)[i], "shards are sorted and unique");
  }
}

void FuzzName(std::string_view text) {
  loom::StatusOr<loom::model::ModelName> name = loom::model::ParseModelName(text);
  if (!name.ok()) return;
  Check(loom::model::IsValidRepoId(name->repo_id), "repo id is valid");
  Check(loom::model::IsValidRevision(name->revision), "revision is valid");
  // Cache paths built from a valid name never climb out of the cache.
  const std::string ref = loom::model::RefPath("/c", name->repo_id, name->revision);
  Check(ref.find("/../") == std::string::npos && ref.rfind("/c/models--", 0) == 0,
        "ref path stays in the cache");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      FuzzRepoInfo(text);
      break;
    case 1:
      FuzzIndex(text);
      break;
    default:
      FuzzName(text);
      break;
  }
  return 0;
}
