// Exact float64 reduction states shared by the interpreter and the compiled kernels' reference.
//
// Semantics (the compiled kernels must match): Min/Max propagate NaN and report the first NaN's
// index; ties go to the lowest index. KMin ranks NaN after every number (as sorting does) and
// ties by index. LogSumExp and SumSoftMaxWeight rescale online by the running maximum.
// With no terms: Sum 0, Min +inf, Max -inf, indices -1, LogSumExp -inf, SumSoftMaxWeight 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
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
  template <class Out>
  void finish(Out out) const {
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
              nan_ || std::isnan(val_[c]) ? NAN : s_ == 0 ? 0.0 : val_[c] / s_);
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

  void push_kmin(double v, int64_t j) {
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
      term = std::exp(v - m_);
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
  int filled_ = 0;
  double m_ = 0, s_ = 0;
  bool nan_ = false;
};

}  // namespace tessel
