// One rank of the multi-process comm tests (started by comm_multiprocess_test through the launcher
// or mpirun).  Usage: comm_worker SCENARIO [VICTIM_RANK]
//
// Exit codes: 0 the scenario passed; 3 the operation failed as the scenario expects (the error is
// printed); 1 anything else.  Each rank computes every rank's input itself, so results are checked
// against a serial reference without extra communication.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "loom/base/half.h"
#include "loom/comm/benchmark.h"
#include "loom/comm/config.h"
#include "loom/comm/group.h"
#include "loom/comm/typed.h"

namespace loom::comm {
namespace {

constexpr int kExpectedFailure = 3;

#define CHECK_OK(expr)                                                                           \
  do {                                                                                           \
    const ::loom::Status s_ = (expr);                                                            \
    if (!s_.ok()) {                                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

#define CHECK_TRUE(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #cond, \
                   StrCat(__VA_ARGS__).c_str());                                       \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

int IntValue(int64_t i, int rank) { return static_cast<int>((i * 5 + rank * 11) % 13) - 6; }
uint8_t ByteValue(int64_t i, int rank, int salt) {
  return static_cast<uint8_t>(i * 29 + rank * 7 + salt * 13 + 1);
}

uint64_t Fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// All ranks must hold identical bytes.
void CheckIdenticalEverywhere(Group& g, const void* p, size_t n, const char* what) {
  const uint64_t mine = Fnv(p, n);
  std::vector<uint64_t> all(static_cast<size_t>(g.size()));
  CHECK_OK(g.AllGather(&mine, all.data(), sizeof(mine)));
  for (int r = 0; r < g.size(); ++r) CHECK_TRUE(all[r] == mine, what, ": rank ", r, " differs");
}

void TestAllReduceIntegers(Group& g, ElementType type, int64_t count) {
  const int n = g.size();
  const int64_t es = ElementSize(type);
  std::vector<uint8_t> buf(static_cast<size_t>(count * es));
  auto store = [&](int64_t i, float v) {
    if (type == ElementType::kF32) {
      std::memcpy(buf.data() + i * 4, &v, 4);
    } else {
      const uint16_t h = type == ElementType::kF16 ? base::F32ToF16(v) : base::F32ToBf16(v);
      std::memcpy(buf.data() + i * 2, &h, 2);
    }
  };
  auto load = [&](int64_t i) {
    if (type == ElementType::kF32) {
      float v;
      std::memcpy(&v, buf.data() + i * 4, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, buf.data() + i * 2, 2);
    return type == ElementType::kF16 ? base::F16ToF32(h) : base::Bf16ToF32(h);
  };
  for (int64_t i = 0; i < count; ++i) store(i, static_cast<float>(IntValue(i, g.rank())));
  CHECK_OK(g.AllReduceSum(buf.data(), count, type));
  for (int64_t i = 0; i < count; ++i) {
    int want = 0;
    for (int r = 0; r < n; ++r) want += IntValue(i, r);
    CHECK_TRUE(load(i) == static_cast<float>(want), ElementTypeName(type), " count ", count,
               " element ", i, ": got ", load(i), ", want ", want);
  }
}

void TestAllReduceFloats(Group& g, int64_t count) {
  auto value = [](int64_t i, int r) {
    return std::sin(static_cast<double>(i) * 0.37 + r * 1.3) * 1000.0 / (1 + (i % 7));
  };
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>(value(i, g.rank()));
  CHECK_OK(AllReduceSum(g, std::span<float>(v)));
  for (int64_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < g.size(); ++r) want += static_cast<float>(value(i, r));
    CHECK_TRUE(std::fabs(v[i] - want) <= 1e-3 + 1e-5 * std::fabs(want), "float element ", i,
               ": got ", v[i], ", want ", want);
  }
  CheckIdenticalEverywhere(g, v.data(), v.size() * 4, "float all-reduce");
}

void TestAllGather(Group& g, int64_t bytes, bool in_place) {
  const int n = g.size();
  std::vector<uint8_t> out(static_cast<size_t>(bytes * n), 0xEE);
  std::vector<uint8_t> in(static_cast<size_t>(bytes));
  for (int64_t j = 0; j < bytes; ++j) in[j] = ByteValue(j, g.rank(), 1);
  if (in_place && bytes > 0) std::memcpy(out.data() + g.rank() * bytes, in.data(), in.size());
  CHECK_OK(g.AllGather(in_place ? out.data() + g.rank() * bytes : in.data(), out.data(), bytes));
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < bytes; ++j) {
      CHECK_TRUE(out[r * bytes + j] == ByteValue(j, r, 1), "all-gather ", bytes, " B: rank ", r,
                 " byte ", j);
    }
  }
}

void TestBroadcast(Group& g, int64_t bytes, int root) {
  std::vector<uint8_t> buf(static_cast<size_t>(bytes));
  for (int64_t j = 0; j < bytes; ++j) buf[j] = g.rank() == root ? ByteValue(j, root, 2) : 0xEE;
  CHECK_OK(g.Broadcast(buf.data(), bytes, root));
  for (int64_t j = 0; j < bytes; ++j) {
    CHECK_TRUE(buf[j] == ByteValue(j, root, 2), "broadcast ", bytes, " B from ", root, " byte ", j);
  }
}

void Collectives(Group& g) {
  const int n = g.size();
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{n - 1}, int64_t{1000}, int64_t{4097},
                        int64_t{65539}, int64_t{300001}}) {
    if (count > 0) TestAllReduceIntegers(g, ElementType::kF32, count);
  }
  for (int64_t count : {5, 3001, 200003}) {
    TestAllReduceIntegers(g, ElementType::kF16, count);
    TestAllReduceIntegers(g, ElementType::kBF16, count);
  }
  TestAllReduceFloats(g, 2048);
  TestAllReduceFloats(g, 100003);
  for (int64_t bytes : {0, 1, 13, 4096, (1 << 20) + 5}) {
    TestAllGather(g, bytes, false);
    TestAllGather(g, bytes, true);
  }
  for (int root = 0; root < n; ++root) {
    for (int64_t bytes : {0, 1, 1000, (3 << 20) + 1}) TestBroadcast(g, bytes, root);
  }
  for (int i = 0; i < 3; ++i) CHECK_OK(g.Barrier());
  // A message that arrives while its receiver is inside a collective waits for its Recv.
  const int right = (g.rank() + 1) % n, left = (g.rank() + n - 1) % n;
  if (n > 1) {
    const int64_t token = 1000 + g.rank();
    CHECK_OK(SendValue(g, token, right, 9));
    float x = 1;
    CHECK_OK(g.AllReduceSum(&x, 1, ElementType::kF32));
    CHECK_TRUE(x == n, "all-reduce after send: ", x);
    auto got = RecvValue<int64_t>(g, left, 9);
    CHECK_OK(got.status());
    CHECK_TRUE(*got == 1000 + left, "token from ", left, ": ", *got);
  }
}

