// Half precision: the float16 / bfloat16 conversions against a brute-force nearest-value search,
// and reductions of half arrays (host, strided, batched, on a "device"), which must equal the
// float32 reduction of the same (dequantized) values rounded once to the half dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "support/null_backend.hpp"
#include "backend/registry.hpp"
#include "reduction_helpers.hpp"
#include "tessel/half.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Every finite non-negative value of a 16-bit format, in increasing order (their encodings
// increase with them), as doubles.
std::vector<double> finite_values(bool bf16) {
  std::vector<double> v;
  for (uint32_t b = 0; b < 0x7c00u + (bf16 ? 0x0380u : 0); ++b) {
    const float f = bf16 ? bfloat16_to_float(static_cast<uint16_t>(b))
                         : half_to_float(static_cast<uint16_t>(b));
    if (!std::isfinite(f)) break;
    v.push_back(f);
  }
  return v;
}

// The encoding round-to-nearest-even gives x (finite, >= 0): the nearest value, the even
// encoding on a tie, infinity past the largest value plus half its spacing.
uint16_t nearest(const std::vector<double>& vals, double x, uint16_t inf) {
  const auto it = std::lower_bound(vals.begin(), vals.end(), x);
  const size_t hi = static_cast<size_t>(it - vals.begin());
  if (hi == vals.size()) {
    const double top = vals.back(), step = top - vals[vals.size() - 2];
    // A tie goes to the even encoding, infinity, as does anything above it.
    return x < top + step / 2 ? static_cast<uint16_t>(vals.size() - 1) : inf;
  }
  if (vals[hi] == x || hi == 0) return static_cast<uint16_t>(hi);
  const double dlo = x - vals[hi - 1], dhi = vals[hi] - x;
  if (dlo < dhi) return static_cast<uint16_t>(hi - 1);
  if (dhi < dlo) return static_cast<uint16_t>(hi);
  return static_cast<uint16_t>(hi % 2 == 0 ? hi : hi - 1);
}

void check_rounding(bool bf16) {
  const std::vector<double> vals = finite_values(bf16);
  const uint16_t inf = bf16 ? 0x7f80u : 0x7c00u;
  auto conv = [bf16](float f) { return bf16 ? float_to_bfloat16(f) : float_to_half(f); };
  std::vector<float> xs;
  // Every value, every midpoint between neighbours and the floats just around it.
  for (size_t k = 0; k + 1 < vals.size(); ++k) {
    const float mid = static_cast<float>((vals[k] + vals[k + 1]) / 2);
    xs.insert(xs.end(), {static_cast<float>(vals[k]), mid, std::nextafter(mid, 0.0f),
                         std::nextafter(mid, INFINITY)});
  }
  std::mt19937 gen(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7f7fffffu);
  for (int q = 0; q < 200000; ++q) xs.push_back(std::bit_cast<float>(bits(gen)));
  for (float x : xs) {
    const uint16_t want = nearest(vals, x, inf);
    ASSERT_EQ(conv(x), want) << (bf16 ? "bf16 " : "f16 ") << x;
    ASSERT_EQ(conv(-x), want | 0x8000u) << (bf16 ? "bf16 " : "f16 ") << -x;
  }
}

}  // namespace

TEST(HalfConversion, EveryFloat16RoundTripsAndNaNStaysNaN) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const float f = half_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(((b >> 10) & 0x1f) == 0x1f && (b & 0x3ff)) << b;
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << b;
    } else {
      ASSERT_EQ(float_to_half(f), b) << b;
    }
    const float g = bfloat16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(g))
      EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(g)))) << b;
    else
      ASSERT_EQ(float_to_bfloat16(g), b) << b;
  }
  EXPECT_EQ(half_to_float(0x7bffu), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001u), 0x1p-24f);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bffu);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000u);  // a tie: to even (zero)
  EXPECT_EQ(float_to_half(0x1.8p-25f), 0x0001u);
  EXPECT_EQ(float_to_bfloat16(3.0e38f * 1.2f), 0x7f80u);
}

TEST(HalfConversion, Float16RoundsToNearestEven) { check_rounding(false); }
TEST(HalfConversion, BFloat16RoundsToNearestEven) { check_rounding(true); }

