#include "loom/model/model_cache.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "loom/base/mapped_file.h"

namespace loom::model {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxRepoPart = 96;
constexpr size_t kMaxRevision = 255;
constexpr int64_t kMaxRefFileBytes = 1024;
constexpr int kMaxSnapshotEntries = 100000;  // a bound on the walk of one snapshot

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool IsValidRepoPart(std::string_view part) {
  if (part.empty() || part.size() > kMaxRepoPart) return false;
  if (!std::all_of(part.begin(), part.end(), IsNameChar)) return false;
  const char first = part.front(), last = part.back();
  if (first == '-' || first == '.' || last == '-' || last == '.') return false;
  return part.find("--") == std::string_view::npos && part.find("..") == std::string_view::npos;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string JoinDirs(std::span<const std::string> dirs) {
  if (dirs.empty()) return "no cache directory exists yet";
  std::string out;
  for (const std::string& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

bool IsValidRepoId(std::string_view repo_id) {
  const size_t slash = repo_id.find('/');
  if (slash == std::string_view::npos) return false;
  return IsValidRepoPart(repo_id.substr(0, slash)) && IsValidRepoPart(repo_id.substr(slash + 1));
}

bool IsValidRevision(std::string_view revision) {
  if (revision.empty() || revision.size() > kMaxRevision) return false;
  for (char c : revision) {
    if (!IsNameChar(c) && c != '/') return false;
  }
  if (revision.front() == '/' || revision.back() == '/') return false;
  if (revision.find("//") != std::string_view::npos) return false;
  if (revision.find("..") != std::string_view::npos) return false;
  // "." as a whole path component would name the directory itself.
  return revision != "." && revision.find("/./") == std::string_view::npos &&
         revision.rfind("./", 0) != 0 && !EndsWith(revision, "/.");
}

bool IsCommitHash(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

StatusOr<ModelName> ParseModelName(std::string_view text) {
  ModelName name;
  std::string_view repo = text;
  if (const size_t at = text.find('@'); at != std::string_view::npos) {
    repo = text.substr(0, at);
    name.revision = std::string(text.substr(at + 1));
    name.revision_given = true;
    if (!IsValidRevision(name.revision)) {
      return InvalidArgumentError("model name '", text, "': revision '", name.revision,
                                  "' is not a valid branch, tag or commit");
    }
  } else {
    name.revision = "main";
  }
  if (!IsValidRepoId(repo)) {
    return InvalidArgumentError(
        "model name '", text,
        "': expected ORG/NAME[@REVISION] (letters, digits, '-', '_', '.'; one '/')");
  }
  name.repo_id = std::string(repo);
  return name;
}

std::string DefaultCacheDir() {
  if (std::string dir = Env("LOOM_CACHE"); !dir.empty()) return dir;
  if (std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/loom/hub";
  if (std::string home = Env("HOME"); !home.empty()) return home + "/.cache/loom/hub";
  return {};
}

std::vector<std::string> CacheSearchPath() {
  std::vector<std::string> candidates;
  candidates.push_back(DefaultCacheDir());
  if (std::string hub = Env("HF_HUB_CACHE"); !hub.empty()) {
    candidates.push_back(hub);
  } else if (std::string hf_home = Env("HF_HOME"); !hf_home.empty()) {
    candidates.push_back(hf_home + "/hub");
  } else if (std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty()) {
    candidates.push_back(xdg + "/huggingface/hub");
  } else if (std::string home = Env("HOME"); !home.empty()) {
    candidates.push_back(home + "/.cache/huggingface/hub");
  }
  std::vector<std::string> dirs;
  for (std::string& c : candidates) {
    if (c.empty() || !IsDirectory(c)) continue;
    if (std::find(dirs.begin(), dirs.end(), c) == dirs.end()) dirs.push_back(std::move(c));
  }
  return dirs;
}

std::string RepoCacheDir(std::string_view cache_dir, std::string_view repo_id) {
  std::string folder = "models--";
  for (char c : repo_id) {
    if (c == '/') {
      folder += "--";
    } else {
      folder += c;
    }
  }
  return std::string(cache_dir) + "/" + folder;
}

std::string RefPath(std::string_view cache_dir, std::string_view repo_id,
                    std::string_view revision) {
  return RepoCacheDir(cache_dir, repo_id) + "/refs/" + std::string(revision);
}

std::string SnapshotDir(std::string_view cache_dir, std::string_view repo_id,
                        std::string_view commit) {
  return RepoCacheDir(cache_dir, repo_id) + "/snapshots/" + std::string(commit);
}

std::string BlobPath(std::string_view cache_dir, std::string_view repo_id, std::string_view hash) {
  return RepoCacheDir(cache_dir, repo_id) + "/blobs/" + std::string(hash);
}

StatusOr<std::string> ReadRef(std::string_view cache_dir, std::string_view repo_id,
                              std::string_view revision) {
  const std::string path = RefPath(cache_dir, repo_id, revision);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return NotFoundError(path, ": no such ref");
  if (size > static_cast<uintmax_t>(kMaxRefFileBytes)) {
    return DataLossError(path, ": a ref holds one commit hash, but the file has ", size, " bytes");
  }
  LOOM_ASSIGN_OR_RETURN(std::string text, base::ReadFileToString(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (!IsCommitHash(text)) {
    return DataLossError(path, ": expected a 40-digit commit hash, found '", text.substr(0, 64),
                         "'");
  }
  return text;
}

Status WriteRef(std::string_view cache_dir, std::string_view repo_id, std::string_view revision,
                std::string_view commit) {
  const std::string path = RefPath(cache_dir, repo_id, revision);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return UnavailableError(path, ": cannot create its directory: ", ec.message());
  return base::WriteFileAtomically(
      path, std::as_bytes(std::span<const char>(commit.data(), commit.size())));
}

StatusOr<std::string> ModelPathInSnapshot(const std::string& snapshot_dir) {
  std::error_code ec;
  fs::recursive_directory_iterator it(snapshot_dir, ec);
  if (ec) return NotFoundError(snapshot_dir, ": cannot list the snapshot: ", ec.message());
  bool hf_files = false;
  std::vector<std::string> ggufs;
  int entries = 0;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return UnavailableError(snapshot_dir, ": cannot list the snapshot: ", ec.message());
    if (++entries > kMaxSnapshotEntries) {
      return OutOfRangeError(snapshot_dir, ": more than ", kMaxSnapshotEntries, " files");
    }
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec)) continue;  // directories; dangling links of partial pulls
    const std::string name = it->path().filename().string();
    if (it.depth() == 0 && (name == "config.json" || EndsWith(name, ".safetensors"))) {
      hf_files = true;
    }
    if (EndsWith(name, ".gguf")) ggufs.push_back(it->path().string());
  }
  if (hf_files) return snapshot_dir;
  if (ggufs.size() == 1) return ggufs[0];
  if (ggufs.empty()) {
    return NotFoundError(snapshot_dir,
                         ": no model files in the snapshot (no config.json, *.safetensors or "
                         "*.gguf)");
  }
  std::sort(ggufs.begin(), ggufs.end());
  std::string list;
  for (const std::string& g : ggufs) list += "\n  " + g;
  return FailedPreconditionError(snapshot_dir, ": ", ggufs.size(),
                                 " GGUF files in the snapshot; pass one of them to -m:", list);
}

StatusOr<std::string> FindCachedModel(const ModelName& name,
                                      std::span<const std::string> cache_dirs) {
  std::string partial;  // why a cache that has the repository could not serve the revision
  for (const std::string& dir : cache_dirs) {
    if (!IsDirectory(RepoCacheDir(dir, name.repo_id))) continue;
    std::string commit;
    if (IsCommitHash(name.revision)) {
      commit = name.revision;
    } else {
      StatusOr<std::string> ref = ReadRef(dir, name.repo_id, name.revision);
      if (!ref.ok()) {
        if (ref.status().code() != StatusCode::kNotFound) return ref.status();
        partial = StrCat(" (", RepoCacheDir(dir, name.repo_id), " has no complete pull of '",
                         name.revision, "')");
        continue;
      }
      commit = *ref;
    }
    const std::string snapshot = SnapshotDir(dir, name.repo_id, commit);
    if (!IsDirectory(snapshot)) {
      partial = StrCat(" (", snapshot, " is missing)");
      continue;
    }
    return ModelPathInSnapshot(snapshot);
  }
  const std::string pull = name.revision_given
                               ? StrCat("loom pull ", name.repo_id, " --revision ", name.revision)
                               : StrCat("loom pull ", name.repo_id);
  return NotFoundError("model ", name.repo_id, "@", name.revision, " is not in the cache (",
                       JoinDirs(cache_dirs), ")", partial, "; download it with: ", pull);
}

StatusOr<std::string> ResolveModelPath(const std::string& text) {
  const std::vector<std::string> dirs = CacheSearchPath();
  return ResolveModelPath(text, dirs);
}

StatusOr<std::string> ResolveModelPath(const std::string& text,
                                       std::span<const std::string> cache_dirs) {
  if (text.empty()) return InvalidArgumentError("model: empty path or name");
  std::error_code ec;
  if (fs::exists(text, ec)) return text;
  StatusOr<ModelName> name = ParseModelName(text);
  if (!name.ok()) return NotFoundError(text, ": no such file or directory");
  StatusOr<std::string> found = FindCachedModel(*name, cache_dirs);
  if (!found.ok() && found.status().code() == StatusCode::kNotFound) {
    return NotFoundError(text, ": no such file or directory, and ", found.status().message());
  }
  return found;
}

}  // namespace loom::model
