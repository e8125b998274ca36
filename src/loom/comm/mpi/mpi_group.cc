// The mpi backend: Open MPI as the engine, for clusters that already run MPI (started by mpirun;
// rank and size come from MPI).  Each Group call maps to one MPI call (chunked where MPI's int
// counts would overflow); f16 and bf16 sums use user-defined MPI_Ops over our reduction kernels.
//
// MPI collectives cannot be cancelled, so the deadline is enforced by a watchdog thread: when a
// call runs past GroupOptions::timeout_seconds it prints the operation and terminates this process,
// and mpirun then stops the whole job.  A rank that dies is likewise handled by mpirun.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "loom/comm/backends.h"
#include "loom/comm/reduce.h"

namespace loom::comm::mpi {

namespace {

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return StrCat("MPI error ", code);
  return std::string(text, static_cast<size_t>(len));
}

void SumF16Op(void* in, void* inout, int* len, MPI_Datatype*) {
  AddInto(inout, in, *len, ElementType::kF16);
}
void SumBf16Op(void* in, void* inout, int* len, MPI_Datatype*) {
  AddInto(inout, in, *len, ElementType::kBF16);
}

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Terminates the process when an armed call outlives its deadline.
class Watchdog {
 public:
  explicit Watchdog(int rank) : rank_(rank), thread_([this] { Loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Arm(int64_t deadline_ns, const char* what) {
    what_.store(what, std::memory_order_relaxed);
    deadline_ns_.store(deadline_ns, std::memory_order_release);
  }
  void Disarm() { deadline_ns_.store(0, std::memory_order_release); }

 private:
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; })) {
      const int64_t deadline = deadline_ns_.load(std::memory_order_acquire);
      if (deadline != 0 && Now() > deadline) {
        std::fprintf(stderr,
                     "comm/mpi: rank %d: %s exceeded its deadline (LOOM_COMM_TIMEOUT_S); MPI "
                     "calls cannot be cancelled, so this rank exits and mpirun stops the job\n",
                     rank_, what_.load());
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  }

  const int rank_;
  std::atomic<int64_t> deadline_ns_{0};
  std::atomic<const char*> what_{""};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

class MpiGroup final : public Group {
 public:
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
  MpiGroup(MPI_Comm comm, GroupOptions options) : comm_(comm), options_(options) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Op_create(&SumF16Op, /*commute=*/1, &sum_f16_);
    MPI_Op_create(&SumBf16Op, /*commute=*/1, &sum_bf16_);
    watchdog_ = std::make_unique<Watchdog>(rank_);
  }
  ~MpiGroup() override {
    watchdog_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Op_free(&sum_f16_);
    MPI_Op_free(&sum_bf16_);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }

  Status AllReduceSum(void* data, int64_t count, ElementType type) override {
    if (count < 0 || (count > 0 && data == nullptr) || ElementSize(type) == 0) {
      return InvalidArgumentError("comm/mpi: all-reduce of ", count, " elements");
    }
    const MPI_Datatype dt = type == ElementType::kF32 ? MPI_FLOAT : MPI_UINT16_T;
    const MPI_Op op = type == ElementType::kF32   ? MPI_SUM
                      : type == ElementType::kF16 ? sum_f16_
                                                  : sum_bf16_;
    auto* p = static_cast<std::byte*>(data);
    const int64_t es = ElementSize(type);
    Arm("all-reduce");
    for (int64_t off = 0; off < count || off == 0; off += INT_MAX) {
      const int n = static_cast<int>(std::min<int64_t>(count - off, INT_MAX));
      const int rc = MPI_Allreduce(MPI_IN_PLACE, p + off * es, n, dt, op, comm_);
      if (rc != MPI_SUCCESS) return Fail("all-reduce", rc);
      if (count == 0) break;
    }
    watchdog_->Disarm();
    return OkStatus();
  }

  Status AllGather(const void* in, void* out, int64_t bytes) override {
    if (bytes < 0 || bytes > INT_MAX || (bytes > 0 && (in == nullptr || out == nullptr))) {
      return InvalidArgumentError("comm/mpi: all-gather of ", bytes,
                                  " bytes per rank (this backend handles up to 2 GiB)");
    }
    auto* o = static_cast<std::byte*>(out);
    const bool in_place = in == o + rank_ * bytes;
    Arm("all-gather");
    const int rc = MPI_Allgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(bytes), MPI_BYTE,
                                 out, static_cast<int>(bytes), MPI_BYTE, comm_);
    if (rc != MPI_SUCCESS) return Fail("all-gather", rc);
    watchdog_->Disarm();
    return OkStatus();
  }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    if (bytes < 0 || (bytes > 0 && data == nullptr) || root < 0 || root >= size_) {
      return InvalidArgumentError("comm/mpi: broadcast of ", bytes, " bytes from root ", root);
    }
    auto* p = static_cast<std::byte*>(data);
    Arm("broadcast");
    for (int64_t off = 0; off < bytes; off += INT_MAX) {
      const int n = static_cast<int>(std::min<int64_t>(bytes - off, INT_MAX));
      const int rc = MPI_Bcast(p + off, n, MPI_BYTE, root, comm_);
      if (rc != MPI_SUCCESS) return Fail("broadcast", rc);
    }
    watchdog_->Disarm();
    return OkStatus();
  }

  Status Send(const void* data, int64_t bytes, int dst, int tag) override {
    if (dst < 0 || dst >= size_ || dst == rank_ || tag < 0 || tag > kMaxTag || bytes < 0) {
      return InvalidArgumentError("comm/mpi: send of ", bytes, " bytes to rank ", dst, " tag ",
                                  tag);
    }
    const auto* p = static_cast<const std::byte*>(data);
    Arm("send");
    for (int64_t off = 0; off < bytes || off == 0; off += INT_MAX) {
      const int n = static_cast<int>(std::min<int64_t>(bytes - off, INT_MAX));
      const int rc = MPI_Send(p + off, n, MPI_BYTE, dst, tag, comm_);
      if (rc != MPI_SUCCESS) return Fail("send", rc);
      if (bytes == 0) break;
    }
    watchdog_->Disarm();
    return OkStatus();
  }

  Status Recv(void* data, int64_t bytes, int src, int tag) override {
    if (src < 0 || src >= size_ || src == rank_ || tag < 0 || tag > kMaxTag || bytes < 0) {
      return InvalidArgumentError("comm/mpi: recv of ", bytes, " bytes from rank ", src, " tag ",
                                  tag);
    }
    auto* p = static_cast<std::byte*>(data);
    Arm("recv");
    for (int64_t off = 0; off < bytes || off == 0; off += INT_MAX) {
      const int n = static_cast<int>(std::min<int64_t>(bytes - off, INT_MAX));
      MPI_Status st;
      const int rc = MPI_Recv(p + off, n, MPI_BYTE, src, tag, comm_, &st);
      if (rc != MPI_SUCCESS) {
        watchdog_->Disarm();
        return InvalidArgumentError("comm/mpi: rank ", rank_, ": recv of ", bytes,
                                    " bytes from rank ", src, " (tag ", tag,
                                    "): ", MpiErrorText(rc), " (a larger message?)");
      }
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      if (got != n) {
        watchdog_->Disarm();
        return InvalidArgumentError("comm/mpi: rank ", rank_, ": rank ", src, " sent a ", got,
                                    "-byte message (tag ", tag, ") but the receive expects ", n,
                                    " bytes");
      }
      if (bytes == 0) break;
    }
    watchdog_->Disarm();
    return OkStatus();
  }

  Status Barrier() override {
    Arm("barrier");
    const int rc = MPI_Barrier(comm_);
    if (rc != MPI_SUCCESS) return Fail("barrier", rc);
    watchdog_->Disarm();
    return OkStatus();
  }

  StatusOr<std::unique_ptr<Group>> Split(int color, int key) override {
    if (color < 0 && color != kNoColor) {
      return InvalidArgumentError("comm/mpi: split color ", color, " is negative");
    }
    MPI_Comm sub = MPI_COMM_NULL;
    Arm("split");
    const int rc = MPI_Comm_split(comm_, color == kNoColor ? MPI_UNDEFINED : color, key, &sub);
    if (rc != MPI_SUCCESS) return Fail("split", rc);
    watchdog_->Disarm();
    if (sub == MPI_COMM_NULL) return std::unique_ptr<Group>();
    return std::unique_ptr<Group>(std::make_unique<MpiGroup>(sub, options_));
  }

 private:
  void Arm(const char* what) {
    watchdog_->Arm(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                           .count() +
                       static_cast<int64_t>(options_.timeout_seconds * 1e9),
                   what);
  }
  Status Fail(const char* what, int rc) {
    watchdog_->Disarm();
    return UnavailableError("comm/mpi: rank ", rank_, ": ", what, " failed: ", MpiErrorText(rc));
  }

  MPI_Comm comm_;
  GroupOptions options_;
  int rank_ = 0;
  int size_ = 1;
  MPI_Op sum_f16_ = MPI_OP_NULL;
  MPI_Op sum_bf16_ = MPI_OP_NULL;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

bool MpiCompiledIn() { return true; }

StatusOr<std::unique_ptr<Group>> CreateMpiGroup(const GroupConfig& config) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return FailedPreconditionError("comm/mpi: MPI was already finalized");
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      return UnavailableError("comm/mpi: MPI_Init_thread failed (started under mpirun?)");
    }
    // MPI is per process: finalize once, when the process exits, after every group is gone.
    std::atexit(&FinalizeAtExit);
  }
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  auto group = std::make_unique<MpiGroup>(world, config.options);
  if (config.size > 1 && (config.size != group->size() || config.rank != group->rank())) {
    return FailedPreconditionError("comm/mpi: LOOM_RANK/LOOM_WORLD_SIZE say rank ", config.rank,
                                   " of ", config.size, " but MPI says rank ", group->rank(),
                                   " of ", group->size());
  }
  return std::unique_ptr<Group>(std::move(group));
}

}  // namespace loom::comm::mpi
