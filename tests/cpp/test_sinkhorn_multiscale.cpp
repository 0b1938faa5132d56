// The Sinkhorn loop's multiscale parts: warm starts, block-sparse softmins by clusters, the
// truncation's bound on the mass it drops, the symmetric-then-alternating updates, bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "reduction_helpers.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::testing::expect_error;

namespace {

using Vec = std::vector<double>;
constexpr int kDim = 3;

// Blobs of points sorted by blob: blob c holds the points [bounds[c], bounds[c + 1]), around
// a centre on the first axis at c * spacing + shift, within `spread` of it per coordinate.
struct Blobs {
  Vec w, x;
  std::vector<int64_t> bounds{0};
  int64_t n() const { return static_cast<int64_t>(w.size()); }
};

Blobs make_blobs(const std::vector<int>& sizes, double spacing, double spread, double shift,
                 unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-spread, spread), m(0.5, 1.5);
  Blobs b;
  double total = 0;
  for (size_t c = 0; c < sizes.size(); ++c) {
    for (int i = 0; i < sizes[c]; ++i) {
      total += b.w.emplace_back(m(gen));
      for (int k = 0; k < kDim; ++k) b.x.push_back((k == 0 ? c * spacing + shift : 0.0) + u(gen));
    }
    b.bounds.push_back(b.n());
  }
  for (double& v : b.w) v /= total;
  return b;
}

double sq_half(const double* p, const double* q) {
  double s = 0;
  for (int k = 0; k < kDim; ++k) s += (p[k] - q[k]) * (p[k] - q[k]);
  return s / 2;
}

// The least |p - q|^2 / 2 between any point of blob I of u and any of blob J of v, exactly
// (a valid lower bound, which is all the truncation asks of cmin).
Vec least_costs(const Blobs& u, const Blobs& v) {
  const size_t ku = u.bounds.size() - 1, kv = v.bounds.size() - 1;
  Vec out(ku * kv, INFINITY);
  for (size_t I = 0; I < ku; ++I)
    for (size_t J = 0; J < kv; ++J)
      for (int64_t i = u.bounds[I]; i < u.bounds[I + 1]; ++i)
        for (int64_t j = v.bounds[J]; j < v.bounds[J + 1]; ++j)
          out[I * kv + J] = std::min(out[I * kv + J], sq_half(&u.x[i * kDim], &v.x[j * kDim]));
  return out;
}

struct Problem {
  Blobs bx, by;
  Array a, x, b, y;
  Problem(Blobs px, Blobs py) : bx(std::move(px)), by(std::move(py)) {
    a = Array::from(bx.w, {bx.n()});
    x = Array::from(bx.x, {bx.n(), kDim});
    b = Array::from(by.w, {by.n()});
    y = Array::from(by.x, {by.n(), kDim});
  }
  SinkhornClusters clusters(std::optional<double> tau) const {
    return {bx.bounds,           by.bounds,           least_costs(bx, by),
            least_costs(bx, bx), least_costs(by, by), tau};
  }
  SinkhornResult solve(const SinkhornOptions& o, const SinkhornStart& st = {},
                       const SinkhornClusters& c = {}) const {
    return sinkhorn(a.view(), x.view(), b.view(), y.view(), o, st, c);
  }
};

Problem separated() {
  return Problem(make_blobs({9, 6, 11, 7}, 2.0, 0.25, 0.0, 1),
                 make_blobs({8, 10, 5, 9, 6}, 1.6, 0.25, 0.3, 2));
}

// Overlapping blobs: a problem the loop solves to a small tolerance in a few hundred iterations.
Problem compact() {
  return Problem(make_blobs({20, 20}, 0.5, 0.4, 0.0, 3), make_blobs({25, 15}, 0.5, 0.4, 0.1, 4));
}

SinkhornOptions options(double blur, SinkhornUpdate update, double tol, bool debias) {
  SinkhornOptions o;
  o.blur = blur;
  o.update = update;
  o.tol = tol;
  o.debias = debias;
  return o;
}

void expect_same(const Array& got, const Array& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (int64_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.at(i), want.at(i), tol) << what << "[" << i << "]";
}

}  // namespace

