// Block-sparse reductions (KeOps ranges) in the generated CUDA kernels, run in the CPU emulator
// as the backend launches them (one CUDA block per run of rows of one range) and checked value
// by value against the interpreter: every reduction family, both axes, float32 and float64,
// ranges shorter and longer than a block or a tile, rows no range covers, blocks with nothing to
// reduce over, NaN; and the range table itself.
#include <cmath>
#include <random>

#include "cuda_emulated_harness.hpp"
#include "reduction_cases.hpp"
#include "tessel/half.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Clusters of rows (lengths 1 .. max_len) and a random keep mask between them; the first
// cluster of rows keeps nothing and, when `gaps`, every third cluster of rows is left out of
// the ranges (those rows reduce over nothing).
std::shared_ptr<BlockRanges> make_ranges(int64_t n, int64_t m, int max_len, uint64_t seed,
                                         bool gaps) {
  std::mt19937_64 rng(seed);
  auto cuts = [&](int64_t len) {
    std::vector<int64_t> c = {0};
    while (c.back() < len) c.push_back(std::min<int64_t>(len, c.back() + 1 + rng() % max_len));
    return c;
  };
  const std::vector<int64_t> ci = cuts(n), cj = cuts(m);
  const size_t a = ci.size() - 1, b = cj.size() - 1;
  std::vector<std::vector<bool>> keep(a, std::vector<bool>(b));
  for (auto& row : keep)
    for (size_t q = 0; q < b; ++q) row[q] = rng() % 3 != 0;
  keep[0].assign(b, false);
  // One side of the table: the kept clusters of `rows`, each with the intervals of `other` it
  // reduces over; the j side is the same with the keep mask transposed.
  auto side = [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& other, bool by_j,
                  std::vector<int64_t>& ranges, std::vector<int64_t>& red,
                  std::vector<int64_t>& slices) {
    for (size_t x = 0; x + 1 < rows.size(); ++x) {
      if (gaps && x % 3 == 2) continue;
      ranges.insert(ranges.end(), {rows[x], rows[x + 1]});
      for (size_t y = 0; y + 1 < other.size(); ++y)
        if (by_j ? keep[y][x] : keep[x][y]) red.insert(red.end(), {other[y], other[y + 1]});
      slices.push_back(static_cast<int64_t>(red.size() / 2));
    }
  };
  auto br = std::make_shared<BlockRanges>();
  side(ci, cj, false, br->ranges_i, br->redranges_j, br->slices_i);
  side(cj, ci, true, br->ranges_j, br->redranges_i, br->slices_j);
  return br;
}

// Unlike tie_reduction: no parameter, and a weight of dim 2.
Reduction case_reduction(const ReductionCase& c, int axis) {
  const Formula x = vi(0, 2), y = vj(1, 2), b = vj(2, 2);
  const bool scalar = c.op == ReductionOp::ArgKMin || c.op == ReductionOp::KMinArgKMin ||
                      c.op == ReductionOp::LogSumExp || c.op == ReductionOp::SumSoftMaxWeight;
  Formula f = scalar ? round(sqdist(x, y) * 4.0) * 0.25 - 1.0 : round(4.0 * (x - y)) * 0.25;
  Formula w = c.weighted || c.op == ReductionOp::SumSoftMaxWeight ? b : Formula{};
  if (axis == 0) {
    f = substitute(f, {x, y}, {vj(0, 2), vi(1, 2)});
    if (w.valid()) w = vi(2, 2);
  }
  return Reduction(c.op, f, axis, c.k, w);
}

std::vector<Array> case_inputs(DType t, int axis, int64_t n_out, int64_t n_red, bool nan,
                               bool weighted) {
  const int64_t n0 = axis == 1 ? n_out : n_red, n1 = axis == 1 ? n_red : n_out;
  std::vector<Array> in = {random_array(t, {n0, 2}, 1, -2, 2), random_array(t, {n1, 2}, 2, -2, 2),
                           random_array(t, {n1, 2}, 3, 0.1, 1)};
  if (nan) set(in[1], 2 * 7 + 1, NAN);
  if (!weighted) in.pop_back();
  return in;
}

const ReductionCase kCases[] = {{ReductionOp::Sum},
                       {ReductionOp::MinArgMin},
                       {ReductionOp::MaxArgMax},
                       {ReductionOp::KMinArgKMin, 3},
                       {ReductionOp::ArgKMin, 20},
                       {ReductionOp::LogSumExp},
                       {ReductionOp::LogSumExp, 0, true},
                       {ReductionOp::SumSoftMaxWeight}};

}  // namespace

