// A fixed pool of worker threads for data-parallel kernels.  The calling thread takes part as
// thread 0.  Workers spin for a bounded time between jobs (waking a blocked thread costs ~20 us in
// the VMs we run on, more than a whole matrix-vector product), then block.  Run() allocates nothing,
// so it can be used in the decode loop.  Not reentrant: one Run() at a time per pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace loom::base {

class ThreadPool {
 public:
  // `num_threads` >= 1 counts the caller; 0 means one per available core.
  explicit ThreadPool(int num_threads = 0, int spin_microseconds = 2000);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs f(thread_index) for thread_index in [0, size()) concurrently; returns when all are done.
  template <class F>
  void Run(const F& f) {
    RunImpl([](const void* ctx, int t) { (*static_cast<const F*>(ctx))(t); }, &f);
  }

  // Splits [0, n) into size() contiguous ranges whose boundaries are multiples of `grain` and calls
  // f(begin, end) for each non-empty one.
  template <class F>
  void ParallelFor(int64_t n, int64_t grain, const F& f) {
    if (n <= 0) return;
    const int64_t threads = size();
    const int64_t units = (n + grain - 1) / grain;
    const int64_t per = (units + threads - 1) / threads * grain;
    if (threads == 1 || n <= grain) {
      f(int64_t{0}, n);
      return;
    }
    Run([&](int t) {
      const int64_t begin = t * per;
      const int64_t end = begin + per < n ? begin + per : n;
      if (begin < end) f(begin, end);
    });
  }

  // Number of cores this process may run on.
  static int AvailableCores();

 private:
  using Fn = void (*)(const void* ctx, int thread);
  void RunImpl(Fn fn, const void* ctx);
  void WorkerLoop(int index);

  const int spin_microseconds_;
  std::vector<std::thread> workers_;

  // The current job.  Published by bumping generation_; workers acknowledge through pending_.
  Fn fn_ = nullptr;
  const void* ctx_ = nullptr;
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace loom::base