namespace {

// A half array of random values in [lo, hi) and its dequantized float32 twin.
struct HalfPair {
  Array h, f;
};
HalfPair half_random(DType t, std::vector<int64_t> shape, uint64_t seed, double lo = -1,
                     double hi = 1) {
  const Array r = random_array(DType::Float32, shape, seed, lo, hi);
  HalfPair p{Array(t, shape), Array(DType::Float32, shape)};
  for (int64_t q = 0; q < r.size(); ++q) {
    const float v = r.as<float>()[q];
    const uint16_t b = t == DType::Float16 ? float_to_half(v) : float_to_bfloat16(v);
    p.h.as<uint16_t>()[q] = b;
    p.f.as<float>()[q] = t == DType::Float16 ? half_to_float(b) : bfloat16_to_float(b);
  }
  return p;
}

// got (half) must be the float32 result rounded once to the half dtype, bit for bit.
void expect_rounded(const Array& got, const Array& f32, const std::string& what) {
  ASSERT_EQ(got.size(), f32.size()) << what;
  for (int64_t q = 0; q < got.size(); ++q) {
    const float v = f32.as<float>()[q];
    const uint16_t want = got.dtype() == DType::Float16 ? float_to_half(v) : float_to_bfloat16(v);
    EXPECT_EQ(got.as<uint16_t>()[q], want) << what << " entry " << q;
  }
}

class HalfReductions : public ::testing::TestWithParam<DType> {};

}  // namespace

TEST_P(HalfReductions, EqualTheFloat32ReductionRoundedOnce) {
  const DType t = GetParam();
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2);
  const HalfPair px = half_random(t, {40, 3}, 1), py = half_random(t, {55, 3}, 2),
                 pb = half_random(t, {55, 2}, 3);
  const HalfPair pc = half_random(t, {40, 1}, 4);  // a cotangent
  const Reduction lse(ReductionOp::LogSumExp, -sqdist(x, y) * 4.0);
  const std::vector<std::pair<Reduction, std::vector<const HalfPair*>>> cases = {
      {Reduction(ReductionOp::Sum, exp(-sqdist(x, y)) * b), {&px, &py, &pb}},
      {lse, {&px, &py}},
      {Reduction(ReductionOp::MinArgMin, sqdist(x, y)), {&px, &py}},
      {grad(lse, 0), {&px, &py, &pc}}};
  for (const auto& [r, pairs] : cases) {
    std::vector<Array> hin, fin;
    for (const HalfPair* p : pairs) hin.push_back(p->h), fin.push_back(p->f);
    const std::vector<Array> got = evaluate(r, hin), want = evaluate(r, fin);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      if (want[k].dtype() == DType::Int64) {
        ASSERT_EQ(got[k].dtype(), DType::Int64);
        for (int64_t q = 0; q < want[k].size(); ++q) EXPECT_EQ(got[k].at(q), want[k].at(q));
      } else {
        EXPECT_EQ(got[k].dtype(), t);
        expect_rounded(got[k], want[k], r.str());
      }
    }
  }
}

// Strided and batched half inputs read through their strides; a strided half output is written
// through its own.
TEST_P(HalfReductions, StridedBatchedInputsAndOutputs) {
  const DType t = GetParam();
  const Reduction r(ReductionOp::Sum, exp(-sqdist(vi(0, 2), vj(1, 2))) * vj(2, 1));
  const HalfPair px = half_random(t, {3, 2, 20}, 1), py = half_random(t, {3, 30, 2}, 2),
                 pb = half_random(t, {1, 30, 1}, 3);
  // x as (3, 20, 2) through a transposing view of a (3, 2, 20) buffer.
  ArrayView xh = px.h.view(), xf = px.f.view();
  for (ArrayView* v : {&xh, &xf}) {
    v->shape = {3, 20, 2};
    v->strides = {40, 1, 20};
  }
  Array out(t, {3, 20, 2}), want(DType::Float32, {3, 20, 1});
  ArrayView ov = out.view();  // every other column of a (3, 20, 2) buffer
  ov.shape = {3, 20, 1};
  ov.strides = {40, 2, 1};
  const ArrayView hin[] = {xh, py.h.view(), pb.h.view()}, fin[] = {xf, py.f.view(), pb.f.view()};
  const ArrayView houts[] = {ov}, fouts[] = {want.view()};
  evaluate(r, hin, houts);
  evaluate(r, fin, fouts);
  Array picked(t, {3, 20, 1});
  for (int64_t q = 0; q < picked.size(); ++q) picked.as<uint16_t>()[q] = out.as<uint16_t>()[2 * q];
  expect_rounded(picked, want, "strided batched");
  for (int64_t q = 0; q < picked.size(); ++q) EXPECT_EQ(out.as<uint16_t>()[2 * q + 1], 0u);
}

