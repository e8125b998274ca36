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

#include "loom/cluster/launch_plan.h"

namespace loom::network::node {

struct ModelServer::Shared {
  std::atomic<bool> ready{false};
  std::atomic<bool> exited{false};
  std::atomic<int> port{0};
  std::thread reader;
  int out_fd = -1;
};

namespace {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // the read end of the child's stdout
};

// Starts `args` (args[0] is the executable) with its stdout on a pipe; it gets SIGTERM when this
// process dies.
StatusOr<Child> SpawnReadingStdout(std::vector<std::string> args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return InternalError("node: pipe for ", args[0], ": ", std::strerror(errno));
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return InternalError("node: fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  return Child{pid, fds[0]};
}

}  // namespace

StatusOr<std::unique_ptr<ModelServer>> ModelServer::Start(boost::asio::io_context& io,
                                                          const std::string& name,
                                                          const std::string& path,
                                                          const ServeConfig& config,
                                                          std::function<void(Status)> ready) {
  std::unique_ptr<ModelServer> s(new ModelServer());
  LOOM_ASSIGN_OR_RETURN(s->api_key_, cluster::RandomHex(32));
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
  LOOM_ASSIGN_OR_RETURN(Child child, SpawnReadingStdout(std::move(args)));
  const pid_t pid = child.pid;
  s->pid_ = pid;
  s->shared_ = std::make_shared<Shared>();
  s->shared_->out_fd = child.out_fd;
  std::weak_ptr<Shared> weak = s->shared_;
  Shared* sh = s->shared_.get();
  const int fd = child.out_fd;
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
  LOOM_ASSIGN_OR_RETURN(Child child, SpawnReadingStdout({loom_binary, "plan", "-m", model_path,
                                                         "--ranks", n, "--ranks-per-host", n,
                                                         "--json"}));
  std::string out;
  char buf[4096];
  for (ssize_t r; (r = ::read(child.out_fd, buf, sizeof(buf))) > 0;) {
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(child.out_fd);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
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
