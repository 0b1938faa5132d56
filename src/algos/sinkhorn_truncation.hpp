// Multiscale Sinkhorn's block-sparse truncation: which pairs of clusters each softmin visits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tessel/ot.hpp"
#include "tessel/reduction.hpp"

namespace tessel::ot_detail {

// The softmins of one problem (rows u against columns v, both sorted by cluster) restricted to
// the cluster pairs (I, J) whose potentials leave them within tau * eps of tightness at the
// least cost between the clusters' balls:
//   max_{i in I} f_i + max_{j in J} g_j - cmin_IJ >= -tau eps.
// The left side bounds f_i + g_j - C_ij for every pair of the block, so a dropped block holds no
// pair of the plan above exp(-tau) times its tight pairs'. Without tau every block is kept.
class Truncation {
 public:
  // bounds_u (Ku + 1 offsets), bounds_v (Kv + 1), cmin (Ku * Kv, row-major), checked by
  // check_clusters. `eval`: the options the softmins run with, ranges added here.
  Truncation(const std::vector<int64_t>& bounds_u, const std::vector<int64_t>& bounds_v,
             const std::vector<double>& cmin, std::optional<double> tau, const Options& eval);
  // The mask from the potentials pu (on u's points) and pv (on v's) at the temperature eps.
  void update(const std::vector<double>& pu, const std::vector<double>& pv, double eps);
  const Options& rows() const { return rows_; }  // softmins of u's points over v's
  const Options& cols() const { return cols_; }  // softmins of v's points over u's
  const std::vector<uint8_t>& keep() const { return keep_; }

 private:
  void set_ranges();
  std::vector<int64_t> bu_, bv_;
  std::vector<double> cmin_;
  std::optional<double> tau_;
  std::vector<uint8_t> keep_;  // Ku * Kv, row-major
  Options rows_, cols_;
};

// Checks the clusters of a multiscale solve against clouds of n (x) and m (y) points.
void check_clusters(const SinkhornClusters& c, int64_t n, int64_t m, bool debias);

}  // namespace tessel::ot_detail