void SendRecv(Group& g) {
  const int n = g.size();
  const int me = g.rank();
  // Small messages in every direction, sent before anyone receives and received in reverse tag
  // order.  (Small enough for every backend to buffer: Open MPI's shared-memory eager limit is
  // 4 KiB; larger sends wait for their receiver, as MPI_Send does.)
  const int64_t sizes[] = {0, 1, 100, 1000, 2000};
  auto fill = [&](std::vector<uint8_t>& v, int src, int dst, int tag) {
    for (size_t j = 0; j < v.size(); ++j)
      v[j] = ByteValue(static_cast<int64_t>(j), src, dst * 5 + tag);
  };
  for (int dst = 0; dst < n; ++dst) {
    if (dst == me) continue;
    for (int tag = 0; tag < 5; ++tag) {
      std::vector<uint8_t> v(static_cast<size_t>(sizes[tag]));
      fill(v, me, dst, tag);
      CHECK_OK(g.Send(v.data(), sizes[tag], dst, tag));
    }
  }
  for (int src = 0; src < n; ++src) {
    if (src == me) continue;
    for (int tag = 4; tag >= 0; --tag) {
      std::vector<uint8_t> v(static_cast<size_t>(sizes[tag])), want(v.size());
      fill(want, src, me, tag);
      CHECK_OK(g.Recv(v.data(), sizes[tag], src, tag));
      CHECK_TRUE(v == want, "message from ", src, " tag ", tag);
    }
  }
  // Ordering: 50 messages with one tag arrive in order.
  if (n > 1) {
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    for (int i = 0; i < 50; ++i) CHECK_OK(SendValue(g, i * 3 + me, right, 1));
    for (int i = 0; i < 50; ++i) {
      auto v = RecvValue<int>(g, left, 1);
      CHECK_OK(v.status());
      CHECK_TRUE(*v == i * 3 + left, "message ", i, " from ", left, ": ", *v);
    }
    // Large messages around the ring (even ranks send first, odd ranks receive first).
    std::vector<uint8_t> big(3 << 20), got(big.size());
    for (size_t j = 0; j < big.size(); ++j) big[j] = ByteValue(static_cast<int64_t>(j), me, 3);
    auto send = [&] { CHECK_OK(g.Send(big.data(), static_cast<int64_t>(big.size()), right, 2)); };
    auto recv = [&] {
      CHECK_OK(g.Recv(got.data(), static_cast<int64_t>(got.size()), left, 2));
      for (size_t j = 0; j < got.size(); ++j) {
        CHECK_TRUE(got[j] == ByteValue(static_cast<int64_t>(j), left, 3), "big byte ", j);
      }
    };
    if (me % 2 == 0) {
      send();
      recv();
    } else {
      recv();
      send();
    }
  }
}

