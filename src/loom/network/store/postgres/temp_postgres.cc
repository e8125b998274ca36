#include "loom/network/store/postgres/temp_postgres.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

extern char** environ;

namespace loom::network::store {
namespace fs = std::filesystem;
namespace {

// The last `max` bytes of a log file, for error messages.
std::string Tail(const std::string& path, size_t max = 2000) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  if (s.size() > max) s = "..." + s.substr(s.size() - max);
  return s;
}

// runuser lives in /usr/sbin, which a test's PATH may lack.
std::string FindRunuser() {
  for (const char* p : {"/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser", "/bin/runuser"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "runuser";
}

// Runs argv[0] with output appended to `log`; the exit status as a Status.
Status Spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return UnavailableError("cannot run '", argv[0], "': ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return InternalError("waitpid for '", argv[0], "': ", std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return OkStatus();
  std::string how = WIFEXITED(status) ? StrCat("exited with ", WEXITSTATUS(status))
                                      : StrCat("killed by signal ", WTERMSIG(status));
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  return UnavailableError("'", command, "' ", how, "; its log ends:\n", Tail(log));
}

}  // namespace

StatusOr<std::string> FindPostgresBinDir() {
  if (const char* env = std::getenv("LOOM_POSTGRES_BIN"); env != nullptr && *env != '\0') {
    if (::access(StrCat(env, "/initdb").c_str(), X_OK) != 0 ||
        ::access(StrCat(env, "/pg_ctl").c_str(), X_OK) != 0) {
      return NotFoundError("no initdb and pg_ctl in $LOOM_POSTGRES_BIN '", env, "'");
    }
    return std::string(env);
  }
  std::error_code ec;
  const fs::path root = "/usr/lib/postgresql";
  std::string best;
  int best_version = -1;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const fs::path bin = entry.path() / "bin";
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    if (::access((bin / "initdb").c_str(), X_OK) != 0) continue;
    if (::access((bin / "pg_ctl").c_str(), X_OK) != 0) continue;
    const int version = std::atoi(name.c_str());
    if (version > best_version) best_version = version, best = bin.string();
  }
  if (best.empty()) return NotFoundError("no /usr/lib/postgresql/<version>/bin/initdb");
  return best;
}

StatusOr<std::unique_ptr<TempPostgres>> TempPostgres::Start() {
  LOOM_ASSIGN_OR_RETURN(std::string bin_dir, FindPostgresBinDir());
  const bool as_root = ::geteuid() == 0;

  // Under /tmp, not $TMPDIR: a socket path must fit in 107 bytes, and user postgres must be
  // able to reach the directory.
  char templ[] = "/tmp/loom_pg_XXXXXX";
  if (::mkdtemp(templ) == nullptr) {
    return UnavailableError("temp postgres: mkdtemp: ", std::strerror(errno));
  }
  std::random_device random;
  const int port = 20000 + static_cast<int>(random() % 40000);
  auto pg = std::make_unique<TempPostgres>(Token(), bin_dir, templ, port, as_root);
  if (as_root) {
    const passwd* user = ::getpwnam("postgres");
    if (user == nullptr) {
      return FailedPreconditionError(
          "temp postgres: running as root but there is no user "
          "'postgres' to run the server as");
    }
    if (::chown(templ, user->pw_uid, user->pw_gid) != 0) {
      return UnavailableError("temp postgres: chown ", templ, ": ", std::strerror(errno));
    }
  }
  const std::string data = pg->dir_ + "/data";
  // -N: no fsync, the cluster is thrown away; C locale so that text sorts bytewise as in SQLite.
  LOOM_RETURN_IF_ERROR(pg->RunTool("initdb", {"-D", data, "-A", "trust", "-U", "loom", "-E", "UTF8",
                                              "--locale=C", "-N"})
                           .WithContext("temp postgres: initdb"));
  // pg_ctl hands -o to a shell, so listen_addresses='' arrives as the empty list: no TCP.
  const std::string options =
      StrCat("-k ", pg->dir_, " -p ", port, " -c listen_addresses='' -c fsync=off");
  pg->running_ = true;  // from here the destructor stops whatever may have started
  Status started = pg->RunTool("pg_ctl", {"-D", data, "-o", options, "-l", pg->dir_ + "/server.log",
                                          "-w", "-t", "60", "start"});
  if (!started.ok()) {
    return started.WithContext(StrCat("temp postgres: pg_ctl start; server.log ends:\n",
                                      Tail(pg->dir_ + "/server.log"), "\n"));
  }
  return pg;
}

TempPostgres::~TempPostgres() {
  Stop();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void TempPostgres::Stop() {
  if (!running_) return;
  running_ = false;
  const std::string data = dir_ + "/data";
  if (RunTool("pg_ctl", {"-D", data, "-m", "fast", "-w", "-t", "30", "stop"}).ok()) return;
  // The last resort, so that no server outlives its directory: SIGQUIT is an immediate
  // shutdown.  The postmaster's pid is the first line of postmaster.pid.
  std::ifstream pid_file(data + "/postmaster.pid");
  long pid = 0;
  if (pid_file >> pid && pid > 0) ::kill(static_cast<pid_t>(pid), SIGQUIT);
}

Status TempPostgres::RunTool(std::string_view program, const std::vector<std::string>& args) const {
  std::vector<std::string> argv;
  if (as_postgres_user_) argv = {FindRunuser(), "-u", "postgres", "--"};
  argv.push_back(StrCat(bin_dir_, "/", program));
  argv.insert(argv.end(), args.begin(), args.end());
  return Spawn(argv, dir_ + "/cmd.log");
}

std::string TempPostgres::Url(std::string_view database) const {
  return StrCat("postgresql://loom@/", database, "?host=", dir_, "&port=", port_);
}

Status TempPostgres::CreateDatabase(std::string_view name) {
  const bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (!plain) return InvalidArgumentError("temp postgres: bad database name '", name, "'");
  struct Closer {
    void operator()(PGconn* c) const { PQfinish(c); }
  };
  struct Clearer {
    void operator()(PGresult* r) const { PQclear(r); }
  };
  std::unique_ptr<PGconn, Closer> conn(PQconnectdb(Url("postgres").c_str()));
  if (conn == nullptr || PQstatus(conn.get()) != CONNECTION_OK) {
    return UnavailableError("temp postgres: connect: ",
                            conn ? PQerrorMessage(conn.get()) : "out of memory");
  }
  // The name was checked above to be a plain identifier; CREATE DATABASE takes no parameters.
  // FILE_COPY (PostgreSQL 15+) copies the small template's files instead of logging every page,
  // which is faster for a test database with fsync off.
  const std::string sql = StrCat(
      "CREATE DATABASE ", name, PQserverVersion(conn.get()) >= 150000 ? " STRATEGY FILE_COPY" : "");
  std::unique_ptr<PGresult, Clearer> res(
      PQexecParams(conn.get(), sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0));
  if (res == nullptr || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
    return UnavailableError("temp postgres: ", sql, ": ", PQerrorMessage(conn.get()));
  }
  return OkStatus();
}

}  // namespace loom::network::store
