// Ledger settlement throughput on the hub's store: each request as the hub writes it — the job
// with its reservation and first attempt (one transaction), then the attempt's end, the job's end
// and its settlement (one transaction) — against a fresh SQLite file (or --db postgresql://...).
// Prints requests/s over several runs and their median, and the CPU time each request took (the
// figure a busy machine does not distort: requests per CPU-second is the rate on one free core).
//
//   ledger_bench [--db URL] [--requests 5000] [--runs 3]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/network/ledger/credits.h"
#include "loom/network/store/store.h"

namespace {

using loom::network::ledger::Work;
namespace ledger = loom::network::ledger;
namespace store = loom::network::store;

// This process's CPU time (user + system): what a request costs, whatever else the machine runs.
double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const loom::Status& s) {
  std::fprintf(stderr, "ledger_bench: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string db;
  int64_t requests = 5000;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--db") db = argv[i + 1];
    else if (a == "--requests") requests = std::atoll(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else return std::fprintf(stderr, "unknown argument %s (see the header)\n", a.c_str()), 2;
  }
  const ledger::Price price{1000 * ledger::kMicro, 2000 * ledger::kMicro};
  std::vector<double> rates, cpu_rates;
  for (int run = 0; run < runs; ++run) {
    std::string url = db;
    std::filesystem::path dir;
    if (url.empty()) {
      dir = std::filesystem::temp_directory_path() / ("loom_ledger_bench_" + std::to_string(run));
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      url = (dir / "hub.db").string();
    }
    auto s = store::OpenStore(url);
    if (!s.ok()) return Fail(s.status());
    store::Store& st = **s;
    const std::string tag = std::to_string(run) + "-" + std::to_string(static_cast<int64_t>(Now()));
    auto account = st.CreateAccount("bench-" + tag, 1);
    if (!account.ok()) return Fail(account.status());
    store::LedgerTx grant{.kind = "grant", .ref = "grant-" + tag, .at_ms = 1,
                          .lines = {{"issued", -(int64_t{1} << 50), ""},
                                    {ledger::ConsumerBook(account->id), int64_t{1} << 50, ""}}};
    if (auto g = st.Post(grant); !g.ok()) return Fail(g.status());
    const double t0 = Now();
    const double cpu0 = CpuSeconds();
    for (int64_t i = 0; i < requests; ++i) {
      const std::string job = "cmpl-" + tag + "-" + std::to_string(i);
      const std::string attempt = job + "-1";
      store::JobRecord record{.job_id = job, .account_id = account->id, .model = "m",
                              .endpoint = "completion", .created_ms = i};
      const store::LedgerTx reserve = ledger::ReserveTx(job, account->id, 400'000, i);
      store::AttemptRecord a{.attempt_id = attempt, .job_id = job, .node_id = "node-1",
                             .number = 1, .started_ms = i};
      if (auto c = st.CreateJob(record, &reserve, &a); !c.ok()) return Fail(c);
      const std::vector<Work> work = {{attempt, "node-" + std::to_string(i % 100), 64}};
      const store::LedgerTx settle =
          ledger::SettleTx(job, account->id, 400'000, price, 12, work, 9000, i);
      const store::Store::AttemptEnd end{.attempt_id = attempt, .first_token_ms = i,
                                         .finished_ms = i, .tokens = 64};
      if (auto c = st.FinishJob(job, store::JobState::kCompleted, i, 12, 64, "stop", "", &settle,
                                &end);
          !c.ok()) {
        return Fail(c);
      }
    }
    const double cpu = CpuSeconds() - cpu0;
    const double rate = static_cast<double>(requests) / (Now() - t0);
    rates.push_back(rate);
    auto problems = st.CheckLedger();
    if (!problems.ok()) return Fail(problems.status());
    cpu_rates.push_back(static_cast<double>(requests) / cpu);
    std::printf(
        "run %d: %lld requests settled in %.2f s: %.0f requests/s; %.0f us CPU each = %.0f per "
        "CPU-second (ledger %s)\n",
        run + 1, static_cast<long long>(requests), static_cast<double>(requests) / rate, rate,
        cpu * 1e6 / static_cast<double>(requests), cpu_rates.back(),
        problems->empty() ? "sound" : "BROKEN");
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  std::sort(rates.begin(), rates.end());
  std::sort(cpu_rates.begin(), cpu_rates.end());
  std::printf("median %.0f requests/s, %.0f per CPU-second (%s)\n", rates[rates.size() / 2],
              cpu_rates[cpu_rates.size() / 2],
              db.empty() ? "SQLite, a fresh file each run" : "the given store");
  return 0;
}
