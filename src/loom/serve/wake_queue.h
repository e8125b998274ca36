// Hands "this has new output" from other threads (the batch engine's) to the thread that runs
// `loom serve`'s io_context, which then calls the target's OnWake().
//
// What a wake costs the thread that calls it: a mutex, an append to a list that keeps its capacity,
// and, for the first wake since the io thread last drained the list, one post to the io_context
// whose handler is built in storage this queue owns.  So the engine's decode step stays free of
// heap allocation.  Targets are held weakly and only ever locked (and released) on the io thread:
// one gone by then is skipped.  A target woken several times before a drain is called as often.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace loom::serve {

struct WakeSlot;  // storage for the posted handler (wake_queue.cc)

class Wakeable {
 public:
  virtual ~Wakeable() = default;
  // On the io_context's thread.
  virtual void OnWake() = 0;
};

class WakeQueue : public std::enable_shared_from_this<WakeQueue> {
 public:
  // `io` must outlive the queue's last Wake() (see Close()).
  static std::shared_ptr<WakeQueue> Create(boost::asio::io_context& io);
  ~WakeQueue();

  // Any thread.
  void Wake(const std::weak_ptr<Wakeable>& target);
  // Later Wake()s do nothing, so that a callback that outlives the io_context (a completion the
  // engine still holds) cannot reach it.  Call before the io_context is destroyed.  Any thread.
  void Close();

 private:
  explicit WakeQueue(boost::asio::io_context& io);
  void Drain();  // io thread

  boost::asio::io_context& io_;
  const std::shared_ptr<WakeSlot> slot_;
  std::mutex mu_;
  bool open_ = true;                               // guarded by mu_
  bool posted_ = false;                            // guarded by mu_: a Drain() is on its way
  std::vector<std::weak_ptr<Wakeable>> ready_;     // guarded by mu_
  std::vector<std::weak_ptr<Wakeable>> draining_;  // io thread: swapped with ready_
};

}  // namespace loom::serve
