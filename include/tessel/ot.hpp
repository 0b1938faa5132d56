// Entropic optimal transport between weighted point clouds: log-domain Sinkhorn with ε-scaling,
// balanced, unbalanced and semi-unbalanced, debiased, and its envelope gradients.
//
// The problem: weights a (N) on points x (N, D), b (M) on y (M, D), a cost C(x_i, y_j), the
// temperature eps = blur^p and the marginal penalties rho_x = reach_x^p, rho_y = reach_y^p (none:
// a hard constraint, balanced OT). Dual potentials f (on x) and g (on y) solve
//   f_i = damp_x * softmin_j [C(x_i, y_j) - g_j],  damp_x = 1 / (1 + eps / rho_x)  (1: balanced)
//   softmin_j [c_j] = -eps log sum_j b_j exp(-c_j / eps)
// and g symmetrically. Every softmin is one tessel LogSumExp reduction (a compiled kernel that
// streams over j: memory O(N + M), never the N x M matrix). eps descends from diameter^p to
// blur^p by factors scaling^p (GeomLoss's epsilon_schedule), one iteration per value; a last
// "extrapolation" step then recomputes every potential from the converged ones, so that the
// potentials depend on x and y through one softmin only (the envelope theorem's gradients).
//
// With debias, the symmetric problems (a, x) <-> (a, x) and (b, y) <-> (b, y) run alongside and
// give p (on x) and q (on y): the Sinkhorn divergence is OT(a, b) - OT(a, a) / 2 - OT(b, b) / 2.
// Potentials are kept in float64 whatever the dtype; the reductions run in the inputs' dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/array.hpp"
#include "tessel/formula.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

enum class SinkhornUpdate : uint8_t {
  Symmetric,    // f and g both from the previous pair, then averaged with it (GeomLoss's)
  Alternating,  // f from g, then g from the new f (classic Sinkhorn; no averaging)
  /// Symmetric along the schedule, then alternating at blur^p (tol > 0): averaged updates are
  /// robust while eps descends but converge slowly at a small eps. The debiasing problems average.
  SymmetricThenAlternating,
};

struct SinkhornOptions {
  /// The cost is |x - y| (p = 1) or |x - y|^2 / 2 (p = 2) unless `cost` is given; p also sets
  /// eps = blur^p, rho = reach^p and the schedule's start diameter^p, for any cost.
  double p = 2;
  /// A scalar formula C(X, Y) of exactly one i-variable X and one j-variable Y, both of the
  /// points' dimension (any indices): e.g. sqdist(vi(0, 3), vj(1, 3)) / 2. Null: the p-cost.
  Formula cost;
  double blur = 0.05;
  std::optional<double> reach;             // both marginals; none: balanced
  std::optional<double> reach_x, reach_y;  // per marginal (semi-unbalanced); override `reach`
  std::optional<double> diameter;          // none: the bounding box diagonal of x and y
  double scaling = 0.5;                    // ratio of successive blurs, in (0, 1)
  bool debias = true;
  SinkhornUpdate update = SinkhornUpdate::Symmetric;
  /// tol > 0: once eps has reached blur^p, stop when the marginal error (see SinkhornResult) of
  /// every problem is <= tol, and go on at blur^p past the schedule until it is or `max_iter`
  /// iterations ran in all (the schedule always runs whole). tol = 0: exactly the schedule
  /// (GeomLoss's behaviour).
  double tol = 0;
  int64_t max_iter = 1000;
  bool last_extrapolation = true;
  Options eval;  // options of the reductions (backend, threads, accumulate_f64, ...)
};

/// A warm start: potentials from a coarser solve (float64; p and q with debias), the temperature
/// they are at, and the temperatures still to run (descending; may be empty). The loop starts
/// from them instead of zero potentials at diameter^p, and goes on at blur^p past `schedule` while
/// tol asks it to. No start (empty f): the loop runs GeomLoss's whole schedule from zero.
struct SinkhornStart {
  double eps = 0;
  std::vector<double> f, g, p, q;
  std::vector<double> schedule;
};

/// Block-sparse softmins by clusters (multiscale Sinkhorn). x and y are sorted by cluster: the
/// points [bounds_x[c], bounds_x[c + 1]) form the cluster c of x (Kx + 1 offsets), bounds_y
/// likewise. cmin_xy (Kx * Ky, row-major) is a lower bound of the cost between any point of a
/// cluster of x and any of a cluster of y (e.g. the cost of the gap between their balls); cmin_xx
/// and cmin_yy serve the debiasing problems. Each softmin visits the blocks (I, J) with
///   max_{i in I} f_i + max_{j in J} g_j - cmin_IJ >= -tau eps,
/// the mask recomputed from the potentials after every step of the schedule (and from the start's
/// potentials before the first), then held while the loop runs on at blur^p, so that the errors
/// it stops on are those of one problem. Without tau every block is kept. Empty bounds_x: dense.
struct SinkhornClusters {
  std::vector<int64_t> bounds_x, bounds_y;
  std::vector<double> cmin_xy, cmin_xx, cmin_yy;
  std::optional<double> tau;
};

