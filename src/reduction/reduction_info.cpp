// The reduction table's rows, name lookup, and the fold rules' source text for generated kernels.
#include "reduction/reduction_info.hpp"

#include <limits>

#include "ops/op.hpp"
#include "reduction/fold_rules.hpp"

namespace tessel {

namespace {

using F = ReductionFamily;
using O = ReductionOutputs;
using D = OutputDimRule;
using W = WeightUse;
using G = GradRule;
using R = ReductionOp;
constexpr double kInf = std::numeric_limits<double>::infinity();

// In ReductionOp order (checked by reduction_info).
// (not Max_SumShiftExpWeight: KeOps returns its raw (max, shifted sums) pair, not a log)
// One row a reduction reads better than one field a line.
// clang-format off
constexpr ReductionInfo kTable[] = {
    {R::Sum, "Sum", {}, true, F::Sum, false, O::Value, D::FormulaDim, W::None, false, false, 0.0,
     R::Sum, G::Sum, "sum_j F"},
    {R::Min, "Min", {}, true, F::Select, false, O::Value, D::FormulaDim, W::None, false, false,
     kInf, R::ArgMin, G::Select, "min_j F per component; NaN wins, ties to the lowest index"},
    {R::Max, "Max", {}, true, F::Select, true, O::Value, D::FormulaDim, W::None, false, false,
     -kInf, R::ArgMax, G::Select, "max_j F per component; NaN wins, ties to the lowest index"},
    {R::ArgMin, "ArgMin", {}, true, F::Select, false, O::Index, D::FormulaDim, W::None, false,
     false, kInf, R::ArgMin, G::None, "the index of Min"},
    {R::ArgMax, "ArgMax", {}, true, F::Select, true, O::Index, D::FormulaDim, W::None, false,
     false, -kInf, R::ArgMax, G::None, "the index of Max"},
    {R::MinArgMin, "Min_ArgMin", {"MinArgMin"}, true, F::Select, false, O::ValueIndex,
     D::FormulaDim, W::None, false, false, kInf, R::ArgMin, G::Select, "(Min, ArgMin)"},
    {R::MaxArgMax, "Max_ArgMax", {"MaxArgMax"}, true, F::Select, true, O::ValueIndex,
     D::FormulaDim, W::None, false, false, -kInf, R::ArgMax, G::Select, "(Max, ArgMax)"},
    {R::KMin, "KMin", {}, true, F::KSelect, false, O::Value, D::KTimesFormulaDim, W::None, false,
     true, kInf, R::ArgKMin, G::KSelect,
     "the K smallest values of each component of F, sorted; NaN last, ties to the lowest index"},
    {R::ArgKMin, "ArgKMin", {}, true, F::KSelect, false, O::Index, D::KTimesFormulaDim, W::None,
     false, true, kInf, R::ArgKMin, G::None, "the indices of KMin"},
    {R::KMinArgKMin, "KMin_ArgKMin", {"KMinArgKMin"}, true, F::KSelect, false, O::ValueIndex,
     D::KTimesFormulaDim, W::None, false, true, kInf, R::ArgKMin, G::KSelect, "(KMin, ArgKMin)"},
    {R::LogSumExp, "LogSumExp", {"LogSumExpWeight"}, true, F::SoftMax, false, O::Value,
     D::WeightDimOr1, W::Optional, true, false, -kInf, R::LogSumExp, G::LogSumExp,
     "log sum_j exp(F), or with a weight w, log sum_j exp(F) w"},
    {R::SumSoftMaxWeight, "SumSoftMaxWeight", {"SumSoftMax", "SoftMax"}, true, F::SoftMax, false,
     O::Value, D::WeightDimOr1, W::Required, true, false, -kInf, R::SumSoftMaxWeight, G::SoftMax,
     "sum_j exp(F) G / sum_j exp(F)"},
    {R::GatherSum, "GatherSum", {}, false, F::Indexed, false, O::Value, D::FormulaDim, W::None,
     false, true, 0.0, R::GatherSum, G::Indexed, "out[o] = sum_k G(o, idx[o, k], slot k)"},
    {R::ScatterSum, "ScatterSum", {}, false, F::Indexed, false, O::Value, D::FormulaDim, W::None,
     false, true, 0.0, R::ScatterSum, G::Indexed, "out[idx[o, k]] += G(o, idx[o, k], slot k)"},
};
// clang-format on

constexpr bool table_in_op_order() {
  for (size_t q = 0; q < std::size(kTable); ++q)
    if (static_cast<size_t>(kTable[q].op) != q) return false;
  return true;
}
static_assert(table_in_op_order(), "kTable rows must follow the ReductionOp order");
static_assert(std::size(kTable) == static_cast<size_t>(ReductionOp::ScatterSum) + 1,
              "every ReductionOp needs a row in kTable");

}  // namespace

const ReductionInfo& reduction_info(ReductionOp op) {
  const auto q = static_cast<size_t>(op);
  if (q >= std::size(kTable)) detail::fail("reduction_info", "internal: unknown reduction ", q);
  return kTable[q];
}

std::span<const ReductionInfo> reduction_rows() { return kTable; }

const char* reduction_name(ReductionOp op) {
  const auto q = static_cast<size_t>(op);
  return q < std::size(kTable) ? kTable[q].name : "?";
}

ReductionOp reduction_from_name(const std::string& name) {
  std::string known;
  for (const ReductionInfo& e : kTable) {
    if (!e.by_name) continue;
    if (name == e.name) return e.op;
    for (const char* s : e.spellings)
      if (s && name == s) return e.op;
    known += std::string(known.empty() ? "" : ", ") + e.name;
  }
  detail::fail("reduction_from_name", "unknown reduction '", name, "'; expected one of ", known);
}

std::vector<ReductionSummary> reduction_table() {
  static const char* const kFamily[] = {"sum", "select", "kselect", "softmax", "indexed"};
  static const char* const kOutputs[] = {"value", "index", "value,index"};
  static const char* const kDim[] = {"formula", "k_times_formula", "weight_or_1"};
  static const char* const kWeight[] = {"none", "optional", "required"};
  static const char* const kGrad[] = {"none",   "sum",     "logsumexp", "softmax",
                                      "select", "kselect", "indexed"};
  std::vector<ReductionSummary> v;
  for (const ReductionInfo& e : kTable) {
    ReductionSummary r;
    r.op = e.op;
    r.name = e.name;
    for (const char* sp : e.spellings)
      if (sp) r.spellings.push_back(sp);
    r.by_name = e.by_name;
    r.family = kFamily[static_cast<int>(e.family)];
    r.is_max = e.is_max;
    r.outputs = kOutputs[static_cast<int>(e.outputs)];
    r.dim_rule = kDim[static_cast<int>(e.dim_rule)];
    r.weight = kWeight[static_cast<int>(e.weight)];
    r.scalar_formula = e.scalar_formula;
    r.uses_k = e.uses_k;
    r.identity = e.identity;
    r.index_op = e.keeps_index() ? reduction_name(e.index_op) : "";
    r.grad = kGrad[static_cast<int>(e.grad)];
    r.forward_mode = e.forward_mode();
    r.summary = e.summary;
    v.push_back(std::move(r));
  }
  return v;
}

std::string identity_text(const ReductionInfo& info, const char* inf) {
  if (info.identity == 0) return "0";
  return std::string(info.identity < 0 ? "-" : "") + inf;
}

const char* fold_rules_source() {
  // The macro argument arrives on one line: start each function on its own, once.
  static const std::string text = [] {
#define TESSEL_FOLD_RULES(...) #__VA_ARGS__
    std::string s = "\n// Merge rules shared with the interpreter (reduction/fold_rules.inc).\n"
#include "reduction/fold_rules.inc"
        ;
#undef TESSEL_FOLD_RULES
    for (size_t at = s.find(" FOLD_QUAL "); at != std::string::npos; at = s.find(" FOLD_QUAL ", at))
      s[at] = '\n';
    return s + "\n";
  }();
  return text.c_str();
}

}  // namespace tessel
