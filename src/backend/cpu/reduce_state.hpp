// Exact float64 reduction states shared by the interpreter and the compiled kernels' reference.
//
// Semantics (the compiled kernels must match): Min/Max propagate NaN and report the first NaN's
// index; ties go to the lowest index. KMin ranks NaN after every number (as sorting does) and
// ties by index. LogSumExp and SumSoftMaxWeight rescale online by the running maximum.
// With no terms: Sum 0, Min +inf, Max -inf, indices -1, LogSumExp -inf, SumSoftMaxWeight NaN.
// Infinite terms follow torch.logsumexp and torch.softmax: a +inf term makes LogSumExp +inf (all
// +inf too; weighted: log of the sum of the weights of the +inf terms, +inf or NaN), and
// SumSoftMaxWeight NaN (softmax computes inf - inf); -inf terms count 0, so a row of only -inf
// terms is LogSumExp -inf and, like an empty row, SumSoftMaxWeight NaN: no weight is defined there
// (0 / 0), as in torch.softmax and KeOps. NaN gives NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "tessel/reduction.hpp"

namespace tessel {

class ReduceState {
 public:
  ReduceState(ReductionOp op, int dim, int weight_dim, int k)
      : op_(op), d_(dim), wd_(weight_dim), k_(k) {
    const int n = op == ReductionOp::LogSumExp || op == ReductionOp::SumSoftMaxWeight
                      ? std::max(wd_, 1)
                      : is_kmin() ? k_ : d_;
    val_.resize(n);
    idx_.resize(n);
    reset();
  }

  void reset() {
    const double inf = std::numeric_limits<double>::infinity();
    const double init = is_max() ? -inf : (is_min() || is_kmin()) ? inf : 0.0;
    std::fill(val_.begin(), val_.end(), init);
    std::fill(idx_.begin(), idx_.end(), -1);
    filled_ = 0;
    heap_.clear();
    m_ = -inf;
    s_ = 0;
    nan_ = false;
  }

  void push(const double* f, const double* w, int64_t j) {
    if (is_min() || is_max()) {
      for (int c = 0; c < d_; ++c) {
        const double v = f[c];
        const bool better = is_min() ? v < val_[c] : v > val_[c];
        if (idx_[c] < 0 || (std::isnan(v) && !std::isnan(val_[c])) || better) {
          val_[c] = v;
          idx_[c] = j;
        }
      }
    } else if (is_kmin()) {
      push_kmin(f[0], j);
    } else if (op_ == ReductionOp::LogSumExp || op_ == ReductionOp::SumSoftMaxWeight) {
      push_softmax(f[0], w);
    } else {
      for (int c = 0; c < d_; ++c) val_[c] += f[c];
    }
  }

  // Calls out(output, component, value) for every output entry.
  // Not const: a heap-kept K-best list is sorted into place first.
  template <class Out>
  void finish(Out out) {
    if (!heap_.empty()) {
      std::sort_heap(heap_.begin(), heap_.end(), kbefore);
      for (size_t q = 0; q < heap_.size(); ++q) val_[q] = heap_[q].first, idx_[q] = heap_[q].second;
      heap_.clear();
    }
    switch (op_) {
      case ReductionOp::Min:
      case ReductionOp::Max:
      case ReductionOp::KMin:
        for (size_t c = 0; c < val_.size(); ++c) out(0, static_cast<int>(c), val_[c]);
        break;
      case ReductionOp::ArgMin:
      case ReductionOp::ArgMax:
      case ReductionOp::ArgKMin:
        for (size_t c = 0; c < idx_.size(); ++c)
          out(0, static_cast<int>(c), static_cast<double>(idx_[c]));
        break;
      case ReductionOp::MinArgMin:
      case ReductionOp::MaxArgMax:
      case ReductionOp::KMinArgKMin:
        for (size_t c = 0; c < val_.size(); ++c) {
          out(0, static_cast<int>(c), val_[c]);
          out(1, static_cast<int>(c), static_cast<double>(idx_[c]));
        }
        break;
      case ReductionOp::LogSumExp:
        for (size_t c = 0; c < val_.size(); ++c)
          out(0, static_cast<int>(c),
              nan_ ? NAN : s_zero(c) ? -std::numeric_limits<double>::infinity()
                                     : m_ + std::log(val_[c]));
        break;
      case ReductionOp::SumSoftMaxWeight:
        for (size_t c = 0; c < val_.size(); ++c)
          out(0, static_cast<int>(c),
              nan_ || m_ == INFINITY || std::isnan(val_[c]) || s_ == 0 ? NAN : val_[c] / s_);
        break;
      default:
        for (size_t c = 0; c < val_.size(); ++c) out(0, static_cast<int>(c), val_[c]);
    }
  }

