// Test-only: tensor-parallel shards run by threads of one process, their partial outputs summed in
// rank order (a model::Collective without any transport).  Included by *_test.cc files only.
#pragma once

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <vector>

#include "loom/model/transformer.h"

namespace loom::model::testing {

// Sums buffers across `n` threads: each rank adds its buffer into a shared accumulator in rank
// order, then copies the total back.
class ThreadCollective {
 public:
  explicit ThreadCollective(int n) : n_(n), barrier_(n) {}
  class Rank : public Collective {
   public:
    Rank(ThreadCollective* g, int rank) : g_(g), rank_(rank) {}
    Status AllReduceSum(float* data, int64_t n) override {
      if (rank_ == 0) g_->sum_.assign(static_cast<size_t>(n), 0.0f);
      g_->barrier_.arrive_and_wait();
      for (int r = 0; r < g_->n_; ++r) {
        if (r == rank_) {
          for (int64_t i = 0; i < n; ++i) g_->sum_[static_cast<size_t>(i)] += data[i];
        }
        g_->barrier_.arrive_and_wait();
      }
      std::copy_n(g_->sum_.begin(), n, data);
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
  std::vector<float> sum_;
};

}  // namespace loom::model::testing
