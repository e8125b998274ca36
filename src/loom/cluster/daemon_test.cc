// Daemons in one process on loopback (static peers, no multicast); the namespace test
// (tests/cluster) covers discovery by multicast across "machines".
#include "loom/cluster/daemon.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include "loom/cluster/machine.h"

namespace loom::cluster {
namespace {

using json = nlohmann::json;

class Loop {
 public:
  Loop() : guard_(io_.get_executor()) {
    thread_ = std::thread([this] { io_.run(); });
  }
  // Runs `f` on the loop's thread and waits for it.
  template <class F>
  auto Run(F f) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }
  ~Loop() {
    Run([this] {
      for (auto& d : daemons_) d->Stop();
      return 0;
    });
    guard_.reset();
    thread_.join();
  }
  Daemon* Start(DaemonOptions o) {
    Facts facts;
    facts.name = "test-" + std::to_string(daemons_.size());
    facts.cores = 1;
    facts.memory_total = 1 << 30;
    facts.memory_available = 1 << 29;
    facts.memory_offered = 1 << 28;
    facts.interfaces = ListInterfaces();
    o.port = 0;
    o.bind_host = "127.0.0.1";
    o.multicast = false;
    o.probe_seconds_per_size = 0.05;
    const std::string who = facts.name;
    o.log = [who](const std::string& line) { std::fprintf(stderr, "[%s] %s\n", who.c_str(), line.c_str()); };
    auto d = Run([&] { return Daemon::Create(io_, o, facts); });
    EXPECT_TRUE(d.ok()) << d.status().message();
    if (!d.ok()) return nullptr;
    daemons_.push_back(std::move(*d));
    return daemons_.back().get();
  }
  json View(Daemon* d) {
    return Run([d] { return d->View(); });
  }
  // Polls `done` on d's view every 50 ms for up to `seconds`.
  json WaitFor(Daemon* d, const std::function<bool(const json&)>& done, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    json v = View(d);
    while (!done(v) && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      v = View(d);
    }
    return v;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
};

std::string TempSocket(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("loom-cluster-test-" + std::to_string(::getpid()) + "-" + name + ".sock"))
      .string();
}

TEST(ClusterDaemon, TwoDaemonsJoinThroughAStaticPeerAndMeasureTheirLink) {
  Loop loop;
  DaemonOptions a;
  a.secret = "pod secret";
  a.control_path = TempSocket("a");
  Daemon* da = loop.Start(a);
  ASSERT_NE(da, nullptr);
  DaemonOptions b;
  b.secret = "pod secret";
  b.peers = {"127.0.0.1:" + std::to_string(da->port())};
  Daemon* db = loop.Start(b);
  ASSERT_NE(db, nullptr);
  auto both = [](const json& v) {
    return v["members"].size() == 2 && v["fastest"].size() == 1 && !v["probing"].get<bool>();
  };
  json va = loop.WaitFor(da, both, 20);
  json vb = loop.WaitFor(db, both, 5);
  ASSERT_TRUE(both(va)) << va.dump(2);
  ASSERT_TRUE(both(vb)) << vb.dump(2);
  EXPECT_EQ(va["members"][1]["id"], db->id());
  EXPECT_EQ(vb["members"][1]["id"], da->id());
  EXPECT_EQ(va["members"][1]["facts"]["name"], "test-1");
  // Both see the one measurement, made by the member with the smaller id.
  const json& link = va["fastest"][0];
  EXPECT_EQ(link, vb["fastest"][0]);
  EXPECT_EQ(link["a"], std::min(da->id(), db->id()));
  EXPECT_EQ(link["interface"], "lo");
  EXPECT_GT(link["latency_us"].get<double>(), 0);
  EXPECT_LT(link["latency_us"].get<double>(), 5000);
  EXPECT_GT(link["gbytes_per_s"].get<double>(), 0.05);
  // `loom cluster status` reads the same view through the control socket.
  auto q = QueryDaemon(a.control_path, 5);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ((*q)["id"], da->id());
  EXPECT_EQ((*q)["members"].size(), 2u);
}

TEST(ClusterDaemon, ADaemonWithTheWrongSecretIsRefused) {
  Loop loop;
  DaemonOptions a;
  a.secret = "right";
  Daemon* da = loop.Start(a);
  ASSERT_NE(da, nullptr);
  DaemonOptions c;
  c.secret = "wrong";
  const std::string peer = "127.0.0.1:" + std::to_string(da->port());
  c.peers = {peer};
  Daemon* dc = loop.Start(c);
  ASSERT_NE(dc, nullptr);
  json vc = loop.WaitFor(dc, [&](const json& v) { return v["refused_by"].contains(peer); }, 10);
  ASSERT_TRUE(vc["refused_by"].contains(peer)) << vc.dump(2);
  EXPECT_NE(vc["refused_by"][peer].get<std::string>().find("wrong cluster secret"),
            std::string::npos);
  EXPECT_EQ(vc["members"].size(), 1u);
  json va = loop.View(da);
  EXPECT_EQ(va["members"].size(), 1u) << va.dump(2);
  EXPECT_GE(va["refused"].get<int64_t>(), 1);
}

TEST(ClusterDaemon, AMemberThatStopsHasLeft) {
  Loop loop;
  DaemonOptions a;
  a.secret = "s";
  a.probe_links = false;
  Daemon* da = loop.Start(a);
  ASSERT_NE(da, nullptr);
  DaemonOptions b = a;
  b.peers = {"127.0.0.1:" + std::to_string(da->port())};
  Daemon* db = loop.Start(b);
  ASSERT_NE(db, nullptr);
  json va = loop.WaitFor(da, [](const json& v) { return v["members"].size() == 2; }, 10);
  ASSERT_EQ(va["members"].size(), 2u) << va.dump(2);
  loop.Run([db] {
    db->Stop();
    return 0;
  });
  va = loop.WaitFor(da, [](const json& v) { return v["departed"].size() == 1; }, 5);
  ASSERT_EQ(va["departed"].size(), 1u) << va.dump(2);
  EXPECT_EQ(va["members"].size(), 1u);
  EXPECT_EQ(va["departed"][0]["id"], db->id());
}

TEST(ClusterDaemon, ALaunchRequestIsValidatedBeforeAnyMemberIsAsked) {
  Loop loop;
  DaemonOptions a;
  a.secret = "s";
  a.probe_links = false;
  a.control_path = TempSocket("launch");
  Daemon* da = loop.Start(a);
  ASSERT_NE(da, nullptr);
  const std::string self = da->id();
  const std::string stranger(32, 'a');
  struct Case {
    std::vector<std::string> members, args;
    std::string error;
  };
  const Case cases[] = {
      {{self, stranger}, {"run", "-m", "m.gguf"}, "is not up"},
      {{stranger, self}, {"run"}, "rank 0 must be this member"},
      {{self}, {"run"}, "needs 2 to 63 members"},
      {{self, stranger}, {"sh", "-c", "true"}, "must start with run or serve"},
      {{self, "not-an-id"}, {"run"}, "bad member id"},
  };
  for (const Case& c : cases) {
    auto r = RequestLaunch(a.control_path, c.members, c.args, 4000, 5);
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << r.status().message();
  }
}

TEST(ClusterDaemon, ASecretIsRequiredAndPeersMustBeHostPort) {
  boost::asio::io_context io;
  DaemonOptions o;
  o.port = 0;
  o.multicast = false;
  auto d = Daemon::Create(io, o, Facts{});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("secret is required"), std::string::npos);
  o.secret = "s";
  o.peers = {"no-port"};
  d = Daemon::Create(io, o, Facts{});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not HOST:PORT"), std::string::npos);
}

}  // namespace
}  // namespace loom::cluster
