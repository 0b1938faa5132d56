// Block-sparse reductions (KeOps ranges): each block of rows reduces over its own intervals.
#include <random>

#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Clusters of i rows and j columns with a random keep mask, in both layouts (as from_matrix).
struct Pattern {
  std::vector<int64_t> ci, cj;  // cluster boundaries
  std::vector<std::vector<bool>> keep;
  std::shared_ptr<BlockRanges> ranges;
};

Pattern make_pattern(int64_t n, int64_t m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Pattern p;
  auto cuts = [&](int64_t len) {
    std::vector<int64_t> c = {0};
    while (c.back() < len) c.push_back(std::min<int64_t>(len, c.back() + 1 + rng() % 23));
    return c;
  };
  p.ci = cuts(n);
  p.cj = cuts(m);
  const size_t a = p.ci.size() - 1, b = p.cj.size() - 1;
  p.keep.assign(a, std::vector<bool>(b));
  for (auto& row : p.keep)
    for (size_t q = 0; q < b; ++q) row[q] = rng() % 3 != 0;
  p.keep[0].assign(b, false);  // one block of rows with nothing to reduce over
  auto br = std::make_shared<BlockRanges>();
  for (size_t x = 0; x < a; ++x) {
    br->ranges_i.insert(br->ranges_i.end(), {p.ci[x], p.ci[x + 1]});
    for (size_t y = 0; y < b; ++y)
      if (p.keep[x][y]) br->redranges_j.insert(br->redranges_j.end(), {p.cj[y], p.cj[y + 1]});
    br->slices_i.push_back(static_cast<int64_t>(br->redranges_j.size() / 2));
  }
  for (size_t y = 0; y < b; ++y) {
    br->ranges_j.insert(br->ranges_j.end(), {p.cj[y], p.cj[y + 1]});
    for (size_t x = 0; x < a; ++x)
      if (p.keep[x][y]) br->redranges_i.insert(br->redranges_i.end(), {p.ci[x], p.ci[x + 1]});
    br->slices_j.push_back(static_cast<int64_t>(br->redranges_i.size() / 2));
  }
  p.ranges = br;
  return p;
}

int cluster_of(const std::vector<int64_t>& c, int64_t k) {
  return static_cast<int>(std::upper_bound(c.begin(), c.end(), k) - c.begin()) - 1;
}

}  // namespace

TEST(BlockSparse, MatchesDenseWithMaskedTerms) {
  const int64_t n = 70, m = 90;
  const Pattern pat = make_pattern(n, m, 7);
  const Formula x = vi(0, 3), y = vj(1, 3);
  std::vector<Array> in = {random_array(DType::Float64, {n, 3}, 1),
                           random_array(DType::Float64, {m, 3}, 2)};
  // Dense reference: the same reduction with the dropped pairs masked out by a 0/1 weight.
  for (ReductionOp op : {ReductionOp::Sum, ReductionOp::MinArgMin, ReductionOp::KMinArgKMin,
                         ReductionOp::LogSumExp}) {
    const Formula f = op == ReductionOp::Sum ? exp(-sqdist(x, y)) * (x - y) : sqdist(x, y);
    Reduction r(op, f, 1, op == ReductionOp::KMinArgKMin ? 2 : 0);
    for (Backend be : {Backend::Interpreter, Backend::Compiled}) {
      Options o;
      o.backend = be;
      o.ranges = pat.ranges;
      const auto got = evaluate(r, in, o);
      for (int64_t i = 0; i < n; ++i) {
        const int xi = cluster_of(pat.ci, i);
        std::vector<std::pair<double, int64_t>> terms;
        std::vector<double> sum(3, 0.0);
        for (int64_t j = 0; j < m; ++j) {
          if (!pat.keep[xi][cluster_of(pat.cj, j)]) continue;
          const auto v = eval_pair(r, in, i, j, f);
          for (int c = 0; c < f.dim(); ++c) sum[c] += v[c];
          terms.push_back({v[0], j});
        }
        std::stable_sort(terms.begin(), terms.end(),
                         [](auto& a, auto& b) { return a.first < b.first; });
        const std::string what = std::string(reduction_name(op)) + " row " + std::to_string(i) +
                                 (be == Backend::Compiled ? " compiled" : " interpreted");
        if (op == ReductionOp::Sum) {
          for (int c = 0; c < 3; ++c) EXPECT_NEAR(got[0].at(i * 3 + c), sum[c], 1e-12) << what;
        } else if (op == ReductionOp::LogSumExp) {
          double s = 0;
          for (auto& t : terms) s += std::exp(t.first);
          const double want = terms.empty() ? -INFINITY : std::log(s);
          if (terms.empty()) EXPECT_EQ(got[0].at(i), want) << what;
          else EXPECT_NEAR(got[0].at(i), want, 1e-12) << what;
        } else {
          const int k = op == ReductionOp::KMinArgKMin ? 2 : 1;
          for (int q = 0; q < k; ++q) {
            const bool have = q < static_cast<int>(terms.size());
            EXPECT_EQ(got[1].at(i * k + q), have ? terms[q].second : -1) << what;
            if (have) EXPECT_NEAR(got[0].at(i * k + q), terms[q].first, 1e-14) << what;
          }
        }
      }
    }
  }
}

TEST(BlockSparse, GradientsUseTheTransposedRanges) {
  const int64_t n = 40, m = 50;
  const Pattern pat = make_pattern(n, m, 11);
  Reduction r(ReductionOp::Sum, exp(-sqdist(vi(0, 2), vj(1, 2))) * vj(2, 1));
  std::vector<Array> in = {random_array(DType::Float64, {n, 2}, 1),
                           random_array(DType::Float64, {m, 2}, 2),
                           random_array(DType::Float64, {m, 1}, 3)};
  Options o;
  o.ranges = pat.ranges;
  o.backend = Backend::Interpreter;
  for (int v : {0, 1, 2}) check_grad_fd(r, in, v, o);
  o.backend = Backend::Compiled;
  for (int v : {0, 1, 2}) check_grad_fd(r, in, v, o);
}

TEST(BlockSparse, BadRangesAreReported) {
  Reduction r(ReductionOp::Sum, sqdist(vi(0, 2), vj(1, 2)));
  std::vector<Array> in = {random_array(DType::Float64, {10, 2}, 1),
                           random_array(DType::Float64, {12, 2}, 2)};
  auto br = std::make_shared<BlockRanges>();
  br->ranges_i = {0, 10};
  br->slices_i = {1};
  br->redranges_j = {0, 13};  // past the 12 j rows
  Options o;
  o.ranges = br;
  EXPECT_THROW(evaluate(r, in, o), Error);
  br->redranges_j = {0, 12};
  br->slices_i = {2};  // more intervals than given
  EXPECT_THROW(evaluate(r, in, o), Error);
}