// Every reduction family over j, then over i, against the interpreter with the same ranges:
// clusters of up to 40 rows (several per CUDA block of 32 rows, some longer than one) and 9 to 70
// inner rows (intervals inside one tile of 32 and across several), with gaps and empty rows.
TEST_P(CudaEmulatedKernels, BlockSparseRangesEveryReduction) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const CudaPlanOverrides forces[] = {{.block = 32, .rows_per_thread = 1},
                                      {.block = 32, .rows_per_thread = 2},
                                      {.block = 64, .rows_per_thread = 4}};
  int seed = 0;
  for (const ReductionCase& c : kCases)
    for (int axis : {1, 0})
      for (bool nan : {false, true}) {
        const Reduction r = case_reduction(c, axis);
        const int64_t n_out = 130, n_red = 170;
        const int64_t ni = n_out, nj = n_red;  // case_inputs' i rows and j rows, either axis
        ++seed;
        const auto br = make_ranges(ni, nj, seed % 2 ? 40 : 70, seed, seed % 3 == 0);
        expect_matches(r, case_inputs(dtype(), axis, n_out, n_red, nan, r.weight().valid()),
                       forces[seed % 3], tol, tol,
                       r.str() + " axis " + std::to_string(axis) + (nan ? " with NaN" : ""), br);
      }
}

// A gradient of a block-sparse LogSumExp: its computed variable (the forward LogSumExp) and its
// terms run with the same ranges.
TEST_P(CudaEmulatedKernels, BlockSparseRangesGradient) {
  SKIP_WITHOUT_COMPILER();
  const Formula x = vi(0, 3), y = vj(1, 3), h = vj(2, 1);
  const Reduction lse(ReductionOp::LogSumExp, h - sqdist(x, y));
  const Reduction gx = grad(lse, 0);  // inputs: x, y, h, then the cotangent (90, 1)
  std::vector<Array> in = {random_array(dtype(), {90, 3}, 1), random_array(dtype(), {110, 3}, 2),
                           random_array(dtype(), {110, 1}, 3), random_array(dtype(), {90, 1}, 4)};
  const auto br = make_ranges(90, 110, 30, 11, true);
  const double tol = 10 * tol_of(dtype());
  expect_matches(gx, in, {.block = 32}, tol, tol, "grad of " + lse.str(), br);
}

// The table: every row in exactly one CUDA block, blocks within one range and at most
// rows_per_block rows, each range's non-empty intervals in order, uncovered rows with none.
TEST(CudaRangeTable, CoversEveryRowOnceWithItsRangesIntervals) {
  const std::vector<int64_t> iv0 = {0, 5, 7, 7, 9, 12}, iv1 = {}, iv2 = {3, 4};
  const std::vector<CudaRowRange> ranges = {{30, 75, &iv2}, {2, 10, &iv0}, {10, 11, &iv1}};
  const CudaRangeTable t = cuda_range_table(ranges, 80, 16);
  ASSERT_EQ(t.blocks.size() % 4, 0u);
  std::vector<int> seen(80, 0);
  for (size_t b = 0; b < t.blocks.size(); b += 4) {
    const int64_t r0 = t.blocks[b], r1 = t.blocks[b + 1], q0 = t.blocks[b + 2],
                  q1 = t.blocks[b + 3];
    ASSERT_LT(r0, r1);
    EXPECT_LE(r1 - r0, 16);
    for (int64_t r = r0; r < r1; ++r) ++seen[r];
    std::vector<int64_t> got(t.ivs.begin() + 2 * q0, t.ivs.begin() + 2 * q1);
    if (r0 >= 2 && r1 <= 10)
      EXPECT_EQ(got, (std::vector<int64_t>{0, 5, 9, 12}));  // [7, 7) dropped
    else if (r0 >= 30 && r1 <= 75)
      EXPECT_EQ(got, iv2);
    else
      EXPECT_TRUE(got.empty()) << "rows " << r0 << ".." << r1;
  }
  for (int r = 0; r < 80; ++r) EXPECT_EQ(seen[r], 1) << "row " << r;
  EXPECT_TRUE(cuda_range_table({}, 0, 16).blocks.empty());
}

