#include "loom/fetch/hub_api.h"

#include <fnmatch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/fetch/progress.h"

namespace loom::fetch {

namespace {

using Json = nlohmann::json;

constexpr size_t kMaxPath = 1024;
constexpr size_t kMaxComponent = 255;
constexpr size_t kMaxSiblings = 1000000;
constexpr int64_t kMaxFileBytes = int64_t{1} << 50;  // 1 PiB: anything above is nonsense
constexpr size_t kMaxListed = 20;                    // files named in an error message

constexpr std::string_view kSmallFiles[] = {
    "config.json",           "generation_config.json", "tokenizer.json",
    "tokenizer_config.json", "tokenizer.model",        "special_tokens_map.json",
};

bool IsHex(std::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}

std::string LowerHex(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Shortens text from the network for an error message: printable ASCII only, at most 80 bytes.
std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

// A JSON number that is a non-negative integer no larger than kMaxFileBytes, or -1.
int64_t ByteCount(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto n = v.get<uint64_t>();
    return n <= static_cast<uint64_t>(kMaxFileBytes) ? static_cast<int64_t>(n) : -1;
  }
  if (v.is_number_integer()) {
    const auto n = v.get<int64_t>();
    return n >= 0 && n <= kMaxFileBytes ? n : -1;
  }
  return -1;
}

StatusOr<RepoFile> ParseSibling(const Json& s, size_t index, std::string_view source) {
  const auto where = [&] { return StrCat(source, ": siblings[", index, "]"); };
  if (!s.is_object()) return DataLossError(where(), " is not an object");
  const auto name = s.find("rfilename");
  if (name == s.end() || !name->is_string()) {
    return DataLossError(where(), ": no string \"rfilename\"");
  }
  RepoFile f;
  f.path = name->get<std::string>();
  if (const auto size = s.find("size"); size != s.end() && !size->is_null()) {
    f.size = ByteCount(*size);
    if (f.size < 0) {
      return DataLossError(where(), " '", Printable(f.path), "': bad \"size\" ",
                           Printable(size->dump()));
    }
  }
  if (const auto blob = s.find("blobId"); blob != s.end() && !blob->is_null()) {
    if (!blob->is_string() || !IsHex(blob->get_ref<const std::string&>(), 40)) {
      return DataLossError(where(), " '", Printable(f.path), "': \"blobId\" is not 40 hex digits");
    }
    f.blob_id = LowerHex(blob->get_ref<const std::string&>());
  }
  if (const auto lfs = s.find("lfs"); lfs != s.end() && !lfs->is_null()) {
    if (!lfs->is_object()) return DataLossError(where(), ": \"lfs\" is not an object");
    const auto sha = lfs->find("sha256");
    if (sha == lfs->end() || !sha->is_string() || !IsHex(sha->get_ref<const std::string&>(), 64)) {
      return DataLossError(where(), " '", Printable(f.path),
                           "': \"lfs.sha256\" is not 64 hex digits");
    }
    f.lfs_sha256 = LowerHex(sha->get_ref<const std::string&>());
    if (const auto lsize = lfs->find("size"); lsize != lfs->end()) {
      const int64_t n = ByteCount(*lsize);
      if (n < 0 || (f.size >= 0 && n != f.size)) {
        return DataLossError(where(), " '", Printable(f.path), "': \"lfs.size\" ",
                             Printable(lsize->dump()), " disagrees with \"size\" ", f.size);
      }
      f.size = n;
    }
  }
  return f;
}

bool MatchesAny(const std::string& path, std::span<const std::string> globs) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
    return ::fnmatch(g.c_str(), path.c_str(), 0) == 0;
  });
}

bool IsSmallModelFile(std::string_view path) {
  return std::find(std::begin(kSmallFiles), std::end(kSmallFiles), path) != std::end(kSmallFiles);
}

bool IsTopLevel(std::string_view path) { return path.find('/') == std::string_view::npos; }

std::string ListFiles(const std::vector<const RepoFile*>& files) {
  std::string out;
  for (size_t i = 0; i < files.size() && i < kMaxListed; ++i) {
    out += "\n  " + files[i]->path + " (" + FormatBytes(files[i]->size) + ")";
  }
  if (files.size() > kMaxListed) out += StrCat("\n  ... and ", files.size() - kMaxListed, " more");
  return out;
}

}  // namespace

bool IsSafeRepoPath(std::string_view path) {
  if (path.empty() || path.size() > kMaxPath) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || part.size() > kMaxComponent) return false;
    start = end + 1;
  }
  return std::none_of(path.begin(), path.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\';
  });
}