void Splits(Group& g) {
  const int n = g.size();
  const int me = g.rank();
  // Two groups by parity, in reverse rank order.
  auto sub = g.Split(me % 2, -me);
  CHECK_OK(sub.status());
  Group& s = **sub;
  std::vector<int> members;
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == me % 2) members.push_back(r);
  }
  CHECK_TRUE(s.size() == static_cast<int>(members.size()), "sub size ", s.size());
  CHECK_TRUE(members[s.rank()] == me, "sub rank ", s.rank(), " for rank ", me);
  float v = static_cast<float>(me + 1);
  CHECK_OK(s.AllReduceSum(&v, 1, ElementType::kF32));
  float want = 0;
  for (int m : members) want += static_cast<float>(m + 1);
  CHECK_TRUE(v == want, "sub all-reduce ", v, " want ", want);
  // Parent and child stay usable side by side.
  float p = 1;
  CHECK_OK(g.AllReduceSum(&p, 1, ElementType::kF32));
  CHECK_TRUE(p == n, "parent after split: ", p);
  TestBroadcast(s, 5000, 0);
  // The last rank opts out; the others form one group ordered by rank.
  auto rest = g.Split(me == n - 1 ? kNoColor : 0, 0);
  CHECK_OK(rest.status());
  if (me == n - 1) {
    CHECK_TRUE(*rest == nullptr, "kNoColor gave a group");
  } else {
    CHECK_TRUE((*rest)->size() == n - 1 && (*rest)->rank() == me, "rest group");
    TestAllReduceIntegers(**rest, ElementType::kF32, 70000);
    // A split of a split.
    auto inner = (*rest)->Split(0, 0);
    CHECK_OK(inner.status());
    CHECK_OK((*inner)->Barrier());
  }
  CHECK_OK(g.Barrier());
}

void Bench(Group& g) {
  BenchOptions o;
  o.min_bytes = 64;
  o.max_bytes = 1 << 20;
  o.iters = 3;
  o.warmup = 1;
  o.check = true;
  for (ElementType t : {ElementType::kF32, ElementType::kBF16}) {
    o.dtype = t;
    auto rows = RunCommBenchmark(g, o, nullptr);
    CHECK_OK(rows.status());
    for (const BenchRow& r : *rows)
      CHECK_TRUE(r.errors == 0, r.op, " ", r.bytes, " B failed check");
  }
}

int ExpectFailure(const Status& s, int rank, double seconds) {
  if (s.ok()) {
    std::fprintf(stderr, "rank %d: expected a failure but the operation succeeded\n", rank);
    return 1;
  }
  std::printf("rank %d: failed as expected after %.3f s: %s\n", rank, seconds,
              s.ToString().c_str());
  return kExpectedFailure;
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: comm_worker SCENARIO [VICTIM]\n");
    return 1;
  }
  const std::string scenario = argv[1];
  const int victim = argc > 2 ? std::atoi(argv[2]) : -1;
  auto config = GroupConfigFromEnvironment();
  CHECK_OK(config.status());
  const int my_rank = config->rank;
  if (scenario == "absent" && my_rank == victim) return 0;  // never joins
  if (scenario == "wrong_secret" && my_rank == victim) config->secret = "not the group secret";
  const auto t0 = std::chrono::steady_clock::now();
  auto group = CreateGroup(*config);
  if (scenario == "absent" || scenario == "wrong_secret") {
    return ExpectFailure(group.status(), my_rank, Since(t0));
  }
  CHECK_OK(group.status());
  Group& g = **group;
  if (config->backend != "mpi") CHECK_TRUE(g.rank() == my_rank, "rank ", g.rank());
  if (scenario == "all") {
    Collectives(g);
    SendRecv(g);
    Splits(g);
    Bench(g);
    CHECK_OK(g.Barrier());
    std::printf("rank %d of %d (%s): all ok\n", g.rank(), g.size(),
                std::string(g.backend()).c_str());
    return 0;
  }
  if (scenario == "die" || scenario == "hang") {
    CHECK_OK(g.Barrier());
    if (g.rank() == victim) {
      if (scenario == "die") ::_exit(9);
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return 0;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> data(1 << 18);  // alternates one-shot and ring sizes
    Status s;
    for (int i = 0; i < 100000 && s.ok(); ++i) {
      s = g.AllReduceSum(data.data(), i % 2 == 0 ? 64 : static_cast<int64_t>(data.size()),
                         ElementType::kF32);
    }
    const int rc = ExpectFailure(s, g.rank(), Since(start));
    // Later calls report the same failure at once.
    const Status again = g.Barrier();
    if (again.ok()) return 1;
    return rc;
  }
  if (scenario == "wrong_size") {
    std::vector<float> data(2000);
    return ExpectFailure(
        g.AllReduceSum(data.data(), g.rank() == 0 ? 1000 : 1001, ElementType::kF32), g.rank(),
        Since(t0));
  }
  if (scenario == "mismatch_op") {
    std::vector<float> data(100);
    const Status s = g.rank() == 0 ? g.Broadcast(data.data(), 400, 0)
                                   : g.AllReduceSum(data.data(), 100, ElementType::kF32);
    // The root of a broadcast may finish before anyone looks at its message.
    if (g.rank() == 0 && s.ok()) return ExpectFailure(g.Barrier(), g.rank(), Since(t0));
    return ExpectFailure(s, g.rank(), Since(t0));
  }
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
  return 1;
}

}  // namespace
}  // namespace loom::comm

int main(int argc, char** argv) { return loom::comm::Main(argc, argv); }