/// One iteration of the loop: its eps and the marginal errors of the potentials entering it,
/// L1 distances in mass units: |pi 1 - a exp(-f / rho_x)|_1 + |pi^T 1 - b exp(-g / rho_y)|_1
/// (the exponentials are 1 when balanced), pi the plan of (f, g) at that eps. Zero at the fixed
/// point. With alternating updates: the pair after the f update, whose row marginal is exact.
/// error_x / error_y: the same for the debiasing problems (0 without debias).
struct SinkhornIteration {
  double eps = 0;
  double error = 0;
  double error_x = 0, error_y = 0;
};

struct SinkhornResult {
  /// The potentials after the last extrapolation, in the inputs' dtype: f (N) and g (M) of the
  /// x-y problem, p (N) and q (M) of the x-x and y-y problems (shape (0,) without debias).
  Array f, g, p, q;
  /// The potentials the last extrapolation started from (float64), which define the softmins the
  /// returned potentials came from: what the envelope gradients read.
  std::vector<double> f_in, g_in, p_in, q_in;
  double eps = 0;                          // the final temperature, blur^p
  std::optional<double> rho_x, rho_y;      // the marginal penalties (none: balanced)
  double diameter = 0;                     // the schedule's start
  std::vector<SinkhornIteration> history;  // one entry per iteration of the loop
  /// With clusters: the masks the softmins last ran with (row-major, Kx * Ky, Kx * Kx, Ky * Ky;
  /// 1 = kept), the last two with debias. Empty without clusters.
  std::vector<uint8_t> keep_xy, keep_xx, keep_yy;
  bool converged = false;   // the last errors were <= tol (tol > 0); false when tol = 0
  std::string str() const;  // e.g. "12 iterations, eps 0.0025, marginal error 3e-07"
};

/// GeomLoss's schedule: diameter^p, then exp(k) for k from p log(diameter) down to (excluded)
/// p log(blur) in steps of p log(scaling), then blur^p.
std::vector<double> epsilon_schedule(double p, double diameter, double blur, double scaling);

/// Solves the entropic OT problem between (a, x) and (b, y). a: (N) or (N, 1), nonnegative with
/// a positive sum; x: (N, D); b, y likewise; float32 or float64, all the same dtype. Zero
/// weights are allowed (their log is taken as -1e5, as GeomLoss does). Balanced problems need
/// equal total masses. The weights are CPU arrays; the points may be CUDA arrays (both on one
/// device, and then opt.diameter is required): every reduction then runs on that GPU, with only
/// O(N + M) potentials crossing to and from the host per softmin. With host points,
/// opt.eval.backend = Backend::Cuda runs the reductions on the GPU too (the points uploaded by
/// each call). `start` and `clusters`: see SinkhornStart and SinkhornClusters (multiscale
/// Sinkhorn: a coarse solve's potentials and block-sparse softmins).
SinkhornResult sinkhorn(const ArrayView& a, const ArrayView& x, const ArrayView& b,
                        const ArrayView& y, const SinkhornOptions& opt = {},
                        const SinkhornStart& start = {}, const SinkhornClusters& clusters = {});

/// The envelope gradient of the returned potentials: given cotangents for f, g, p, q (null views
/// for those without one; p, q need debias), writes into grad_x (N, D) and grad_y (M, D) the
/// vector-Jacobian products with respect to the points, each potential differentiated through
/// the last extrapolation's softmin with its inputs (the potentials it started from, the weights
/// and the far side's points) held constant, as GeomLoss does. One Sum reduction per cotangent.
/// The cotangents and grad_x, grad_y are CPU arrays; a, x, b, y as sinkhorn() takes them.
void sinkhorn_potentials_vjp(const ArrayView& a, const ArrayView& x, const ArrayView& b,
                             const ArrayView& y, const SinkhornOptions& opt,
                             const SinkhornResult& result, const ArrayView& cot_f,
                             const ArrayView& cot_g, const ArrayView& cot_p, const ArrayView& cot_q,
                             const ArrayView& grad_x, const ArrayView& grad_y);

}  // namespace tessel