StatusOr<RepoInfo> ParseRepoInfo(std::string_view json, std::string_view source) {
  const Json root = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return DataLossError(source, ": the hub's answer is not valid JSON");
  if (!root.is_object()) return DataLossError(source, ": the hub's answer is not a JSON object");
  RepoInfo info;
  if (const auto id = root.find("id"); id != root.end() && id->is_string()) {
    info.id = id->get<std::string>();
  }
  const auto sha = root.find("sha");
  if (sha == root.end() || !sha->is_string() || !IsHex(sha->get_ref<const std::string&>(), 40)) {
    return DataLossError(source, ": no 40-hex commit in \"sha\"");
  }
  info.commit = LowerHex(sha->get_ref<const std::string&>());
  if (const auto gated = root.find("gated"); gated != root.end()) {
    if (gated->is_string()) {
      info.gated = Printable(gated->get_ref<const std::string&>());
      if (info.gated.empty()) info.gated = "yes";
    } else if (gated->is_boolean() && gated->get<bool>()) {
      info.gated = "yes";
    }
  }
  if (const auto priv = root.find("private"); priv != root.end() && priv->is_boolean()) {
    info.is_private = priv->get<bool>();
  }
  const auto siblings = root.find("siblings");
  if (siblings == root.end() || !siblings->is_array()) {
    return DataLossError(source, ": no \"siblings\" list of files");
  }
  if (siblings->size() > kMaxSiblings) {
    return DataLossError(source, ": ", siblings->size(), " files, more than ", kMaxSiblings);
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < siblings->size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(RepoFile f, ParseSibling((*siblings)[i], i, source));
    if (!IsSafeRepoPath(f.path)) {
      ++info.skipped_files;
      continue;
    }
    if (!seen.insert(f.path).second) {
      return DataLossError(source, ": file '", Printable(f.path), "' is listed twice");
    }
    info.files.push_back(std::move(f));
  }
  std::sort(info.files.begin(), info.files.end(),
            [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  return info;
}

StatusOr<std::vector<std::string>> ParseSafetensorsIndex(std::string_view json,
                                                         std::string_view source) {
  const Json root = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return DataLossError(source, ": not a JSON object");
  }
  const auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object()) {
    return DataLossError(source, ": no \"weight_map\" object");
  }
  std::set<std::string> shards;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string()) {
      return DataLossError(source, ": weight_map['", Printable(tensor), "'] is not a file name");
    }
    const std::string& name = file.get_ref<const std::string&>();
    if (!IsSafeRepoPath(name) || !EndsWith(name, ".safetensors")) {
      return DataLossError(source, ": weight_map['", Printable(tensor), "'] = '", Printable(name),
                           "' is not a safe *.safetensors path");
    }
    shards.insert(name);
  }
  if (shards.empty()) return DataLossError(source, ": \"weight_map\" names no files");
  return std::vector<std::string>(shards.begin(), shards.end());
}

StatusOr<std::vector<RepoFile>> SelectModelFiles(const RepoInfo& info,
                                                 std::span<const std::string> include) {
  std::vector<RepoFile> out;
  std::vector<const RepoFile*> ggufs;
  bool weights = false;
  for (const RepoFile& f : info.files) {
    if (EndsWith(f.path, ".gguf")) ggufs.push_back(&f);
    if (IsSmallModelFile(f.path)) {
      out.push_back(f);
    } else if (!include.empty()) {
      if (MatchesAny(f.path, include)) {
        out.push_back(f);
        weights = true;
      }
    } else if (IsTopLevel(f.path) &&
               (EndsWith(f.path, ".safetensors") || f.path == kSafetensorsIndex)) {
      out.push_back(f);
      weights = true;
    }
  }
  const std::string repo = info.id.empty() ? std::string("the repository") : info.id;
  for (const std::string& glob : include) {
    const bool any = std::any_of(info.files.begin(), info.files.end(), [&](const RepoFile& f) {
      return MatchesAny(f.path, {&glob, 1});
    });
    if (!any) {
      return NotFoundError(repo, ": --include '", glob, "' matches no file",
                           ggufs.empty() ? "" : "; its GGUF files:", ListFiles(ggufs));
    }
  }
  if (weights) return out;
  if (!ggufs.empty()) {
    return FailedPreconditionError(
        repo, " holds GGUF files; choose which to download with --include (e.g. --include '*",
        ggufs.size() == 1 ? ggufs[0]->path : std::string("Q4_K_M*"), "'):", ListFiles(ggufs));
  }
  std::vector<const RepoFile*> all;
  for (const RepoFile& f : info.files) all.push_back(&f);
  return NotFoundError(repo, ": no model weights loom reads (*.safetensors or *.gguf); its files:",
                       all.empty() ? std::string(" none") : ListFiles(all));
}

StatusOr<std::vector<RepoFile>> KeepIndexedShards(std::vector<RepoFile> selected,
                                                  const RepoInfo& info,
                                                  std::span<const std::string> shards) {
  std::vector<RepoFile> out;
  for (RepoFile& f : selected) {
    const bool is_shard = EndsWith(f.path, ".safetensors");
    if (!is_shard || std::binary_search(shards.begin(), shards.end(), f.path)) {
      out.push_back(std::move(f));
    }
  }
  for (const std::string& shard : shards) {
    const auto in_repo = std::find_if(info.files.begin(), info.files.end(),
                                      [&](const RepoFile& f) { return f.path == shard; });
    if (in_repo == info.files.end()) {
      return DataLossError(kSafetensorsIndex, " names shard '", Printable(shard),
                           "', which the repository does not have");
    }
    const bool have =
        std::any_of(out.begin(), out.end(), [&](const RepoFile& f) { return f.path == shard; });
    if (!have) out.push_back(*in_repo);
  }
  std::sort(out.begin(), out.end(),
            [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  return out;
}

}  // namespace loom::fetch