TEST(SinkhornMultiscale, KeepingEveryBlockIsTheDenseLoop) {
  // Without tau every block is kept: the block-sparse softmins (rows and columns, x-x and y-y,
  // blobs of unequal sizes) must visit every pair exactly once.
  const Problem pr = separated();
  SinkhornOptions o;
  o.blur = 0.3;
  const SinkhornResult dense = pr.solve(o), blocks = pr.solve(o, {}, pr.clusters(std::nullopt));
  ASSERT_EQ(blocks.history.size(), dense.history.size());
  for (const auto& [got, want, name] :
       {std::tuple{&blocks.f, &dense.f, "f"}, std::tuple{&blocks.g, &dense.g, "g"},
        std::tuple{&blocks.p, &dense.p, "p"}, std::tuple{&blocks.q, &dense.q, "q"}})
    expect_same(*got, *want, 1e-12, name);
  EXPECT_EQ(blocks.keep_xy, std::vector<uint8_t>(4 * 5, 1));
  EXPECT_EQ(blocks.keep_xx.size(), 16u);
  EXPECT_EQ(blocks.keep_yy.size(), 25u);
  EXPECT_TRUE(dense.keep_xy.empty());
}

TEST(SinkhornMultiscale, TruncationDropsOnlyWhatItsBoundAllows) {
  // Each dropped block (I, J) had max f + max g - cmin < -tau eps at the potentials that chose
  // the mask, so the plan of those potentials holds at most exp(-tau) a_i b_j on each of its
  // pairs. With tol = 0 the mask is chosen after the last step, from the potentials returned as
  // f_in, g_in: the dense sum over the dropped blocks is bounded by exp(-tau) |a| |b|.
  const Problem pr = separated();
  SinkhornOptions o;
  o.blur = 0.1;
  const double tau = 4.0;
  const SinkhornResult r = pr.solve(o, {}, pr.clusters(tau));
  const size_t kx = 4, ky = 5;
  ASSERT_EQ(r.keep_xy.size(), kx * ky);
  size_t dropped_blocks = 0;
  double dropped = 0;
  for (size_t I = 0; I < kx; ++I)
    for (size_t J = 0; J < ky; ++J) {
      if (r.keep_xy[I * ky + J]) continue;
      ++dropped_blocks;
      for (int64_t i = pr.bx.bounds[I]; i < pr.bx.bounds[I + 1]; ++i)
        for (int64_t j = pr.by.bounds[J]; j < pr.by.bounds[J + 1]; ++j)
          dropped +=
              pr.bx.w[i] * pr.by.w[j] *
              std::exp((r.f_in[i] + r.g_in[j] - sq_half(&pr.bx.x[i * kDim], &pr.by.x[j * kDim])) /
                       r.eps);
    }
  EXPECT_GT(dropped_blocks, kx * ky / 2) << "the test needs a real truncation";
  EXPECT_LE(dropped, std::exp(-tau));
  // Every cluster keeps a partner (else its softmin would be +inf).
  for (size_t I = 0; I < kx; ++I) {
    bool any = false;
    for (size_t J = 0; J < ky; ++J) any |= r.keep_xy[I * ky + J] != 0;
    EXPECT_TRUE(any) << I;
  }
  for (int64_t i = 0; i < r.f.size(); ++i) EXPECT_TRUE(std::isfinite(r.f.at(i))) << i;
  // The potentials stay those of the untruncated loop up to what the truncation drops.
  const SinkhornResult dense = pr.solve(o);
  expect_same(r.f, dense.f, 1e-6, "f");
  expect_same(r.g, dense.g, 1e-6, "g");
}

TEST(SinkhornMultiscale, AWarmStartAtTheFixedPointStopsAtOnce) {
  const Problem pr = compact();
  SinkhornOptions o = options(0.1, SinkhornUpdate::Alternating, 1e-11, true);
  const SinkhornResult cold = pr.solve(o);
  ASSERT_TRUE(cold.converged) << cold.str();
  const SinkhornStart st{cold.eps, cold.f_in, cold.g_in, cold.p_in, cold.q_in, {}};
  o.tol = 1e-10;
  const SinkhornResult warm = pr.solve(o, st);
  ASSERT_TRUE(warm.converged) << warm.str();
  EXPECT_EQ(warm.history.size(), 1u);
  expect_same(warm.f, cold.f, 1e-12, "f");
  expect_same(warm.q, cold.q, 1e-12, "q");
}