// The add kernel that puts gradient terms into device outputs in place: a strided destination
// (pitch past the row), a partial last block, both dtypes.
TEST_P(CudaEmulatedKernels, AddRowsKernelAddsIntoAPitchedDestination) {
  SKIP_WITHOUT_COMPILER();
  const bool f64 = GetParam();
  const int64_t rows = 37, cols = 3, pitch = 5;
  const emu::Module& m = module_for(cuda_add_rows_source(f64));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> dst(rows * pitch), src(rows * cols);
    for (size_t q = 0; q < dst.size(); ++q) dst[q] = static_cast<T>(q);
    for (size_t q = 0; q < src.size(); ++q) src[q] = static_cast<T>(0.5 * q + 0.25);
    using Fn = void(T*, long long, const T*, long long, long long);
    Fn* add = m.kernel<Fn>("tessel_add_rows");
    emu::LaunchConfig cfg;
    cfg.block.x = 32;
    cfg.grid.x = static_cast<unsigned>((rows * cols + 31) / 32);
    m.launch(cfg, [&] { add(dst.data(), pitch, src.data(), rows, cols); });
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < pitch; ++c) {
        const double want = r * pitch + c + (c < cols ? 0.5 * (r * cols + c) + 0.25 : 0.0);
        EXPECT_EQ(dst[r * pitch + c], static_cast<T>(want)) << r << ", " << c;
      }
  };
  f64 ? run(0.0) : run(0.0f);
}

// Sums over all rows on the device: a column stride in the destination, more rows than threads
// (and fewer), in double as the host sums them; the fixed order makes two runs agree bit for bit.
TEST_P(CudaEmulatedKernels, SumRowsKernelSumsEveryColumn) {
  SKIP_WITHOUT_COMPILER();
  const bool f64 = GetParam();
  const emu::Module& m = module_for(cuda_sum_rows_source(f64));
  auto run = [&](auto zero, int64_t rows) {
    using T = decltype(zero);
    const int64_t cols = 3, stride = 2;
    std::vector<T> src(rows * cols), dst(cols * stride, T(-7));
    std::mt19937 gen(static_cast<unsigned>(rows));
    std::uniform_real_distribution<double> u(-1, 1);
    for (T& v : src) v = static_cast<T>(u(gen));
    using Fn = void(const T*, long long, long long, T*, long long);
    Fn* sum = m.kernel<Fn>("tessel_sum_rows");
    emu::LaunchConfig cfg;
    cfg.block.x = 32;  // kCudaSumRowsBlock on a GPU; any power of two works
    cfg.grid.x = static_cast<unsigned>(cols);
    cfg.dynamic_smem = cfg.block.x * sizeof(double);
    m.launch(cfg, [&] { sum(src.data(), rows, cols, dst.data(), stride); });
    for (int64_t c = 0; c < cols; ++c) {
      double want = 0, mag = 0;
      for (int64_t r = 0; r < rows; ++r)
        want += src[r * cols + c], mag += std::abs(src[r * cols + c]);
      // Both sums are in double: they differ by reassociation, far below T's rounding.
      EXPECT_NEAR(static_cast<double>(dst[c * stride]), static_cast<T>(want),
                  1e-14 * mag + std::abs(want) * (f64 ? 1e-15 : 1.2e-7))
          << rows << " rows, column " << c;
      EXPECT_EQ(dst[c * stride + 1], T(-7));  // between the strided elements: untouched
    }
  };
  for (int64_t rows : {0, 1, 31, 200}) f64 ? run(0.0, rows) : run(0.0f, rows);
}

// Half <-> float32 on the device gives tessel/half.hpp's bits for every one of the 65,536
// encodings (NaNs included) and for float32 values at and around every rounding boundary.
TEST(CudaEmulatedRows, ConvertKernelMatchesTheHostConversionsBitForBit) {
  SKIP_WITHOUT_COMPILER();
  const int64_t n = 65536;
  std::vector<uint16_t> all(n);
  for (int64_t q = 0; q < n; ++q) all[q] = static_cast<uint16_t>(q);
  // float32 inputs: each half value, the midpoints to its neighbours, one ulp either side, and
  // the specials.
  std::vector<float> f;
  for (int64_t q = 0; q < n; ++q) {
    const float v = half_to_float(static_cast<uint16_t>(q));
    const float w = half_to_float(static_cast<uint16_t>(q + 1));
    f.push_back(v);
    if (std::isfinite(v) && std::isfinite(w) && (q & 0x7fff) != 0x7bff) {
      const float mid = v + (w - v) / 2;
      f.insert(f.end(), {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)});
    }
  }
  f.insert(f.end(), {INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 3.4e38f, 65519.f, 65520.f});
  const int64_t nf = static_cast<int64_t>(f.size());
  for (DType h : {DType::Float16, DType::BFloat16}) {
    auto to_float = [&](uint16_t b) {
      return h == DType::Float16 ? half_to_float(b) : bfloat16_to_float(b);
    };
    auto to_half = [&](float v) {
      return h == DType::Float16 ? float_to_half(v) : float_to_bfloat16(v);
    };
    emu::LaunchConfig cfg;  // few threads, each over many elements (a grid-stride loop)
    cfg.block.x = 32;
    cfg.grid.x = 3;
    {
      const emu::Module& m = module_for(cuda_convert_source(h, DType::Float32));
      std::vector<float> out(n);
      using Fn = void(const uint16_t*, float*, long long);
      Fn* k = m.kernel<Fn>("tessel_convert");
      m.launch(cfg, [&] { k(all.data(), out.data(), n); });
      for (int64_t q = 0; q < n; ++q)
        ASSERT_EQ(std::bit_cast<uint32_t>(out[q]),
                  std::bit_cast<uint32_t>(to_float(static_cast<uint16_t>(q))))
            << dtype_name(h) << " encoding " << q;
    }
    {
      const emu::Module& m = module_for(cuda_convert_source(DType::Float32, h));
      std::vector<uint16_t> out(nf);
      using Fn = void(const float*, uint16_t*, long long);
      Fn* k = m.kernel<Fn>("tessel_convert");
      m.launch(cfg, [&] { k(f.data(), out.data(), nf); });
      for (int64_t q = 0; q < nf; ++q)
        ASSERT_EQ(out[q], to_half(f[q])) << dtype_name(h) << " of " << f[q];
    }
  }
}

