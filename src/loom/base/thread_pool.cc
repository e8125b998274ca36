#include "loom/base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOM_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define LOOM_CPU_RELAX() asm volatile("yield")
#else
#define LOOM_CPU_RELAX() ((void)0)
#endif

namespace loom::base {

namespace {
// One step of a spin-wait: pause instructions first (microsecond hand-offs on idle cores), then
// sched_yield, so that a waiter on an oversubscribed machine lets the thread it waits for run.
inline void Relax(int iteration) {
  if (iteration < 1024) {
    LOOM_CPU_RELAX();
  } else {
    sched_yield();
  }
}
}  // namespace

int ThreadPool::AvailableCores() {
#ifdef __linux__
  // The cores this process may run on (taskset, cgroups' cpusets), not all the machine's.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

ThreadPool::ThreadPool(int num_threads, int spin_microseconds)
    : spin_microseconds_(spin_microseconds) {
  if (num_threads <= 0) num_threads = AvailableCores();
  shares_ = std::make_unique<Share[]>(static_cast<size_t>(num_threads));
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunImpl(Fn fn, const void* ctx) {
  if (workers_.empty()) {
    fn(ctx, 0);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  fn(ctx, 0);
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) Relax(i);
}

bool ThreadPool::TakeChunk(std::atomic<uint64_t>& range, int64_t chunk, bool from_back,
                           int64_t* begin, int64_t* end) {
  uint64_t r = range.load(std::memory_order_relaxed);
  for (;;) {
    const auto front = static_cast<int64_t>(r >> 32);
    const auto back = static_cast<int64_t>(r & 0xFFFFFFFFu);
    if (front >= back) return false;
    const int64_t take = std::min(chunk, back - front);
    *begin = from_back ? back - take : front;
    *end = *begin + take;
    const uint64_t left = from_back ? Pack(front, *begin) : Pack(*end, back);
    if (range.compare_exchange_weak(r, left, std::memory_order_relaxed)) return true;
  }
}

bool ThreadPool::NextChunk(int t, int64_t chunk, int64_t* begin, int64_t* end) {
  for (int k = 0; k < size(); ++k) {  // its own share first, then the others'
    if (TakeChunk(shares_[(t + k) % size()].range, chunk, /*from_back=*/k > 0, begin, end)) {
      return true;
    }
  }
  return false;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::microseconds(spin_microseconds_);
      for (int i = 0; gen == seen; ++i) {
        Relax(i);
        gen = generation_.load(std::memory_order_acquire);
        if ((i & 255) == 255 && gen == seen && std::chrono::steady_clock::now() > deadline) {
          std::unique_lock<std::mutex> lock(mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
          gen = generation_.load(std::memory_order_acquire);
        }
      }
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    fn_(ctx_, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace loom::base
