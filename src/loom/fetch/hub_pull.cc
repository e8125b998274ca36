#include "loom/fetch/hub_pull.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "loom/base/fd.h"
#include "loom/base/mapped_file.h"
#include "loom/fetch/content_hash.h"
#include "loom/fetch/hub_api.h"
#include "loom/model/model_cache.h"

namespace loom::fetch {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxApiBody = int64_t{64} << 20;  // the model-info JSON
constexpr int64_t kMaxErrorBody = int64_t{64} << 10;
constexpr int64_t kMaxRetryDelayMs = 30000;

std::string ErrnoText() { return std::strerror(errno); }

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Header values and bodies from the network, fit for one line of an error message.
std::string Printable(std::string_view s, size_t max = 200) {
  std::string out;
  for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : ' ');
  return out;
}

std::string Unquote(std::string s) {
  if (s.rfind("W/", 0) == 0) s.erase(0, 2);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

using base::Fd;

// An error for an HTTP answer that is not what was asked for.  `what` names the repository (and
// file); the text says what to do about tokens where that is the likely cause.
Status HubError(const HttpResult& r, const std::string& what, const PullOptions& o) {
  const HttpHead& head = r.final_head();
  const std::string code = Printable(head.Header("x-error-code"), 64);
  std::string detail = Printable(head.Header("x-error-message"));
  if (detail.empty()) detail = Printable(r.body);
  const std::string page = o.endpoint + "/" + o.repo_id;
  const std::string answer =
      StrCat("the hub answered HTTP ", head.status, code.empty() ? "" : " " + code,
             detail.empty() ? "" : " (" + detail + ")");
  const bool token = !o.token.empty();
  if (code == "GatedRepo") {
    return PermissionDeniedError(
        what, ": a gated model: ", answer, ". Accept its conditions at ", page,
        token ? " with the account HF_TOKEN belongs to (access may also await approval)"
              : " and set HF_TOKEN to an access token of that account",
        ".");
  }
  if (head.status == 401 || head.status == 403) {
    return PermissionDeniedError(
        what, ": ", answer, ". ",
        token ? "HF_TOKEN was sent: check that it is valid and that its account can read "
              : "The repository may be private or gated, or not exist: set HF_TOKEN to a token "
                "that can read ",
        page, ".");
  }
  if (head.status == 404) {
    if (code == "RevisionNotFound") {
      return NotFoundError(what, ": revision '", o.revision, "' not found: ", answer);
    }
    if (code == "EntryNotFound") return NotFoundError(what, ": file not found: ", answer);
    return NotFoundError(what, ": not found on ", o.endpoint, ": ", answer,
                         token ? "" : " (a private repository needs HF_TOKEN)");
  }
  if (head.status == 429 || head.status >= 500) {
    return UnavailableError(what, ": ", answer, "; try again later");
  }
  return UnavailableError(what, ": unexpected answer from ", head.url, ": ", answer);
}

bool IsRetryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

void Sleep(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

StatusOr<RepoInfo> FetchRepoInfo(HttpClient& client, const PullOptions& o) {
  const std::string url = o.endpoint + "/api/models/" + o.repo_id + "/revision/" +
                          UrlEncode(o.revision, /*keep_slash=*/false) + "?blobs=true";
  StatusOr<HttpResult> r = client.Get({url, o.token, -1}, nullptr, kMaxApiBody);
  if (!r.ok()) {
    if (!IsRetryable(r.status())) return r.status();
    std::string hint;
    if (StatusOr<std::string> commit = model::ReadRef(o.cache_dir, o.repo_id, o.revision);
        commit.ok()) {
      hint = StrCat(" (", o.repo_id, "@", o.revision, " is already in the cache at commit ",
                    commit->substr(0, 12), ": -m ", o.repo_id, " works offline)");
    }
    return Status(r.status().code(), StrCat(o.repo_id, ": cannot reach the hub at ", o.endpoint,
                                            ": check the network connection, or HF_ENDPOINT: ",
                                            r.status().message(), hint));
  }
  if (r->status() != 200) return HubError(*r, o.repo_id, o);
  return ParseRepoInfo(r->body, url);
}

// Receives one file's bytes into its .part file, hashing them.
class PartSink : public BodySink {
 public:
  PartSink(int fd, std::string part_path, int64_t expected, ContentHash& hash,
           TransferProgress& progress)
      : fd_(fd),
        part_path_(std::move(part_path)),
        expected_(expected),
        hash_(hash),
        progress_(progress) {}

  void set_offset(int64_t offset) { offset_ = offset; }
  int64_t offset() const { return offset_; }
  int64_t received() const { return received_; }  // bytes this process wrote

  Status Begin(const HttpHead& head) override {
    const std::string length = head.Header("content-length");
    if (head.status == 200) {
      if (offset_ > 0) {  // the server sends the whole file after all
        LOOM_RETURN_IF_ERROR(Truncate());
        progress_.Update(0);
      }
      if (!length.empty() && length != std::to_string(expected_)) {
        return DataLossError(head.url, ": sends ", Printable(length, 24),
                             " bytes, but the hub reported ", expected_);
      }
      return OkStatus();
    }
    if (head.status != 206) {
      return DataLossError(head.url, ": unexpected HTTP ", head.status, " for a download");
    }
    // "Content-Range: bytes START-END/TOTAL" must continue exactly where the file stops.
    const std::string range = head.Header("content-range");
    long long start = -1, end = -1, total = -1;
    if (std::sscanf(range.c_str(), "bytes %lld-%lld/%lld", &start, &end, &total) != 3 ||
        start != offset_ || end != expected_ - 1 || total != expected_) {
      return DataLossError(head.url, ": asked for bytes ", offset_, "-", expected_ - 1, " of ",
                           expected_, ", got Content-Range '", Printable(range, 80), "'");
    }
    return OkStatus();
  }

  Status Write(std::span<const std::byte> data) override {
    if (offset_ + static_cast<int64_t>(data.size()) > expected_) {
      return DataLossError(part_path_, ": the server sends more than the ", expected_,
                           " bytes the hub reported");
    }
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::pwrite(fd_, data.data() + done, data.size() - done,
                                 offset_ + static_cast<int64_t>(done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ResourceExhaustedError(part_path_, ": write failed: ", ErrnoText());
      }
      done += static_cast<size_t>(n);
    }
    hash_.Update(data);
    offset_ += static_cast<int64_t>(data.size());
    received_ += static_cast<int64_t>(data.size());
    progress_.Update(offset_);
    return OkStatus();
  }

  Status Truncate() {
    if (::ftruncate(fd_, 0) != 0) {
      return UnavailableError(part_path_, ": cannot truncate: ", ErrnoText());
    }
    offset_ = 0;
    hash_.Reset();
    return OkStatus();
  }

 private:
  int fd_;
  std::string part_path_;
  int64_t expected_;
  ContentHash& hash_;
  TransferProgress& progress_;
  int64_t offset_ = 0;
  int64_t received_ = 0;
};

// The hub's headers name the commit (X-Repo-Commit) and the file's hash (X-Linked-Etag for LFS
// files, ETag for small ones) too: they must agree with the model-info answer.
Status CheckHubHeaders(const HttpResult& r, const RepoFile& f, const std::string& commit) {
  if (r.hops.empty()) return OkStatus();
  const HttpHead& first = r.hops.front();
  const std::string repo_commit = first.Header("x-repo-commit");
  if (model::IsCommitHash(repo_commit) && repo_commit != commit) {
    return DataLossError(f.path, ": asked for commit ", commit, ", the hub answered for ",
                         repo_commit);
  }
  const std::string linked = Unquote(first.Header("x-linked-etag"));
  std::string claimed;
  if (f.hash_kind() == HashKind::kSha256) {
    claimed = linked;
  } else if (linked.empty()) {
    claimed = Unquote(first.Header("etag"));
  }
  if (claimed.size() != f.hash().size()) return OkStatus();  // not a hash of this kind
  for (char& c : claimed) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (claimed != f.hash()) {
    return DataLossError(f.path, ": the hub's API names ", HashKindName(f.hash_kind()), " ",
                         f.hash(), " but its download headers name ", Printable(claimed, 80));
  }
  return OkStatus();
}

// Downloads `f` into blobs/HASH (nothing when that blob exists with the right size).  Returns
// whether bytes were transferred.
StatusOr<bool> FetchBlob(HttpClient& client, const PullOptions& o, const std::string& commit,
                         const RepoFile& f, TransferProgress& progress, int64_t* bytes_moved) {
  const std::string blob = model::BlobPath(o.cache_dir, o.repo_id, f.hash());
  std::error_code ec;
  if (fs::is_regular_file(blob, ec) && static_cast<int64_t>(fs::file_size(blob, ec)) == f.size &&
      !ec) {
    progress.Cached(f.path, f.size);
    return false;
  }
  const std::string part = blob + ".part";
  Fd fd(::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) return UnavailableError(part, ": cannot open: ", ErrnoText());
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return FailedPreconditionError(f.path, ": another process is downloading it (", part,
                                   " is locked)");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return UnavailableError(part, ": cannot stat: ", ErrnoText());
  ContentHash hash(f.hash_kind(), f.size);
  PartSink sink(fd.get(), part, f.size, hash, progress);
  int64_t have = st.st_size;
  if (have > f.size) {  // not a prefix of this file: start over
    LOOM_RETURN_IF_ERROR(sink.Truncate());
    have = 0;
  }
  // Bytes already on disk count towards the hash.
  LOOM_RETURN_IF_ERROR(HashFilePrefix(fd.get(), have, part, hash));
  sink.set_offset(have);
  const std::string url = o.endpoint + "/" + o.repo_id + "/resolve/" + commit + "/" +
                          UrlEncode(f.path, /*keep_slash=*/true);
  progress.Begin(f.path, f.size, have);
  Status last = OkStatus();
  bool complete = sink.offset() == f.size;
  int64_t delay = o.retry_delay_ms;
  for (int attempt = 1; !complete && attempt <= o.max_attempts; ++attempt) {
    if (attempt > 1) {
      progress.Message(StrCat(f.path, ": ", last.message(), "; retrying from ",
                              FormatBytes(sink.offset()), " (attempt ", attempt, " of ",
                              o.max_attempts, ")"));
      Sleep(delay);
      delay = std::min(delay * 2, kMaxRetryDelayMs);
    }
    const int64_t from = sink.offset();
    StatusOr<HttpResult> r = client.Get({url, o.token, from > 0 ? from : -1}, &sink, kMaxErrorBody);
    if (!r.ok()) {
      if (!IsRetryable(r.status())) {
        progress.End(false);
        if (r.status().code() == StatusCode::kDataLoss) (void)sink.Truncate();
        return r.status().WithContext(f.path);
      }
      last = r.status();
      continue;
    }
    const int status = r->status();
    if (status == 416) {  // the partial file is not a prefix the server recognizes
      LOOM_RETURN_IF_ERROR(sink.Truncate());
      last = UnavailableError("HTTP 416 for a resumed download; starting over");
      continue;
    }
    if (status == 429 || status >= 500) {
      last = HubError(*r, o.repo_id + ": " + f.path, o);
      continue;
    }
    if (status < 200 || status >= 300) {
      progress.End(false);
      return HubError(*r, o.repo_id + ": " + f.path, o);
    }
    if (Status s = CheckHubHeaders(*r, f, commit); !s.ok()) {
      progress.End(false);
      (void)sink.Truncate();
      return s;
    }
    complete = sink.offset() == f.size;
    if (!complete) {
      last = UnavailableError("the server closed the transfer at ", sink.offset(), " of ", f.size,
                              " bytes");
    }
  }
  *bytes_moved += sink.received();
  if (!complete) {
    progress.End(false);
    return Status(last.code(), StrCat(o.repo_id, ": ", f.path, ": download incomplete after ",
                                      o.max_attempts, " attempts (", last.message(), "); ",
                                      FormatBytes(sink.offset()), " of ", FormatBytes(f.size),
                                      " kept in ", part, ": run the same command again to resume"));
  }
  const std::string digest = hash.HexDigest();
  if (digest != f.hash()) {
    progress.End(false);
    fd.Reset();
    ::unlink(part.c_str());
    return DataLossError(o.repo_id, ": ", f.path, ": ", HashKindName(f.hash_kind()),
                         " mismatch: the hub reported ", f.hash(),
                         ", the downloaded bytes hash to ", digest, "; the download was discarded");
  }
  if (::fsync(fd.get()) != 0) return UnavailableError(part, ": fsync failed: ", ErrnoText());
  if (::rename(part.c_str(), blob.c_str()) != 0) {
    return UnavailableError(part, ": cannot rename to ", blob, ": ", ErrnoText());
  }
  progress.End(true);
  return true;
}

// snapshots/COMMIT/PATH -> ../../blobs/HASH (one more "../" per directory in PATH), replaced
// atomically when it points elsewhere.
Status LinkIntoSnapshot(const std::string& snapshot, const RepoFile& f) {
  const fs::path link = fs::path(snapshot) / f.path;
  std::string target;
  for (char c : f.path) {
    if (c == '/') target += "../";
  }
  target += "../../blobs/" + f.hash();
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) return UnavailableError(link.parent_path().string(), ": cannot create: ", ec.message());
  if (fs::is_symlink(link, ec) && fs::read_symlink(link, ec) == target && !ec) return OkStatus();
  const std::string tmp = link.string() + ".loom-tmp";
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0) {
    return UnavailableError(tmp, ": cannot create a symlink: ", ErrnoText());
  }
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    const std::string err = ErrnoText();
    ::unlink(tmp.c_str());
    return UnavailableError(link.string(), ": cannot replace: ", err);
  }
  return OkStatus();
}

