// What the Sinkhorn loop and its gradient share: checked point clouds, the cost in a canonical
// form, and the softmin reductions (one LogSumExp per orientation of the cost) with their buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tessel/array.hpp"
#include "tessel/ot.hpp"
#include "tessel/reduction.hpp"

namespace tessel::ot_detail {

inline constexpr const char* kWho = "sinkhorn";
// The log of a zero weight: finite, so that a point of zero mass keeps a finite potential (as in
// GeomLoss), yet exp(h) underflows to 0 in every dtype.
inline constexpr double kLogZero = -1e5;

// A weighted point cloud: the caller's point view (read by the reductions through its strides)
// and its weights read once into float64.
struct Cloud {
  ArrayView pts;
  int64_t n = 0;
  std::vector<double> w, logw;
  double mass = 0;
};

// Checks the weights `w` (named wname) and points `pts` (pname) and reads the weights.
Cloud read_cloud(const ArrayView& w, const ArrayView& pts, const char* wname, const char* pname);

// The problem's constants, checked: dims, dtype, eps, rho per side, the cost as C(vi(0, D),
// vj(1, D)) and whether it is symmetric (C(u, v) = C(v, u), so one reduction serves both
// orientations).
struct Setup {
  int64_t dim = 0;
  DType dtype = DType::Float32;
  Formula cost, cost_t;  // C(u, v) and C^T(u, v) = C(v, u)
  bool symmetric = false;
  double eps = 0;
  std::optional<double> rho_x, rho_y;
};
Setup make_setup(const Cloud& cx, const Cloud& cy, const SinkhornOptions& opt);

// 1 / (1 + eps / rho): the unbalanced update's shrinkage (1 when balanced).
inline double damping(double eps, const std::optional<double>& rho) {
  return rho ? 1.0 / (1.0 + eps / *rho) : 1.0;
}

// s_i = -eps log sum_j exp(h_j - C(u_i, v_j) / eps) with h = log w_v + pot / eps, for one
// orientation of the cost (u the rows, v the columns), and the envelope gradient in u.
class Softmin {
 public:
  Softmin(const Formula& cost, int64_t dim);
  // out[i] = s_i for the rows of `u` against the columns of `v` carrying the potential `pot`.
  void apply(const Cloud& u, const Cloud& v, const std::vector<double>& pot, double eps,
             std::vector<double>& out, const Options& eval) const;
  // grad[i, :] += coef_i * damp * sum_j P_ij dC/du(u_i, v_j), where P_ij = exp(h_j - C_ij / eps
  // - lse_i) is the softmax of the softmin that gave the potential `out` = damp * s (the
  // derivative of `out` in u_i with h held constant), `pot` the potential h was built from.
  void grad_rows(const Cloud& u, const Cloud& v, const std::vector<double>& pot,
                 const std::vector<double>& out, double eps, double damp,
                 const std::vector<double>& coef, std::vector<double>& grad,
                 const Options& eval) const;

 private:
  int64_t dim_;
  Formula cost_;
  Reduction lse_;
  mutable std::optional<Reduction> grad_;  // built on the first gradient
};

// The softmins of both orientations: x rows against y columns, y rows against x columns (one
// reduction when the cost is symmetric).
class Softmins {
 public:
  explicit Softmins(const Setup& s) : xy_(s.cost, s.dim) {
    if (!s.symmetric) yx_own_.emplace(s.cost_t, s.dim);
  }
  const Softmin& xy() const { return xy_; }
  const Softmin& yx() const { return yx_own_ ? *yx_own_ : xy_; }

 private:
  Softmin xy_;
  std::optional<Softmin> yx_own_;
};

// Writes float64 values into a 1-D (n) or 2-D (n, d) view of float dtype, through its strides.
void write_view(const std::vector<double>& v, const ArrayView& out);
// Reads a 1-D (n) or (n, 1) float view into float64.
std::vector<double> read_vector(const ArrayView& v);

}  // namespace tessel::ot_detail
