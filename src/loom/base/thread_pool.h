// A fixed pool of worker threads for data-parallel kernels.  The calling thread takes part as
// thread 0.  Workers spin for a bounded time between jobs (waking a blocked thread costs ~20 us in
// the VMs we run on, more than a whole matrix-vector product), then block.  Run() allocates nothing,
// so it can be used in the decode loop.  Not reentrant: one Run() at a time per pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
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

  // ParallelFor for work whose threads may not keep the same pace (one started late, was
  // descheduled, or got less of the memory's bandwidth): thread t takes ParallelFor's range t in
  // chunks of about a kBalanceChunks-th of it, from its front, and a thread whose range is done
  // takes chunks from the back of the others', so that no thread waits for another much longer than
  // one chunk.  f(begin, end) is called once per chunk, boundaries multiples of `grain`, any number
  // of times on each thread; which thread runs a chunk varies from call to call.
  static constexpr int64_t kBalanceChunks = 8;
  template <class F>
  void ParallelForBalanced(int64_t n, int64_t grain, const F& f) {
    if (n <= 0) return;
    const int64_t threads = size();
    const int64_t units = (n + grain - 1) / grain;
    if (threads == 1 || units <= 1 || units >= (int64_t{1} << 32)) {
      ParallelFor(n, grain, f);
      return;
    }
    const int64_t per = (units + threads - 1) / threads;
    const int64_t chunk = per / kBalanceChunks > 1 ? per / kBalanceChunks : 1;
    for (int64_t t = 0; t < threads; ++t) {
      const int64_t begin = t * per < units ? t * per : units;
      const int64_t end = begin + per < units ? begin + per : units;
      shares_[t].range.store(Pack(begin, end), std::memory_order_relaxed);
    }
    // Run's publication of the job (a seq_cst increment the workers acquire) publishes the shares.
    Run([&](int t) {
      int64_t begin = 0, end = 0;
      while (NextChunk(t, chunk, &begin, &end)) f(begin * grain, end * grain < n ? end * grain : n);
    });
  }

  // Number of cores this process may run on.
  static int AvailableCores();

 private:
  using Fn = void (*)(const void* ctx, int thread);
  void RunImpl(Fn fn, const void* ctx);
  void WorkerLoop(int index);

  // ParallelForBalanced's ranges, in units of its grain: front << 32 | back.
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };
  static uint64_t Pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back);
  }
  // Claims [*begin, *end), at most `chunk` units from the front or the back of `range`; false when
  // it is empty.
  static bool TakeChunk(std::atomic<uint64_t>& range, int64_t chunk, bool from_back,
                        int64_t* begin, int64_t* end);
  // The next chunk [*begin, *end) of thread t: from the front of its own share, else from the back
  // of another's; false when every share is taken.
  bool NextChunk(int t, int64_t chunk, int64_t* begin, int64_t* end);

  const int spin_microseconds_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Share[]> shares_;

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