TEST(SinkhornMultiscale, AWarmStartRunsItsScheduleThenGoesOnAtBlur) {
  const Problem pr = compact();
  SinkhornOptions o = options(0.2, SinkhornUpdate::SymmetricThenAlternating, 0.0, false);
  const Vec zx(pr.bx.w.size(), 0.0), zy(pr.by.w.size(), 0.0);
  const SinkhornStart st{1.0, zx, zy, {}, {}, {0.5, 0.25, 0.1, 0.04}};
  const SinkhornResult r = pr.solve(o, st);
  ASSERT_EQ(r.history.size(), 4u);
  for (size_t k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(r.history[k].eps, st.schedule[k]);
  o.tol = 1e-9;
  const SinkhornResult r2 = pr.solve(o, st);
  ASSERT_TRUE(r2.converged) << r2.str();
  EXPECT_GT(r2.history.size(), 4u);
  EXPECT_DOUBLE_EQ(r2.history.back().eps, 0.04);
}

TEST(SinkhornMultiscale, SymmetricThenAlternatingConvergesInFewerIterations) {
  // Averaged updates are slow at a small eps; alternating ones past the schedule are not, and
  // reach the same fixed point (balanced potentials are defined up to f + c, g - c).
  const Problem pr = compact();
  SinkhornOptions o;
  o.blur = 0.03;
  o.tol = 1e-9;
  o.max_iter = 20000;
  o.debias = false;
  const SinkhornResult sym = pr.solve(o);
  o.update = SinkhornUpdate::SymmetricThenAlternating;
  const SinkhornResult mixed = pr.solve(o);
  ASSERT_TRUE(sym.converged && mixed.converged) << sym.str() << " / " << mixed.str();
  EXPECT_LT(mixed.history.size(), sym.history.size());
  const double c = mixed.f.at(0) - sym.f.at(0);
  for (int64_t i = 0; i < sym.f.size(); ++i) EXPECT_NEAR(mixed.f.at(i) - c, sym.f.at(i), 1e-7) << i;
  for (int64_t j = 0; j < sym.g.size(); ++j) EXPECT_NEAR(mixed.g.at(j) + c, sym.g.at(j), 1e-7) << j;
}

TEST(SinkhornMultiscale, BadClustersAndStartsAreClearErrors) {
  const Problem pr = separated();
  SinkhornOptions o;
  SinkhornClusters c = pr.clusters(4.0);
  c.bounds_x.back() -= 1;
  expect_error([&] { pr.solve(o, {}, c); }, {"sinkhorn", "clusters.bounds_x", "33"});
  c = pr.clusters(4.0);
  std::swap(c.bounds_y[1], c.bounds_y[2]);
  expect_error([&] { pr.solve(o, {}, c); }, {"clusters.bounds_y", "must not decrease"});
  c = pr.clusters(4.0);
  c.cmin_xy.pop_back();
  expect_error([&] { pr.solve(o, {}, c); }, {"clusters.cmin_xy", "4 x 5"});
  c = pr.clusters(4.0);
  c.cmin_yy[3] = -1;
  expect_error([&] { pr.solve(o, {}, c); }, {"clusters.cmin_yy[3]", ">= 0"});
  c = pr.clusters(0.0);
  expect_error([&] { pr.solve(o, {}, c); }, {"clusters.tau", "> 0"});
  const Vec zx(pr.bx.w.size(), 0.0), zy(pr.by.w.size(), 0.0);
  expect_error([&] { pr.solve(o, SinkhornStart{0.0, zx, zy, zx, zy, {}}); }, {"start.eps"});
  expect_error(
      [&] {
        pr.solve(o, SinkhornStart{1.0, zx, zx, zx, zy, {}});
      },
      {"start.g", "expected 38"});
  expect_error([&] { pr.solve(o, SinkhornStart{1.0, zx, zy, {}, {}, {}}); }, {"start.p"});
  Vec bad = zx;
  bad[2] = NAN;
  expect_error(
      [&] {
        pr.solve(o, SinkhornStart{1.0, bad, zy, zx, zy, {}});
      },
      {"start.f[2]", "finite"});
  expect_error(
      [&] {
        pr.solve(o, SinkhornStart{1.0, zx, zy, zx, zy, {0.5, -1.0}});
      },
      {"start.schedule", "> 0"});
}