Status CheckDiskSpace(const std::string& dir, int64_t needed) {
  struct statvfs vfs {};
  if (needed <= 0 || ::statvfs(dir.c_str(), &vfs) != 0) return OkStatus();  // best effort
  const auto free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  if (free_bytes < needed) {
    return ResourceExhaustedError("not enough disk space in ", dir, ": the download needs ",
                                  FormatBytes(needed), ", ", FormatBytes(free_bytes), " is free");
  }
  return OkStatus();
}

}  // namespace

PullOptions PullOptionsFromEnvironment() {
  PullOptions o;
  if (std::string e = Env("HF_ENDPOINT"); !e.empty()) o.endpoint = e;
  o.token = Env("HF_TOKEN");
  o.cache_dir = model::DefaultCacheDir();
  return o;
}

StatusOr<PullResult> Pull(const PullOptions& options, TransferProgress& progress) {
  PullOptions o = options;
  o.max_attempts = std::max(1, o.max_attempts);
  o.retry_delay_ms = std::max<int64_t>(0, o.retry_delay_ms);
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  if (!model::IsValidRepoId(o.repo_id)) {
    return InvalidArgumentError("pull: '", o.repo_id,
                                "' is not a repository id (expected ORG/NAME)");
  }
  if (!model::IsValidRevision(o.revision)) {
    return InvalidArgumentError("pull: '", o.revision, "' is not a valid revision");
  }
  if (o.cache_dir.empty()) {
    return InvalidArgumentError("pull: no cache directory (set LOOM_CACHE or HOME, or --cache)");
  }
  if (UrlOrigin(o.endpoint).empty()) {
    return InvalidArgumentError("pull: endpoint '", o.endpoint, "' is not an http(s) URL");
  }
  LOOM_ASSIGN_OR_RETURN(HttpClient client, HttpClient::Create(o.http));
  LOOM_ASSIGN_OR_RETURN(RepoInfo info, FetchRepoInfo(client, o));
  if (!info.gated.empty() && o.token.empty()) {
    return PermissionDeniedError(o.repo_id, " is a gated model (", info.gated,
                                 "): accept its conditions at ", o.endpoint, "/", o.repo_id,
                                 " and set HF_TOKEN to an access token of that account");
  }
  if (info.id.empty()) info.id = o.repo_id;
  LOOM_ASSIGN_OR_RETURN(std::vector<RepoFile> files, SelectModelFiles(info, o.include));
  for (const RepoFile& f : files) {
    if (!f.has_hash() || f.size < 0) {
      return DataLossError(o.repo_id, ": the hub gave no size and hash for '", f.path, "' (does ",
                           o.endpoint,
                           " support ?blobs=true?); loom keeps no file it cannot check");
    }
  }
  const std::string repo_dir = model::RepoCacheDir(o.cache_dir, o.repo_id);
  std::error_code ec;
  fs::create_directories(repo_dir + "/blobs", ec);
  if (ec) return UnavailableError(repo_dir, "/blobs: cannot create: ", ec.message());

  int64_t to_fetch = 0;
  for (const RepoFile& f : files) {
    if (!fs::exists(model::BlobPath(o.cache_dir, o.repo_id, f.hash()), ec)) to_fetch += f.size;
  }
  LOOM_RETURN_IF_ERROR(CheckDiskSpace(repo_dir + "/blobs", to_fetch));
  progress.Message(StrCat("pull ", o.repo_id, "@", o.revision, " (commit ",
                          info.commit.substr(0, 12), "): ", files.size(), " files, ",
                          FormatBytes(to_fetch), " to download"));

  PullResult result;
  result.repo_id = o.repo_id;
  result.commit = info.commit;
  // With a safetensors index, only the shards it names are weights (the index comes first).
  const bool indexed = o.include.empty() &&
                       std::any_of(files.begin(), files.end(),
                                   [](const RepoFile& f) { return f.path == kSafetensorsIndex; });
  std::vector<RepoFile> done;
  auto fetch = [&](const RepoFile& f) -> Status {
    LOOM_ASSIGN_OR_RETURN(bool moved,
                          FetchBlob(client, o, info.commit, f, progress, &result.bytes_downloaded));
    result.files.push_back({f.path, f.size, moved});
    done.push_back(f);
    return OkStatus();
  };
  if (indexed) {
    const auto index = std::find_if(files.begin(), files.end(),
                                    [](const RepoFile& f) { return f.path == kSafetensorsIndex; });
    LOOM_RETURN_IF_ERROR(fetch(*index));
    const std::string blob = model::BlobPath(o.cache_dir, o.repo_id, index->hash());
    LOOM_ASSIGN_OR_RETURN(std::string text, base::ReadFileToString(blob));
    LOOM_ASSIGN_OR_RETURN(std::vector<std::string> shards, ParseSafetensorsIndex(text, blob));
    LOOM_ASSIGN_OR_RETURN(files, KeepIndexedShards(std::move(files), info, shards));
  }
  for (const RepoFile& f : files) {
    if (indexed && f.path == kSafetensorsIndex) continue;
    LOOM_RETURN_IF_ERROR(fetch(f));
  }
  // Every blob is in place: now the snapshot, then the ref that makes the name resolve.
  result.snapshot_dir = model::SnapshotDir(o.cache_dir, o.repo_id, info.commit);
  for (const RepoFile& f : done) LOOM_RETURN_IF_ERROR(LinkIntoSnapshot(result.snapshot_dir, f));
  if (!model::IsCommitHash(o.revision)) {
    LOOM_RETURN_IF_ERROR(model::WriteRef(o.cache_dir, o.repo_id, o.revision, info.commit));
  }
  StatusOr<std::string> model_path = model::ModelPathInSnapshot(result.snapshot_dir);
  if (model_path.ok()) {
    result.model_path = *model_path;
  } else {
    result.model_path = result.snapshot_dir;
    result.note = model_path.status().message();
  }
  return result;
}

}  // namespace loom::fetch
