// Exact float64 reduction states shared by the interpreter and the compiled kernels' reference.
//
// Semantics (the compiled kernels must match): Min/Max propagate NaN and report the first NaN's
// index; ties go to the lowest index. KMin ranks NaN after every number (as sorting does) and
// ties by index, each formula component on its own list (output column k * dim + c).
// LogSumExp and SumSoftMaxWeight rescale online by the running maximum.
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

#include "reduction/fold_rules.hpp"
#include "reduction/reduction_info.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

class ReduceState {
 public:
  ReduceState(ReductionOp op, int dim, int weight_dim, int k)
      : op_(op), info_(reduction_info(op)), d_(dim), wd_(weight_dim), k_(k) {
    val_.resize(info_.output_dim(d_, wd_, k_));
    idx_.resize(val_.size());
    reset();
  }

  void reset() {
    const double inf = std::numeric_limits<double>::infinity();
    // The SoftMax family keeps its identity -inf in m_; its sums start at 0.
    std::fill(val_.begin(), val_.end(), is_softmax() ? 0.0 : info_.identity);
    std::fill(idx_.begin(), idx_.end(), -1);
    filled_.assign(d_, 0);
    heap_.resize(k_ > kSortedK ? d_ : 0);
    for (auto& h : heap_) h.clear();
    m_ = -inf;
    s_ = 0;
    nan_ = false;
  }

  void push(const double* f, const double* w, int64_t j) {
    if (info_.family == ReductionFamily::Select) {
      for (int c = 0; c < d_; ++c) {
        if (fold::fold_select_takes(f[c], j, val_[c], idx_[c], info_.is_max)) {
          val_[c] = f[c];
          idx_[c] = j;
        }
      }
    } else if (info_.family == ReductionFamily::KSelect) {
      for (int c = 0; c < d_; ++c) push_kmin(c, f[c], j);
    } else if (is_softmax()) {
      push_softmax(f[0], w);
    } else {
      for (int c = 0; c < d_; ++c) val_[c] += f[c];
    }
  }

  // Calls out(output, component, value) for every output entry.
  // Not const: a heap-kept K-best list is sorted into place first.
  template <class Out>
  void finish(Out out) {
    if (info_.family == ReductionFamily::KSelect) return finish_kselect(out);
    if (is_softmax()) {
      for (size_t c = 0; c < val_.size(); ++c) out(0, static_cast<int>(c), softmax_value(c));
      return;
    }
    // Sum and Select: the values, the indices, or both.
    for (int o = 0; o < info_.num_outputs(); ++o)
      for (size_t c = 0; c < val_.size(); ++c)
        out(o, static_cast<int>(c),
            info_.output_is_index(o) ? static_cast<double>(idx_[c]) : val_[c]);
  }

 private:
  // Component c's list is kept at [c * K, (c + 1) * K); the output interleaves the components.
  template <class Out>
  void finish_kselect(Out out) {
    for (size_t c = 0; c < heap_.size(); ++c) {
      std::vector<std::pair<double, int64_t>>& h = heap_[c];
      std::sort_heap(h.begin(), h.end(), kbefore);
      for (size_t q = 0; q < h.size(); ++q)
        val_[c * k_ + q] = h[q].first, idx_[c * k_ + q] = h[q].second;
      h.clear();
    }
    for (int o = 0; o < info_.num_outputs(); ++o)
      for (int q = 0; q < k_; ++q)
        for (int c = 0; c < d_; ++c) {
          const size_t at = static_cast<size_t>(c) * k_ + q;
          out(o, q * d_ + c, info_.output_is_index(o) ? static_cast<double>(idx_[at]) : val_[at]);
        }
  }

  bool is_softmax() const { return info_.family == ReductionFamily::SoftMax; }
  double softmax_value(size_t c) const {
    if (op_ == ReductionOp::LogSumExp)
      return nan_        ? NAN
             : s_zero(c) ? -std::numeric_limits<double>::infinity()
                         : m_ + std::log(val_[c]);
    return nan_ || m_ == INFINITY || std::isnan(val_[c]) || s_ == 0 ? NAN : val_[c] / s_;
  }
  bool s_zero(size_t c) const { return val_[c] == 0.0 && m_ == -INFINITY; }

  // A K-best list kept sorted costs O(K) per accepted term: fine for a few dozen, quadratic for
  // K in the thousands (the first K terms are all accepted). Past kSortedK the K best wait in a
  // max-heap (O(log K) per term) ordered by (rank, index) and are sorted once per row.
  static constexpr int kSortedK = 64;
  static bool kbefore(const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
    return fold::fold_ranks_before(a.first, b.first) ||
           (!fold::fold_ranks_before(b.first, a.first) && a.second < b.second);
  }

  void push_kmin(int c, double v, int64_t j) {
    if (k_ > kSortedK) {
      std::vector<std::pair<double, int64_t>>& h = heap_[c];
      const std::pair<double, int64_t> t{v, j};
      if (static_cast<int>(h.size()) < k_) {
        h.push_back(t);
        std::push_heap(h.begin(), h.end(), kbefore);
      } else if (kbefore(t, h.front())) {
        std::pop_heap(h.begin(), h.end(), kbefore);
        h.back() = t;
        std::push_heap(h.begin(), h.end(), kbefore);
      }
      return;
    }
    const size_t at = static_cast<size_t>(c) * k_;
    fold::fold_kins(val_.data() + at, idx_.data() + at, &filled_[c], k_, v, j);
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
      scale_old = fold::fold_shift_scale(m_, v);
      m_ = v;
    } else {
      term = fold::fold_shift_scale(v, m_);  // +inf terms under m = +inf count 1, not NaN
    }
    const bool weighted = wd_ > 0;
    s_ = s_ * scale_old + term;
    for (size_t c = 0; c < val_.size(); ++c)
      val_[c] = val_[c] * scale_old + term * (weighted ? w[c] : 1.0);
  }

  ReductionOp op_;
  ReductionInfo info_;
  int d_, wd_, k_;
  std::vector<double> val_;
  std::vector<int64_t> idx_;
  // Per component: the K best when k_ > kSortedK, and the sorted lists' fill.
  std::vector<std::vector<std::pair<double, int64_t>>> heap_;
  std::vector<int> filled_;
  double m_ = 0, s_ = 0;
  bool nan_ = false;
};

}  // namespace tessel
