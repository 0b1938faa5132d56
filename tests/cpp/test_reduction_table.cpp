// Walks the reduction table: every row's names, outputs, value and derivatives, so a row without
// coverage fails.
//
// Values: interpreter and compiled kernels (native SIMD level; TESSEL_SIMD lowers it), float64 and
// float32, against the dense float64 reference of reduction_helpers.hpp. Derivatives: grad (and
// jvp where the row has a forward rule) against central finite differences. The Gather/Scatter
// rows are not built by name: they are reached as the derivatives of the Min/Max/KMin rows.
#include <set>

#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// x: Vi(0,2), y: Vj(1,2), b: Vj(2,3), s: Pm(3,1).
const Formula X = vi(0, 2), Y = vj(1, 2), B = vj(2, 3), S = pm(3, 1);

std::vector<Array> inputs(DType t, int64_t n = 7, int64_t m = 11) {
  return {random_array(t, {n, 2}, 21, -2, 2), random_array(t, {m, 2}, 22, -2, 2),
          random_array(t, {m, 3}, 23, 0.2, 1.0), random_array(t, {1}, 24, 0.5, 1.5)};
}

// A reduction of this row: a scalar or a 2-vector formula as the row allows, continuous (no ties,
// so selected indices are locally constant), with the weight B when `weighted`.
Reduction build(const ReductionInfo& info, bool weighted, int axis = 1) {
  const Formula f = info.scalar_formula ? S * sqdist(X, Y) - sum(B) : S * (X - Y) * B[0];
  return Reduction(info.op, f, axis, info.uses_k ? 3 : 0, weighted ? B : Formula{});
}

std::vector<bool> weight_variants(const ReductionInfo& info) {
  switch (info.weight) {
    case WeightUse::None:
      return {false};
    case WeightUse::Required:
      return {true};
    case WeightUse::Optional:
      return {false, true};
  }
  return {};
}

Options backend(Backend b) {
  Options o;
  o.backend = b;
  return o;
}

std::string where(const ReductionInfo& info, bool weighted, int axis) {
  return std::string(info.name) + (weighted ? " weighted" : "") + " axis " + std::to_string(axis);
}

}  // namespace

TEST(ReductionTable, RowsFollowTheOpsAndNamesRoundTrip) {
  const auto rows = reduction_rows();
  const auto summaries = reduction_table();
  ASSERT_EQ(summaries.size(), rows.size());
  for (size_t q = 0; q < rows.size(); ++q) {
    const ReductionInfo& info = rows[q];
    SCOPED_TRACE(info.name);
    EXPECT_EQ(static_cast<size_t>(info.op), q);
    EXPECT_EQ(&reduction_info(info.op), &info);
    EXPECT_STREQ(reduction_name(info.op), info.name);
    EXPECT_EQ(summaries[q].name, info.name);
    if (info.by_name) {
      EXPECT_EQ(reduction_from_name(info.name), info.op);
      for (const std::string& s : summaries[q].spellings)
        EXPECT_EQ(reduction_from_name(s), info.op);
    } else {
      expect_error([&] { reduction_from_name(info.name); }, {"unknown reduction", "Sum"});
    }
    // The table's own consistency: select rows name their index row, which returns indices.
    if (info.keeps_index()) {
      const ReductionInfo& idx = reduction_info(info.index_op);
      EXPECT_EQ(idx.family, info.family);
      EXPECT_EQ(idx.is_max, info.is_max);
      EXPECT_EQ(idx.outputs, ReductionOutputs::Index);
    }
    EXPECT_EQ(info.grad == GradRule::None, info.output_is_index(0));
  }
  expect_error([] { reduction_from_name("Max_SumShiftExpWeight"); }, {"unknown reduction"});
}

