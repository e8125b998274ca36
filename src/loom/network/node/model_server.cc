#include "loom/network/node/model_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <regex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <nlohmann/json.hpp>

#include "loom/network/protocol/identity.h"

namespace loom::network::node {

struct ModelServer::Shared {
  std::atomic<bool> ready{false};
  std::atomic<bool> exited{false};
  std::atomic<int> port{0};
  std::thread reader;
  int out_fd = -1;
};

StatusOr<std::unique_ptr<ModelServer>> ModelServer::Start(boost::asio::io_context& io,
                                                          const std::string& name,
                                                          const std::string& path,
                                                          const ServeConfig& config,
                                                          std::function<void(Status)> ready) {
  std::unique_ptr<ModelServer> s(new ModelServer());
  s->api_key_ = protocol::Sha256Hex(protocol::RandomBase64(24));
  std::vector<std::string> args = {config.loom_binary, "serve", "-m", path,
                                   "--host", "127.0.0.1", "--port", "0",
                                   "--model-name", name, "--api-key", s->api_key_,
                                   "--parallel", std::to_string(config.parallel),
                                   "--ctx", std::to_string(config.ctx)};
  if (config.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(config.threads));
  }
  if (config.tp > 1 || config.pp > 1) {
    args.insert(args.end(), {"--tp", std::to_string(config.tp), "--pp", std::to_string(config.pp)});
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return InternalError("node: pipe for loom serve: ", std::strerror(errno));
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return InternalError("node: fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    // The child: dies with the agent; its stdout (where the URL is printed) goes to the pipe.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  s->pid_ = pid;
  s->shared_ = std::make_shared<Shared>();
  s->shared_->out_fd = pipe_fds[0];
  std::weak_ptr<Shared> weak = s->shared_;
  Shared* sh = s->shared_.get();
  const int fd = pipe_fds[0];
  // A thread reads the child's stdout until it closes: the URL line makes the server ready.
  sh->reader = std::thread([&io, weak, fd, pid, ready = std::move(ready), sh] {
    std::string out;
    char buf[4096];
    bool announced = false;
    static const std::regex kUrl(R"(http://127\.0\.0\.1:(\d+)/)");
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      if (announced) continue;
      out.append(buf, static_cast<size_t>(n));
      std::smatch m;
      if (std::regex_search(out, m, kUrl)) {
        sh->port = std::stoi(m[1].str());
        sh->ready = true;
        announced = true;
        boost::asio::post(io, [weak, ready] {
          if (weak.lock()) ready(OkStatus());
        });
      }
    }
    sh->exited = true;
    sh->ready = false;
    if (!announced) {
      boost::asio::post(io, [weak, ready, pid] {
        if (weak.lock()) {
          ready(UnavailableError("node: loom serve (pid ", pid,
                                 ") exited before it listened; see its messages above"));
        }
      });
    }
  });
  return s;
}

ModelServer::~ModelServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (shared_) {
    if (shared_->reader.joinable()) shared_->reader.join();
    if (shared_->out_fd >= 0) ::close(shared_->out_fd);
  }
}

StatusOr<PodSplit> PlanPodSplit(const std::string& loom_binary, const std::string& model_path,
                                int ranks) {
  const std::string n = std::to_string(ranks);
  std::vector<std::string> args = {loom_binary, "plan", "-m", model_path, "--ranks", n,
                                   "--ranks-per-host", n, "--json"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return InternalError("node: pipe: ", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return InternalError("node: fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(r));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto plan = nlohmann::json::parse(out, nullptr, false);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || plan.is_discarded() ||
      !plan.contains("plans") || !plan["plans"].is_array()) {
    return UnavailableError("node: `loom plan -m ", model_path, " --ranks ", ranks,
                            "` failed (see its message above)");
  }
  PodSplit best;
  bool found = false;
  for (const auto& p : plan["plans"]) {
    if (!p.is_object() || !p.value("feasible", false)) continue;
    const int tp = p.value("tp", 0), pp = p.value("pp", 0);
    const double tps = p.value("decode_tokens_per_s", 0.0);
    if (tp * pp != ranks || (found && tps <= best.decode_tokens_per_s)) continue;
    best = PodSplit{tp, pp, tps};
    found = true;
  }
  if (!found) {
    return ResourceExhaustedError("node: no split of ", model_path, " over ", ranks,
                                  " ranks fits in memory");
  }
  return best;
}

bool ModelServer::ready() const { return shared_ && shared_->ready; }
bool ModelServer::exited() const { return !shared_ || shared_->exited; }
int ModelServer::port() const { return shared_ ? shared_->port.load() : 0; }

}  // namespace loom::network::node
