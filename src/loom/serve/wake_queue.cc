#include "loom/serve/wake_queue.h"

#include <atomic>
#include <cstddef>

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/post.hpp>

namespace loom::serve {

// Room for the one handler a queue has posted at a time: Asio's operation around a lambda that
// holds a shared_ptr, and the allocator below (about 100 bytes with Boost 1.81).  A request that
// does not fit, or a second one while the slot is taken, falls back to the heap rather than fail.
struct WakeSlot {
  alignas(std::max_align_t) std::byte bytes[256];
  std::atomic<bool> in_use{false};
};

namespace {

// Hands out the slot.  Copies share it, so that it lives as long as the operation built in it
// (Asio keeps a copy of the allocator until the operation's memory is given back).
template <class T>
class SlotAllocator {
 public:
  using value_type = T;
  explicit SlotAllocator(std::shared_ptr<WakeSlot> slot) : slot_(std::move(slot)) {}
  template <class U>
  SlotAllocator(const SlotAllocator<U>& other) : slot_(other.slot()) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n * sizeof(T) <= sizeof(slot_->bytes) && alignof(T) <= alignof(std::max_align_t) &&
        !slot_->in_use.exchange(true, std::memory_order_acquire)) {
      return reinterpret_cast<T*>(slot_->bytes);
    }
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (reinterpret_cast<std::byte*>(p) == slot_->bytes) {
      slot_->in_use.store(false, std::memory_order_release);
      return;
    }
    std::allocator<T>().deallocate(p, n);
  }

  const std::shared_ptr<WakeSlot>& slot() const { return slot_; }
  template <class U>
  bool operator==(const SlotAllocator<U>& other) const {
    return slot_ == other.slot();
  }
  template <class U>
  bool operator!=(const SlotAllocator<U>& other) const {
    return slot_ != other.slot();
  }

 private:
  std::shared_ptr<WakeSlot> slot_;
};

constexpr size_t kReadyReserve = 256;  // wakes between two drains before the list must grow

}  // namespace

std::shared_ptr<WakeQueue> WakeQueue::Create(boost::asio::io_context& io) {
  return std::shared_ptr<WakeQueue>(new WakeQueue(io));
}

WakeQueue::WakeQueue(boost::asio::io_context& io)
    : io_(io), slot_(std::make_shared<WakeSlot>()) {
  ready_.reserve(kReadyReserve);
  draining_.reserve(kReadyReserve);
}

WakeQueue::~WakeQueue() = default;

void WakeQueue::Wake(const std::weak_ptr<Wakeable>& target) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return;
  ready_.push_back(target);
  if (posted_) return;
  posted_ = true;
  // The handler keeps the queue alive until it ran (or the io_context dropped it).
  boost::asio::post(io_, boost::asio::bind_allocator(SlotAllocator<void>(slot_),
                                                     [self = shared_from_this()] {
                                                       self->Drain();
                                                     }));
}

void WakeQueue::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = false;
  ready_.clear();
}

void WakeQueue::Drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_ = false;
    draining_.swap(ready_);
  }
  for (const std::weak_ptr<Wakeable>& weak : draining_) {
    if (auto target = weak.lock()) target->OnWake();
  }
  draining_.clear();
}

}  // namespace loom::serve
