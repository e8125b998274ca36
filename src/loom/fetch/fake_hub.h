// Test-only: a local imitation of the Hugging Face Hub's endpoints on 127.0.0.1 (free ports), in a
// thread of the test process.  It answers
//   GET /api/models/ORG/NAME/revision/REV?blobs=true   the model-info JSON (sha, gated, siblings)
//   GET /ORG/NAME/resolve/REV/PATH                     small files directly (ETag = git blob id);
//                                                      LFS files by a 302 to a second listener, the
//                                                      "CDN" (X-Linked-Etag = sha256,
//                                                      X-Repo-Commit)
//   GET /blobs/SHA256 on the CDN listener              the bytes
// with HTTP Range requests, the Hub's error codes (401/403 GatedRepo, 401/404 RepoNotFound,
// 404 RevisionNotFound / EntryNotFound), and faults on demand: a connection dropped or stalled
// after N body bytes, a corrupted body, Range ignored.  Every connection is closed after one
// response. Destroying the FakeHub stops the thread (a stalled response is released at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loom/base/status.h"

namespace loom::fetch::testing {

struct FakeFile {
  std::string path;
  std::string content;
  bool lfs = false;      // served through the CDN and named by its sha256
  bool corrupt = false;  // the bytes served differ (one flipped bit) from what the API hashes
};

struct FakeRepo {
  std::string id;      // "org/name"
  std::string commit;  // 40 hex; "main" and the commit itself name it
  std::vector<FakeFile> files;
  std::string gated;  // "" or "manual": resolve needs "Authorization: Bearer <token>"
  std::string token;
};

struct FakeRequest {
  std::string listener;  // "hub" or "cdn"
  std::string target;    // path and query as sent
  std::string authorization;
  std::string range;
};

class FakeHub {
 public:
  static StatusOr<std::unique_ptr<FakeHub>> Start();
  ~FakeHub();
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  std::string endpoint() const;  // "http://127.0.0.1:PORT" of the hub listener
  void AddRepo(FakeRepo repo);

  // The next `times` responses carrying `path`'s bytes stop after `bytes` body bytes: the
  // connection is closed (DropAfter) or held open silently until the hub stops (StallAfter).
  void DropAfter(const std::string& path, int64_t bytes, int times);
  void StallAfter(const std::string& path, int64_t bytes, int times);
  // Answer Range requests with the whole file (200), as some servers do.
  void set_ignore_range(bool ignore);

  std::vector<FakeRequest> requests() const;
  // Requests whose target contains `needle`.
  int CountRequests(std::string_view needle) const;

  // The hashes the API reports.
  static std::string Sha256Hex(std::string_view bytes);
  static std::string GitBlobSha1Hex(std::string_view bytes);

 private:
  struct Fault {
    int64_t bytes = 0;
    int times = 0;
    bool stall = false;
  };
  struct Response;
  struct Hashes {
    std::string sha256;
    std::string git_sha1;
  };

  FakeHub() = default;
  void Loop();
  void Serve(int fd, const std::string& listener);
  Response Route(const std::string& listener, const std::string& target,
                 const std::string& authorization);
  Response FileResponse(const FakeRepo& repo, const FakeFile& file);

  int hub_fd_ = -1;
  int cdn_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: a byte written stops the loop and releases stalls
  int hub_port_ = 0;
  int cdn_port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<FakeRepo> repos_;
  std::map<std::string, Hashes> hashes_;  // by "org/name/path", computed once
  std::map<std::string, Fault> faults_;   // by file path
  bool ignore_range_ = false;
  std::vector<FakeRequest> requests_;
};

// A port on 127.0.0.1 where nothing listens (for "the hub cannot be reached" cases).
int ClosedLoopbackPort();

// The whole file, "" when it cannot be read (test expectations compare contents).
std::string ReadWholeFile(const std::string& path);

}  // namespace loom::fetch::testing
