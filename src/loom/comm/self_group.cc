// The one-rank group: what a process gets without a launcher, so that code written for a group
// runs unchanged on one machine.
#include <cstring>

#include "loom/comm/backends.h"

namespace loom::comm {

namespace {

class SelfGroup final : public Group {
 public:
  explicit SelfGroup(std::string id) : id_(std::move(id)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "self"; }

  Status AllReduceSum(void* data, int64_t count, ElementType type) override {
    if (count < 0 || (count > 0 && data == nullptr) || ElementSize(type) == 0) {
      return InvalidArgumentError("comm/self: all-reduce of ", count, " elements at ", data);
    }
    return OkStatus();
  }
  Status AllGather(const void* in, void* out, int64_t bytes) override {
    if (bytes < 0) return InvalidArgumentError("comm/self: all-gather of ", bytes, " bytes");
    if (bytes > 0 && in != out) std::memmove(out, in, static_cast<size_t>(bytes));
    return OkStatus();
  }
  Status Broadcast(void* data, int64_t bytes, int root) override {
    if (root != 0 || bytes < 0) {
      return InvalidArgumentError("comm/self: broadcast of ", bytes, " bytes from root ", root,
                                  " in a one-rank group");
    }
    return OkStatus();
  }
  Status Send(const void*, int64_t bytes, int dst, int tag) override {
    return InvalidArgumentError("comm/self: send of ", bytes, " bytes to rank ", dst,
                                " in a one-rank group (nobody to receive it)");
  }
  Status Recv(void*, int64_t bytes, int src, int tag) override {
    return InvalidArgumentError("comm/self: recv of ", bytes, " bytes from rank ", src,
                                " in a one-rank group (nobody sends)");
  }
  Status Barrier() override { return OkStatus(); }
  StatusOr<std::unique_ptr<Group>> Split(int color, int key) override {
    if (color == kNoColor) return std::unique_ptr<Group>();
    if (color < 0) return InvalidArgumentError("comm/self: split color ", color, " < 0");
    return std::unique_ptr<Group>(std::make_unique<SelfGroup>(StrCat(id_, "/self")));
  }

 private:
  std::string id_;
};

}  // namespace

StatusOr<std::unique_ptr<Group>> CreateSelfGroup(const GroupConfig& config) {
  if (config.size != 1) {
    return InvalidArgumentError("comm/self: the self backend has one rank, not ", config.size);
  }
  return std::unique_ptr<Group>(std::make_unique<SelfGroup>(config.group_id));
}

}  // namespace loom::comm