// On a "device" (the null backend computing in the CUDA slot, which keeps results there as the
// CUDA backend does): half inputs converted to float32 on the device and the float32 results
// rounded into the half outputs there, no host round trip; the same bits as on the host. A
// gradient (LogSumExp's, its forward value a computed variable) and a sum over all rows too.
TEST_P(HalfReductions, DeviceArraysAreConvertedOnTheDevice) {
  const DType t = GetParam();
  const Formula x = vi(0, 3), y = vj(1, 3);
  const Reduction gauss(ReductionOp::Sum, exp(-sqdist(x, y)) * vj(2, 2));
  const Reduction lse(ReductionOp::LogSumExp, -sqdist(x, y) * 4.0);
  const Reduction gp = grad(Reduction(ReductionOp::Sum, exp(-sqdist(x, y) * pm(2, 1))), 2);
  ASSERT_TRUE(gp.full_sum());
  const HalfPair px = half_random(t, {25, 3}, 1), py = half_random(t, {31, 3}, 2),
                 pb = half_random(t, {31, 2}, 3), pc = half_random(t, {25, 1}, 4),
                 ps = half_random(t, {1}, 5, 0.5, 2);
  for (const auto& [r, pairs] :
       {std::pair{gauss, std::vector<const HalfPair*>{&px, &py, &pb}},
        std::pair{grad(lse, 0), std::vector<const HalfPair*>{&px, &py, &pc}},
        std::pair{gp, std::vector<const HalfPair*>{&px, &py, &ps, &pc}}}) {
    std::vector<Array> fin;
    for (const HalfPair* p : pairs) fin.push_back(p->f);
    const std::vector<Array> want = evaluate(r, fin);
    NullBackend dev(true, true);
    ScopedBackend use(BackendId::Cuda, dev);
    auto on_cuda = [](ArrayView v) {
      v.device = Device{DeviceKind::CUDA, 0};
      return v;
    };
    std::vector<ArrayView> in;
    for (const HalfPair* p : pairs) in.push_back(on_cuda(p->h.view()));
    Array out(t, want[0].shape());
    const ArrayView outs[] = {on_cuda(out.view())};
    evaluate(r, in, outs);
    expect_rounded(out, want[0], r.str());
    EXPECT_EQ(dev.loads(), 0) << r.str();
    EXPECT_EQ(dev.stores(), 0) << r.str();
    EXPECT_EQ(dev.converts(), static_cast<int>(pairs.size()) + 1) << r.str();
    ASSERT_FALSE(dev.calls().empty());
    for (const NullCall& c : dev.calls()) {
      EXPECT_EQ(c.device, 0);
      EXPECT_EQ(c.dtype, DType::Float32);
    }
  }
}

TEST_P(HalfReductions, MixedDtypesAreClearErrors) {
  const DType t = GetParam();
  const Reduction r(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))));
  const HalfPair px = half_random(t, {4, 3}, 1);
  const Array y32 = random_array(DType::Float32, {5, 3}, 2);
  expect_error(
      [&] {
        evaluate(r, std::vector<Array>{px.h, y32});
      },
      {"evaluate", "input 1 has dtype float32 but input 0 has", dtype_name(t),
       "all inputs must share one dtype"});
  Array out32(DType::Float32, {4, 1});
  const ArrayView in[] = {px.h.view(), half_random(t, {5, 3}, 2).h.view()};
  const ArrayView outs[] = {out32.view()};
  expect_error([&] { evaluate(r, in, outs); },
               {"evaluate", "output 0 has dtype float32 but the inputs are", dtype_name(t)});
}

INSTANTIATE_TEST_SUITE_P(Half, HalfReductions, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });
