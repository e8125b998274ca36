// Test-only: tensor-parallel shards run by threads of one process, their partial outputs summed in
// SumTree order (a model::Collective without any transport).  Included by *_test.cc files only.
#pragma once

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <vector>

#include "loom/kernels/ops.h"
#include "loom/model/transformer.h"

namespace loom::model::testing {

// Sums buffers across `n` threads as the pod's collective does: every rank sees every rank's
// buffer and adds them in SumTree's order (kernels/ops.h).
class ThreadCollective {
 public:
  explicit ThreadCollective(int n) : n_(n), barrier_(n), parts_(static_cast<size_t>(n)) {}
  class Rank : public Collective {
   public:
    Rank(ThreadCollective* g, int rank) : g_(g), rank_(rank) {}
    Status AllReduceSum(float* data, int64_t n) override {
      g_->parts_[static_cast<size_t>(rank_)].assign(data, data + n);
      g_->barrier_.arrive_and_wait();
      std::vector<std::vector<float>> copies = g_->parts_;
      std::vector<float*> parts;
      for (auto& c : copies) parts.push_back(c.data());
      kernels::SumTree(parts.data(), g_->n_, n);
      std::copy_n(parts[0], n, data);
      g_->barrier_.arrive_and_wait();
      return OkStatus();
    }

   private:
    ThreadCollective* g_;
    int rank_;
  };

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<std::vector<float>> parts_;  // (n) each rank's buffer
};

}  // namespace loom::model::testing
