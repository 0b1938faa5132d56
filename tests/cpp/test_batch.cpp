// Batch dimensions: (B..., n, dim) variables broadcast NumPy-style and are reduced in one call.
#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Element (b0, b1) of a (B0, B1, rows, dim) array, or of a broadcast (1, B1, ...) one.
Array element(const Array& a, int64_t b0, int64_t b1) {
  const auto& s = a.shape();
  const int64_t rows = s[s.size() - 2], dim = s[s.size() - 1];
  const int64_t i0 = s.size() == 4 && s[0] > 1 ? b0 : 0;
  const int64_t i1 = s.size() >= 3 && s[s.size() - 3] > 1 ? b1 : 0;
  const int64_t nb1 = s.size() >= 3 ? s[s.size() - 3] : 1;
  Array e(a.dtype(), {rows, dim});
  for (int64_t q = 0; q < rows * dim; ++q)
    e.as<double>()[q] = a.at((i0 * nb1 + i1) * rows * dim + q);
  return e;
}

}  // namespace

TEST(Batch, BroadcastBatchesMatchOneCallPerElement) {
  const Reduction r(ReductionOp::Sum, exp(-pm(3, 1) * sqdist(vi(0, 3), vj(1, 3))) * vj(2, 2));
  // x: (2, 3, 5, 3); y: (3, 7, 3) broadcast over the first batch dim; b: (1, 1, 7, 2); g: (2, 1, 1)
  const Array x = random_array(DType::Float64, {2, 3, 5, 3}, 1);
  const Array y = random_array(DType::Float64, {3, 7, 3}, 2);
  const Array b = random_array(DType::Float64, {1, 1, 7, 2}, 3);
  const Array g = random_array(DType::Float64, {2, 1, 1}, 4, 0.5, 1.5);
  for (Backend be : {Backend::Interpreter, Backend::Auto}) {
    Options o;
    o.backend = be;
    const Array out = evaluate(r, std::vector<Array>{x, y, b, g}, o)[0];
    ASSERT_EQ(out.shape(), (std::vector<int64_t>{2, 3, 5, 2}));
    for (int64_t b0 = 0; b0 < 2; ++b0)
      for (int64_t b1 = 0; b1 < 3; ++b1) {
        Array gg(DType::Float64, {1});
        gg.as<double>()[0] = g.at(b0);
        const Array want =
            evaluate(r, std::vector<Array>{element(x, b0, b1), element(y, b0, b1), element(b, b0, b1), gg}, o)[0];
        for (int64_t q = 0; q < want.size(); ++q)
          EXPECT_NEAR(out.at((b0 * 3 + b1) * 10 + q), want.at(q), 1e-12) << b0 << "," << b1;
      }
  }
}

TEST(Batch, GradientsAndIncompatibleBatches) {
  const Reduction r(ReductionOp::LogSumExp, -sqdist(vi(0, 2), vj(1, 2)));
  const Array x = random_array(DType::Float64, {4, 6, 2}, 1), y = random_array(DType::Float64, {4, 9, 2}, 2);
  const Array e = random_array(DType::Float64, {4, 6, 1}, 3);
  const Array gx = evaluate(grad(r, 0), std::vector<Array>{x, y, e})[0];
  ASSERT_EQ(gx.shape(), (std::vector<int64_t>{4, 6, 2}));
  for (int64_t b0 = 0; b0 < 4; ++b0) {
    Array xb(DType::Float64, {6, 2}), yb(DType::Float64, {9, 2}), eb(DType::Float64, {6, 1});
    for (int q = 0; q < 12; ++q) xb.as<double>()[q] = x.at(b0 * 12 + q);
    for (int q = 0; q < 18; ++q) yb.as<double>()[q] = y.at(b0 * 18 + q);
    for (int q = 0; q < 6; ++q) eb.as<double>()[q] = e.at(b0 * 6 + q);
    const Array want = evaluate(grad(r, 0), std::vector<Array>{xb, yb, eb})[0];
    for (int q = 0; q < 12; ++q) EXPECT_NEAR(gx.at(b0 * 12 + q), want.at(q), 1e-12);
  }
  const Array y3 = random_array(DType::Float64, {3, 9, 2}, 2);
  try {
    evaluate(r, std::vector<Array>{x, y3});
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("batch"), std::string::npos) << err.what();
  }
}

// output_specs says what the allocating evaluate returns (so a caller can allocate it on a GPU).
TEST(Batch, OutputSpecsAreTheAllocatedOutputs) {
  const Formula x = vi(0, 2), y = vj(1, 2);
  Reduction full(ReductionOp::Sum, sqdist(x, y));
  {
    auto impl = std::make_shared<ReductionImpl>(full.impl());
    impl->full_sum = true;
    full = Reduction(std::shared_ptr<const ReductionImpl>(impl));
  }
  const Reduction rs[] = {Reduction(ReductionOp::MinArgMin, sqdist(x, y)),
                          Reduction(ReductionOp::KMinArgKMin, sqdist(x, y), 0, 3), full};
  const std::vector<std::vector<Array>> inputs = {
      {random_array(DType::Float32, {5, 2}, 1), random_array(DType::Float32, {7, 2}, 2)},
      {random_array(DType::Float64, {3, 1, 5, 2}, 1), random_array(DType::Float64, {4, 7, 2}, 2)}};
  for (const Reduction& r : rs)
    for (const std::vector<Array>& in : inputs) {
      std::vector<ArrayView> v;
      for (const Array& a : in) v.push_back(a.view());
      const std::vector<OutputSpec> specs = output_specs(r, v);
      const std::vector<Array> outs = evaluate(r, v);
      ASSERT_EQ(specs.size(), outs.size()) << r.str();
      for (size_t k = 0; k < outs.size(); ++k) {
        EXPECT_EQ(specs[k].shape, outs[k].shape()) << r.str() << " output " << k;
        EXPECT_EQ(specs[k].dtype, outs[k].dtype()) << r.str() << " output " << k;
      }
    }
}
