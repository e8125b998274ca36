// The WakeQueue from a thread that stands for the batch engine's: targets run on the io thread,
// as often as woken; targets that are gone are skipped; a closed queue ignores wakes; and waking
// does not allocate on the waking thread (this binary counts every operator new per thread).
#include "loom/serve/wake_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace {
thread_local int64_t allocations = 0;  // operator new calls on this thread
}  // namespace

// The replacements below pair malloc with free, which GCC cannot see through once inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t align) {
  ++allocations;
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace loom::serve {
namespace {

// Counts its wake-ups and notes whether each ran on the io thread.
class Counter : public Wakeable {
 public:
  void OnWake() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    if (std::this_thread::get_id() != io_thread) ++off_thread_;
  }
  int64_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  int64_t off_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return off_thread_;
  }
  std::thread::id io_thread;

 private:
  std::mutex mu_;
  int64_t count_ = 0;
  int64_t off_thread_ = 0;
};

class WakeQueueTest : public ::testing::Test {
 protected:
  WakeQueueTest() : guard_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~WakeQueueTest() override {
    guard_.reset();
    io_.stop();
    thread_.join();
    queue_->Close();
  }
  std::shared_ptr<Counter> MakeCounter() {
    auto c = std::make_shared<Counter>();
    c->io_thread = thread_.get_id();
    return c;
  }
  // Waits (up to 10 s) until `c` was woken `n` times.
  static bool WaitFor(Counter& c, int64_t n) {
    for (int i = 0; i < 10000 && c.count() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return c.count() == n;
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::shared_ptr<WakeQueue> queue_ = WakeQueue::Create(io_);
};

TEST_F(WakeQueueTest, TargetsRunOnTheIoThreadAsOftenAsWoken) {
  auto a = MakeCounter();
  auto b = MakeCounter();
  std::thread engine([&] {
    for (int i = 0; i < 500; ++i) {
      queue_->Wake(a);
      if (i % 2 == 0) queue_->Wake(b);
    }
  });
  engine.join();
  EXPECT_TRUE(WaitFor(*a, 500));
  EXPECT_TRUE(WaitFor(*b, 250));
  EXPECT_EQ(a->off_thread(), 0);
  EXPECT_EQ(b->off_thread(), 0);
}

TEST_F(WakeQueueTest, TargetsGoneBeforeTheDrainAreSkipped) {
  auto kept = MakeCounter();
  std::weak_ptr<Counter> gone_weak;
  {
    // Hold the io thread so that the wake waits in the list while the target goes.
    std::promise<void> release;
    boost::asio::post(io_, [f = release.get_future().share()] { f.wait(); });
    auto gone = MakeCounter();
    gone_weak = gone;
    queue_->Wake(gone);
    queue_->Wake(kept);
    gone.reset();
    release.set_value();
  }
  EXPECT_TRUE(WaitFor(*kept, 1));
  EXPECT_TRUE(gone_weak.expired());
}

TEST_F(WakeQueueTest, AClosedQueueIgnoresWakes) {
  auto c = MakeCounter();
  queue_->Wake(c);
  ASSERT_TRUE(WaitFor(*c, 1));
  queue_->Close();
  queue_->Wake(c);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(c->count(), 1);
}

TEST_F(WakeQueueTest, WakingDoesNotAllocateOnTheWakingThread) {
  // As the engine does: a round of wakes (one per running sequence), then the io thread drains.
  constexpr int kTargets = 64;
  std::vector<std::shared_ptr<Counter>> targets;
  std::vector<std::weak_ptr<Wakeable>> weak;
  for (int i = 0; i < kTargets; ++i) {
    targets.push_back(MakeCounter());
    weak.push_back(targets.back());
  }
  std::atomic<int64_t> counted{-1};
  std::thread engine([&] {
    int64_t during = 0;
    for (int round = 0; round < 200; ++round) {
      const int64_t before = allocations;
      for (const auto& w : weak) queue_->Wake(w);
      if (round >= 5) during += allocations - before;  // after the lists have grown
      WaitFor(*targets.back(), round + 1);
    }
    counted = during;
  });
  engine.join();
  EXPECT_EQ(counted.load(), 0);
  EXPECT_EQ(targets.front()->count(), 200);
}

}  // namespace
}  // namespace loom::serve