TEST(ReductionTable, EveryRowMatchesTheDenseReference) {
  const bool compiled = compiler_info().usable;
  std::set<ReductionOp> covered;
  for (const ReductionInfo& info : reduction_rows()) {
    if (!info.by_name) continue;
    for (const bool weighted : weight_variants(info))
      for (const int axis : {0, 1}) {
        const std::string what = where(info, weighted, axis);
        SCOPED_TRACE(what);
        const Reduction r = build(info, weighted, axis);
        // Shapes and dtypes the table promises.
        ASSERT_EQ(r.num_outputs(), info.num_outputs());
        for (int k = 0; k < r.num_outputs(); ++k)
          EXPECT_EQ(r.output_dim(k),
                    info.output_dim(r.formula().dim(), weighted ? r.weight().dim() : 0, r.k()));
        for (const DType t : {DType::Float64, DType::Float32}) {
          const std::vector<Array> in = inputs(t);
          const auto want = dense_reduction(r, in);
          const double tol = t == DType::Float32 ? 2e-5 : 1e-12;
          for (const Backend b : {Backend::Interpreter, Backend::Compiled}) {
            if (b == Backend::Compiled && !compiled) continue;
            const auto got = evaluate(r, in, backend(b));
            ASSERT_EQ(got.size(), want.size());
            for (int k = 0; k < r.num_outputs(); ++k) {
              const bool idx = info.output_is_index(k);
              EXPECT_EQ(got[k].dtype(), idx ? DType::Int64 : t);
              expect_close(got[k], want[k], idx ? 0 : tol, idx ? 0 : tol,
                           what + (b == Backend::Compiled ? " compiled" : " interpreter") +
                               " output " + std::to_string(k));
            }
          }
        }
        covered.insert(info.op);
      }
  }
  for (const ReductionInfo& info : reduction_rows())
    if (info.by_name) EXPECT_TRUE(covered.count(info.op)) << info.name << " has no value check";
}

TEST(ReductionTable, EveryGradientRuleMatchesFiniteDifferences) {
  std::set<ReductionOp> covered;
  for (const ReductionInfo& info : reduction_rows()) {
    if (!info.by_name) continue;
    for (const bool weighted : weight_variants(info)) {
      const Reduction r = build(info, weighted);
      SCOPED_TRACE(where(info, weighted, 1));
      if (info.grad == GradRule::None) {
        expect_error([&] { grad(r, 0); }, {"indices"});
        expect_error([&] { jvp(r, 0); }, {"indices"});
        covered.insert(info.op);
        continue;
      }
      for (int v = 0; v < 4; ++v) {
        SCOPED_TRACE("variable " + std::to_string(v));
        check_grad_fd(r, inputs(DType::Float64), v, backend(Backend::Interpreter));
        const Reduction g = grad(r, v);
        covered.insert(info.op);
        covered.insert(g.op());
        // Derivatives made of Gather/Scatter rows have their own rule: differentiate again.
        if (reduction_info(g.op()).is_indexed() && v < 2) {
          std::vector<Array> gin = inputs(DType::Float64);
          gin.push_back(random_array(DType::Float64, {7, r.output_dim(0)}, 99));
          SCOPED_TRACE(std::string("second order through ") + reduction_name(g.op()));
          check_grad_fd(g, gin, 1 - v, backend(Backend::Interpreter));
        }
      }
    }
  }
  for (const ReductionInfo& info : reduction_rows())
    EXPECT_TRUE(covered.count(info.op)) << info.name << " has no derivative check";
}

TEST(ReductionTable, EveryForwardRuleMatchesFiniteDifferences) {
  const double h = 1e-6;
  for (const ReductionInfo& info : reduction_rows()) {
    if (!info.by_name || info.grad == GradRule::None) continue;
    // Forward mode through Min/Max needs a scalar formula: use one for every row.
    const Reduction r(info.op, S * sqdist(X, Y) - sum(B), 1, info.uses_k ? 3 : 0,
                      info.weight == WeightUse::Required ? B : Formula{});
    SCOPED_TRACE(info.name);
    if (!info.forward_mode()) {
      expect_error([&] { jvp(r, 0); }, {"forward mode"});
      continue;
    }
    for (int v = 0; v < 4; ++v) {
      std::vector<Array> in = inputs(DType::Float64);
      const Array t = random_array(DType::Float64, in[v].shape(), 77);
      std::vector<Array> jin = in;
      jin.push_back(t);
      const Array got = evaluate(jvp(r, v), jin, backend(Backend::Interpreter))[0];
      std::vector<Array> plus = clone(in), minus = clone(in);
      for (int64_t k = 0; k < t.size(); ++k) {
        plus[v].as<double>()[k] += h * t.at(k);
        minus[v].as<double>()[k] -= h * t.at(k);
      }
      const Array fp = evaluate(r, plus, backend(Backend::Interpreter))[0];
      const Array fm = evaluate(r, minus, backend(Backend::Interpreter))[0];
      ASSERT_EQ(got.size(), fp.size());
      for (int64_t k = 0; k < got.size(); ++k) {
        const double fd = (fp.at(k) - fm.at(k)) / (2 * h);
        EXPECT_NEAR(got.at(k), fd, 1e-6 * (1 + std::fabs(fd)))
            << "variable " << v << " entry " << k;
      }
    }
  }
}