// CG's vector steps on the device: y = a x + b y in double over mixed float32/float64 storage
// (b = 0 never reads y, which may hold NaN), and dot products as block partial sums that the
// sum kernel adds, against the host's double arithmetic.
TEST(CudaEmulatedRows, AxpbyAndDotKernelsComputeInDouble) {
  SKIP_WITHOUT_COMPILER();
  const int64_t n = 1000;
  std::vector<double> xd(n), yd(n);
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t q = 0; q < n; ++q) xd[q] = u(gen), yd[q] = u(gen);
  emu::LaunchConfig cfg;
  cfg.block.x = 32;
  cfg.grid.x = 3;
  {
    // float32 x into float64 y: y = 0.5 x - 2 y, then y = 3 x over a NaN-filled y.
    std::vector<float> xf(xd.begin(), xd.end());
    std::vector<double> y = yd;
    const emu::Module& m = module_for(cuda_axpby_source(DType::Float32, DType::Float64));
    using Fn = void(double, const float*, double, double*, long long);
    Fn* k = m.kernel<Fn>("tessel_axpby");
    m.launch(cfg, [&] { k(0.5, xf.data(), -2.0, y.data(), n); });
    for (int64_t q = 0; q < n; ++q)
      ASSERT_DOUBLE_EQ(y[q], 0.5 * static_cast<double>(xf[q]) - 2.0 * yd[q]) << q;
    std::fill(y.begin(), y.end(), NAN);
    m.launch(cfg, [&] { k(3.0, xf.data(), 0.0, y.data(), n); });
    for (int64_t q = 0; q < n; ++q) ASSERT_EQ(y[q], 3.0 * static_cast<double>(xf[q])) << q;
  }
  {
    // float64 x into float32 y: rounded once.
    std::vector<float> y(n);
    const emu::Module& m = module_for(cuda_axpby_source(DType::Float64, DType::Float32));
    using Fn = void(double, const double*, double, float*, long long);
    Fn* k = m.kernel<Fn>("tessel_axpby");
    m.launch(cfg, [&] { k(1.0, xd.data(), 0.0, y.data(), n); });
    for (int64_t q = 0; q < n; ++q) ASSERT_EQ(y[q], static_cast<float>(xd[q])) << q;
  }
  {
    const emu::Module& dm = module_for(cuda_dot_source(DType::Float64, DType::Float64));
    const emu::Module& sm = module_for(cuda_sum_rows_source(true));
    using Dot = void(const double*, const double*, long long, double*);
    using Sum = void(const double*, long long, long long, double*, long long);
    Dot* dot = dm.kernel<Dot>("tessel_dot");
    Sum* sum = sm.kernel<Sum>("tessel_sum_rows");
    std::vector<double> part(cfg.grid.x);
    double got = 0, want = 0, mag = 0;
    emu::LaunchConfig dc = cfg;
    dc.dynamic_smem = dc.block.x * sizeof(double);
    dm.launch(dc, [&] { dot(xd.data(), yd.data(), n, part.data()); });
    emu::LaunchConfig sc;
    sc.block.x = 4;
    sc.dynamic_smem = sc.block.x * sizeof(double);
    sm.launch(sc, [&] { sum(part.data(), static_cast<long long>(part.size()), 1, &got, 1); });
    for (int64_t q = 0; q < n; ++q) want += xd[q] * yd[q], mag += std::abs(xd[q] * yd[q]);
    EXPECT_NEAR(got, want, 4e-16 * mag);
  }
}
