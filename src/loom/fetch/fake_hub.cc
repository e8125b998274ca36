#include "loom/fetch/fake_hub.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "loom/base/mapped_file.h"
#include "loom/fetch/content_hash.h"

namespace loom::fetch::testing {

namespace {

constexpr int kReadTimeoutMs = 5000;
constexpr int kStallMs = 60000;  // a stalled response is held at most this long
constexpr size_t kMaxRequest = 16 * 1024;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

StatusOr<int> Listen(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError("fake hub: socket: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return UnavailableError("fake hub: bind/listen: ", err);
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

struct FakeHub::Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string file_path;  // the file whose bytes the body carries (for faults)
};

std::string FakeHub::Sha256Hex(std::string_view bytes) {
  return HashHex(HashKind::kSha256, std::as_bytes(std::span<const char>(bytes)));
}

std::string FakeHub::GitBlobSha1Hex(std::string_view bytes) {
  return HashHex(HashKind::kGitSha1, std::as_bytes(std::span<const char>(bytes)));
}

StatusOr<std::unique_ptr<FakeHub>> FakeHub::Start() {
  std::unique_ptr<FakeHub> hub(new FakeHub());
  LOOM_ASSIGN_OR_RETURN(hub->hub_fd_, Listen(&hub->hub_port_));
  LOOM_ASSIGN_OR_RETURN(hub->cdn_fd_, Listen(&hub->cdn_port_));
  if (::pipe2(hub->wake_, O_CLOEXEC) != 0) {
    return UnavailableError("fake hub: pipe: ", std::strerror(errno));
  }
  hub->thread_ = std::thread([h = hub.get()] { h->Loop(); });
  return hub;
}

FakeHub::~FakeHub() {
  if (wake_[1] >= 0) {
    const char stop = 1;
    (void)!::write(wake_[1], &stop, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {hub_fd_, cdn_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

std::string FakeHub::endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_port_); }

void FakeHub::AddRepo(FakeRepo repo) {
  std::map<std::string, Hashes> hashes;
  for (const FakeFile& f : repo.files) {
    hashes[repo.id + "/" + f.path] = {Sha256Hex(f.content), GitBlobSha1Hex(f.content)};
  }
  std::lock_guard<std::mutex> lock(mu_);
  hashes_.merge(hashes);
  repos_.push_back(std::move(repo));
}

void FakeHub::DropAfter(const std::string& path, int64_t bytes, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_[path] = {bytes, times, false};
}

void FakeHub::StallAfter(const std::string& path, int64_t bytes, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_[path] = {bytes, times, true};
}

void FakeHub::set_ignore_range(bool ignore) {
  std::lock_guard<std::mutex> lock(mu_);
  ignore_range_ = ignore;
}

std::vector<FakeRequest> FakeHub::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

int FakeHub::CountRequests(std::string_view needle) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count_if(requests_.begin(), requests_.end(), [&](const auto& r) {
    return r.target.find(needle) != std::string::npos;
  }));
}

void FakeHub::Loop() {
  for (;;) {
    pollfd fds[3] = {{hub_fd_, POLLIN, 0}, {cdn_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[2].revents != 0) return;
    for (int i = 0; i < 2; ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      const int fd = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Serve(fd, i == 0 ? "hub" : "cdn");
      ::close(fd);
    }
  }
}

void FakeHub::Serve(int fd, const std::string& listener) {
  // Read the request head.
  std::string request;
  while (request.find("\r\n\r\n") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kReadTimeoutMs) <= 0 || request.size() > kMaxRequest) return;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) return;
  FakeRequest rec;
  rec.listener = listener;
  rec.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t pos = line_end + 2;
  while (pos < request.size()) {
    const size_t end = request.find("\r\n", pos);
    if (end == std::string::npos || end == pos) break;
    const std::string header = request.substr(pos, end - pos);
    const size_t colon = header.find(':');
    if (colon != std::string::npos) {
      const std::string name = Lower(header.substr(0, colon));
      std::string value = header.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      if (name == "authorization") rec.authorization = value;
      if (name == "range") rec.range = value;
    }
    pos = end + 2;
  }
  Response resp;
  Fault fault;
  bool ignore_range = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(rec);
    resp = Route(listener, rec.target, rec.authorization);
    ignore_range = ignore_range_;
    if (!resp.file_path.empty() && resp.status == 200) {
      auto it = faults_.find(resp.file_path);
      if (it != faults_.end() && it->second.times > 0) {
        fault = it->second;
        --it->second.times;
      }
    }
  }
  // Only file bodies honour Range.
  if (!resp.file_path.empty() && resp.status == 200 && !rec.range.empty() && !ignore_range) {
    long long start = -1;
    if (std::sscanf(rec.range.c_str(), "bytes=%lld-", &start) == 1 && start >= 0) {
      const auto size = static_cast<long long>(resp.body.size());
      if (start >= size) {
        resp.status = 416;
        resp.headers.push_back({"Content-Range", "bytes */" + std::to_string(size)});
        resp.body.clear();
      } else {
        resp.status = 206;
        resp.headers.push_back({"Content-Range", "bytes " + std::to_string(start) + "-" +
                                                     std::to_string(size - 1) + "/" +
                                                     std::to_string(size)});
        resp.body = resp.body.substr(static_cast<size_t>(start));
      }
    }
  }
  std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " X\r\n";
  for (const auto& [name, value] : resp.headers) head += name + ": " + value + "\r\n";
  head += "Content-Length: " + std::to_string(resp.body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!SendAll(fd, head)) return;
  if (fault.times > 0) {
    const auto n = static_cast<size_t>(std::min<int64_t>(fault.bytes, resp.body.size()));
    if (!SendAll(fd, std::string_view(resp.body).substr(0, n))) return;
    if (fault.stall) {
      // Silent until the client gives up (its end closes) or the hub stops.
      pollfd p[2] = {{wake_[0], POLLIN, 0}, {fd, POLLIN, 0}};
      ::poll(p, 2, kStallMs);
    }
    return;
  }
  SendAll(fd, resp.body);
}

FakeHub::Response FakeHub::Route(const std::string& listener, const std::string& target,
                                 const std::string& authorization) {
  Response r;
  auto error = [&](int status, const std::string& code, const std::string& message) {
    r.status = status;
    r.headers = {{"X-Error-Code", code}, {"X-Error-Message", message}};
    r.body = "{\"error\":\"" + message + "\"}";
    return r;
  };
  if (listener == "cdn") {
    const std::string prefix = "/blobs/";
    if (target.rfind(prefix, 0) != 0) return error(404, "NotFound", "no such blob");
    const std::string sha = target.substr(prefix.size(), 64);
    for (const FakeRepo& repo : repos_) {
      for (const FakeFile& f : repo.files) {
        if (f.lfs && hashes_[repo.id + "/" + f.path].sha256 == sha) {
          r.body = f.content;
          if (f.corrupt && !r.body.empty()) r.body[0] = static_cast<char>(r.body[0] ^ 1);
          r.file_path = f.path;
          r.headers = {{"ETag", "\"cdn-" + sha.substr(0, 8) + "\""}};
          return r;
        }
      }
    }
    return error(404, "NotFound", "no such blob");
  }
  // Hub: /api/models/ORG/NAME/revision/REV?blobs=true or /ORG/NAME/resolve/REV/PATH.
  std::string path = target.substr(0, target.find('?'));
  const bool api = path.rfind("/api/models/", 0) == 0;
  if (api) path = path.substr(std::string("/api/models").size());
  // path = /ORG/NAME/<verb>/REV[/FILE]
  std::vector<std::string> parts;
  for (size_t start = 1; start <= path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  if (parts.size() < 4) return error(404, "NotFound", "bad path");
  const std::string repo_id = parts[0] + "/" + parts[1];
  const std::string verb = parts[2];
  const std::string revision = UrlDecode(parts[3]);
  const auto repo = std::find_if(repos_.begin(), repos_.end(),
                                 [&](const FakeRepo& x) { return x.id == repo_id; });
  if (repo == repos_.end()) {
    // Like the Hub: anonymous callers get 401 for a repository that does not exist.
    return authorization.empty() ? error(401, "RepoNotFound", "Repository not found")
                                 : error(404, "RepoNotFound", "Repository not found");
  }
  if (revision != "main" && revision != repo->commit) {
    return error(404, "RevisionNotFound", "Invalid rev id: " + revision);
  }
  if (api && verb == "revision") {
    nlohmann::json j;
    j["id"] = repo->id;
    j["sha"] = repo->commit;
    j["private"] = false;
    j["gated"] = repo->gated.empty() ? nlohmann::json(false) : nlohmann::json(repo->gated);
    j["siblings"] = nlohmann::json::array();
    for (const FakeFile& f : repo->files) {
      const Hashes& h = hashes_[repo->id + "/" + f.path];
      nlohmann::json s = {
          {"rfilename", f.path}, {"size", f.content.size()}, {"blobId", h.git_sha1}};
      if (f.lfs) {
        s["lfs"] = {{"sha256", h.sha256}, {"size", f.content.size()}, {"pointerSize", 134}};
      }
      j["siblings"].push_back(s);
    }
    r.body = j.dump();
    r.headers = {{"Content-Type", "application/json"}};
    return r;
  }
  if (api || verb != "resolve" || parts.size() < 5) return error(404, "NotFound", "bad path");
  if (!repo->gated.empty() && authorization != "Bearer " + repo->token) {
    const std::string message = "Access to model " + repo->id + " is restricted.";
    return error(authorization.empty() ? 401 : 403, "GatedRepo", message);
  }
  std::string file_path;
  for (size_t i = 4; i < parts.size(); ++i) file_path += (i > 4 ? "/" : "") + UrlDecode(parts[i]);
  const auto file = std::find_if(repo->files.begin(), repo->files.end(),
                                 [&](const FakeFile& f) { return f.path == file_path; });
  if (file == repo->files.end()) return error(404, "EntryNotFound", "Entry not found");
  return FileResponse(*repo, *file);
}

FakeHub::Response FakeHub::FileResponse(const FakeRepo& repo, const FakeFile& file) {
  Response r;
  const Hashes& h = hashes_[repo.id + "/" + file.path];
  if (file.lfs) {
    const std::string& sha = h.sha256;
    r.status = 302;
    r.headers = {{"Location", "http://127.0.0.1:" + std::to_string(cdn_port_) + "/blobs/" + sha +
                                  "?X-Signature=abc"},
                 {"X-Linked-Etag", "\"" + sha + "\""},
                 {"X-Linked-Size", std::to_string(file.content.size())},
                 {"X-Repo-Commit", repo.commit},
                 {"ETag", "\"" + sha + "\""}};
    return r;
  }
  r.body = file.content;
  if (file.corrupt && !r.body.empty()) r.body[0] = static_cast<char>(r.body[0] ^ 1);
  r.file_path = file.path;
  r.headers = {{"ETag", "\"" + h.git_sha1 + "\""}, {"X-Repo-Commit", repo.commit}};
  return r;
}

int ClosedLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string ReadWholeFile(const std::string& path) {
  StatusOr<std::string> s = base::ReadFileToString(path);
  return s.ok() ? *s : std::string();
}

}  // namespace loom::fetch::testing