 private:
  bool is_min() const {
    return op_ == ReductionOp::Min || op_ == ReductionOp::ArgMin || op_ == ReductionOp::MinArgMin;
  }
  bool is_max() const {
    return op_ == ReductionOp::Max || op_ == ReductionOp::ArgMax || op_ == ReductionOp::MaxArgMax;
  }
  bool is_kmin() const {
    return op_ == ReductionOp::KMin || op_ == ReductionOp::ArgKMin ||
           op_ == ReductionOp::KMinArgKMin;
  }
  bool s_zero(size_t c) const { return val_[c] == 0.0 && m_ == -INFINITY; }

  static bool ranks_before(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); }

  // A K-best list kept sorted costs O(K) per accepted term: fine for a few dozen, quadratic for
  // K in the thousands (the first K terms are all accepted). Past kSortedK the K best wait in a
  // max-heap (O(log K) per term) ordered by (rank, index) and are sorted once per row.
  static constexpr int kSortedK = 64;
  static bool kbefore(const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
    return ranks_before(a.first, b.first) || (!ranks_before(b.first, a.first) && a.second < b.second);
  }

  void push_kmin(double v, int64_t j) {
    if (k_ > kSortedK) {
      const std::pair<double, int64_t> t{v, j};
      if (static_cast<int>(heap_.size()) < k_) {
        heap_.push_back(t);
        std::push_heap(heap_.begin(), heap_.end(), kbefore);
      } else if (kbefore(t, heap_.front())) {
        std::pop_heap(heap_.begin(), heap_.end(), kbefore);
        heap_.back() = t;
        std::push_heap(heap_.begin(), heap_.end(), kbefore);
      }
      return;
    }
    int pos = filled_;
    while (pos > 0 && ranks_before(v, val_[pos - 1])) --pos;
    if (pos >= k_) return;
    const int last = std::min(filled_, k_ - 1);
    for (int q = last; q > pos; --q) val_[q] = val_[q - 1], idx_[q] = idx_[q - 1];
    val_[pos] = v;
    idx_[pos] = j;
    filled_ = std::min(filled_ + 1, k_);
  }

  // LogSumExp (val_ = sum of exp(F - m) w, or of exp(F - m)) and SoftMax (val_ = sum exp(F-m) G,
  // s_ = sum exp(F - m)).
  void push_softmax(double v, const double* w) {
    if (std::isnan(v)) nan_ = true;
    if (std::isnan(v)) return;
    if (v == -INFINITY) {
      // Its weight exp(-inf) = 0 adds 0 * w: NaN for an infinite or NaN w, as in the compiled
      // kernels (and KeOps, torch). Skipping the term made an all -inf row with weights -inf 0.
      if (wd_ > 0)
        for (size_t c = 0; c < val_.size(); ++c) val_[c] += 0.0 * w[c];
      return;
    }
    double scale_old = 1.0, term = 1.0;
    if (v > m_) {
      scale_old = m_ == -INFINITY ? 0.0 : std::exp(m_ - v);
      m_ = v;
    } else {
      term = v == m_ ? 1.0 : std::exp(v - m_);  // +inf terms under m = +inf count 1, not NaN
    }
    const bool weighted = wd_ > 0;
    s_ = s_ * scale_old + term;
    for (size_t c = 0; c < val_.size(); ++c)
      val_[c] = val_[c] * scale_old + term * (weighted ? w[c] : 1.0);
  }

  ReductionOp op_;
  int d_, wd_, k_;
  std::vector<double> val_;
  std::vector<int64_t> idx_;
  std::vector<std::pair<double, int64_t>> heap_;  // the K best when k_ > kSortedK
  int filled_ = 0;
  double m_ = 0, s_ = 0;
  bool nan_ = false;
};

}  // namespace tessel
