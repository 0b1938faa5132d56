// The cluster masks of multiscale Sinkhorn and the block-sparse ranges they give the softmins.
#include "algos/sinkhorn_truncation.hpp"

#include <algorithm>
#include <cmath>

#include "algos/sinkhorn_softmin.hpp"
#include "tessel/error.hpp"

namespace tessel::ot_detail {

namespace {

// max of pot over each cluster [b[c], b[c + 1]); -inf for an empty one.
std::vector<double> cluster_max(const std::vector<double>& pot, const std::vector<int64_t>& b) {
  std::vector<double> out(b.size() - 1, -INFINITY);
  for (size_t c = 0; c + 1 < b.size(); ++c)
    for (int64_t i = b[c]; i < b[c + 1]; ++i) out[c] = std::max(out[c], pot[i]);
  return out;
}

// KeOps's triple for a reduction over the columns: the rows' clusters, the running count of
// kept blocks per row cluster, and the columns' intervals of the kept blocks in row order.
void triple(const std::vector<int64_t>& bu, const std::vector<int64_t>& bv,
            const std::vector<uint8_t>& keep, bool transposed, std::vector<int64_t>& ranges,
            std::vector<int64_t>& slices, std::vector<int64_t>& red) {
  const size_t ku = bu.size() - 1, kv = bv.size() - 1;
  const size_t rows = transposed ? kv : ku, cols = transposed ? ku : kv;
  const std::vector<int64_t>& br = transposed ? bv : bu;
  const std::vector<int64_t>& bc = transposed ? bu : bv;
  ranges.clear();
  slices.clear();
  red.clear();
  int64_t count = 0;
  for (size_t r = 0; r < rows; ++r) {
    ranges.insert(ranges.end(), {br[r], br[r + 1]});
    for (size_t c = 0; c < cols; ++c)
      if (keep[transposed ? c * kv + r : r * kv + c]) {
        red.insert(red.end(), {bc[c], bc[c + 1]});
        ++count;
      }
    slices.push_back(count);
  }
}

void check_bounds(const std::vector<int64_t>& b, int64_t n, const char* name) {
  if (b.size() < 2 || b.front() != 0 || b.back() != n)
    detail::fail(kWho, "clusters.", name, " must be the K + 1 >= 2 offsets of the clusters of ",
                 "points sorted by cluster, from 0 to the number of points ", n);
  for (size_t c = 0; c + 1 < b.size(); ++c)
    if (b[c + 1] < b[c])
      detail::fail(kWho, "clusters.", name, " must not decrease; [", c, "] = ", b[c], " > [", c + 1,
                   "] = ", b[c + 1]);
}

void check_cmin(const std::vector<double>& cmin, size_t ku, size_t kv, const char* name) {
  if (cmin.size() != ku * kv)
    detail::fail(kWho, "clusters.", name, " has ", cmin.size(), " values; expected ", ku, " x ", kv,
                 " (one least cost per pair of clusters, row-major)");
  for (size_t k = 0; k < cmin.size(); ++k)
    if (!(cmin[k] >= 0) || !std::isfinite(cmin[k]))
      detail::fail(kWho, "clusters.", name, "[", k, "] = ", cmin[k],
                   "; least costs must be finite and >= 0");
}

}  // namespace

Truncation::Truncation(const std::vector<int64_t>& bounds_u, const std::vector<int64_t>& bounds_v,
                       const std::vector<double>& cmin, std::optional<double> tau,
                       const Options& eval)
    : bu_(bounds_u), bv_(bounds_v), cmin_(cmin), tau_(tau), rows_(eval), cols_(eval) {
  keep_.assign((bu_.size() - 1) * (bv_.size() - 1), 1);
  set_ranges();
}

void Truncation::update(const std::vector<double>& pu, const std::vector<double>& pv, double eps) {
  if (!tau_) return;
  const std::vector<double> fu = cluster_max(pu, bu_), gv = cluster_max(pv, bv_);
  const size_t ku = fu.size(), kv = gv.size();
  const double floor = -*tau_ * eps;
  std::vector<uint8_t> any_col(kv, 0);
  for (size_t i = 0; i < ku; ++i) {
    uint8_t any_row = 0;
    for (size_t j = 0; j < kv; ++j) {
      const uint8_t k = fu[i] + gv[j] - cmin_[i * kv + j] >= floor;
      keep_[i * kv + j] = k;
      any_row |= k;
      any_col[j] |= k;
    }
    // No cluster is left without a partner: its softmins would be +inf.
    if (!any_row)
      for (size_t j = 0; j < kv; ++j) keep_[i * kv + j] = 1;
  }
  for (size_t j = 0; j < kv; ++j)
    if (!any_col[j])
      for (size_t i = 0; i < ku; ++i) keep_[i * kv + j] = 1;
  set_ranges();
}

void Truncation::set_ranges() {
  auto r = std::make_shared<BlockRanges>();
  triple(bu_, bv_, keep_, false, r->ranges_i, r->slices_i, r->redranges_j);
  triple(bu_, bv_, keep_, true, r->ranges_j, r->slices_j, r->redranges_i);
  auto t = std::make_shared<BlockRanges>();
  t->ranges_i = r->ranges_j;
  t->slices_i = r->slices_j;
  t->redranges_j = r->redranges_i;
  t->ranges_j = r->ranges_i;
  t->slices_j = r->slices_i;
  t->redranges_i = r->redranges_j;
  rows_.ranges = std::move(r);
  cols_.ranges = std::move(t);
}

void check_clusters(const SinkhornClusters& c, int64_t n, int64_t m, bool debias) {
  check_bounds(c.bounds_x, n, "bounds_x");
  check_bounds(c.bounds_y, m, "bounds_y");
  const size_t kx = c.bounds_x.size() - 1, ky = c.bounds_y.size() - 1;
  check_cmin(c.cmin_xy, kx, ky, "cmin_xy");
  if (debias) {
    check_cmin(c.cmin_xx, kx, kx, "cmin_xx");
    check_cmin(c.cmin_yy, ky, ky, "cmin_yy");
  }
  if (c.tau && (!(*c.tau > 0) || !std::isfinite(*c.tau)))
    detail::fail(kWho, "clusters.tau must be a finite number > 0 (or none: no truncation), got ",
                 *c.tau);
}

}  // namespace tessel::ot_detail
