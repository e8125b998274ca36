#include "loom/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

namespace loom::base {
namespace {

TEST(ThreadPoolTest, RunsEveryThreadIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(4);
  for (int round = 0; round < 1000; ++round) pool.Run([&](int t) { hits[t].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1000);
}

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnceWithGrainAlignedBoundaries) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 31, 32, 33, 1000, 1023}) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      pool.ParallelFor(n, 8, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b % 8, 0);
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << n << " " << i;
    }
  }
}

TEST(ThreadPoolTest, ParallelForBalancedCoversRangeExactlyOnceWithGrainAlignedBoundaries) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 31, 32, 33, 1000, 1023, 100000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      pool.ParallelForBalanced(n, 8, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b % 8, 0);
        EXPECT_LT(b, e);
        EXPECT_LE(e, n);
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << n << " " << i;
    }
  }
}

// The caller (thread 0) blocks in its first chunk until another thread has run a chunk of the
// caller's own share, which only a thread done with its own can take.
TEST(ThreadPoolTest, ParallelForBalancedLetsAFreeThreadTakeTheChunksOfABusyOne) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  constexpr int64_t kN = 64;  // shares [0, 32) and [32, 64), chunks of 32 / kBalanceChunks
  std::atomic<bool> taken{false};
  std::vector<std::atomic<int>> seen(kN);
  pool.ParallelForBalanced(kN, 1, [&](int64_t b, int64_t e) {
    if (b == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!taken.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    } else if (b < kN / 2 && std::this_thread::get_id() != caller) {
      taken.store(true);
    }
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_TRUE(taken.load());
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << i;
}

TEST(ThreadPoolTest, WakesWorkersAfterTheyBlock) {
  ThreadPool pool(3, /*spin_microseconds=*/10);
  std::atomic<int> sum{0};
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers fall asleep
    pool.Run([&](int t) { sum.fetch_add(t + 1); });
  }
  EXPECT_EQ(sum.load(), 20 * (1 + 2 + 3));
}

}  // namespace
}  // namespace loom::base
