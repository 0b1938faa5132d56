// Op-test cases for KeOps's linear injections (ElemT, ExtractT, SumT), DiffClampInt and Kron.
#pragma once

#include <vector>

#include "ir/node.hpp"
#include "ops/op.hpp"
#include "tessel/formula.hpp"

namespace op_cases {

// Numpy's kron of row-major tensors of equal ranks, flattened: output axis k has size
// dims_a[k] * dims_b[k] and index i_k * dims_b[k] + j_k.
inline Vec kron_ref(const std::vector<int>& dims_a, const std::vector<int>& dims_b, const Vec& a,
                    const Vec& b) {
  std::vector<int> od(dims_a.size());
  for (size_t k = 0; k < od.size(); ++k) od[k] = dims_a[k] * dims_b[k];
  Vec out(a.size() * b.size());
  for (int ia = 0; ia < static_cast<int>(a.size()); ++ia) {
    const auto ma = unravel(ia, dims_a);
    for (int ib = 0; ib < static_cast<int>(b.size()); ++ib) {
      const auto mb = unravel(ib, dims_b);
      std::vector<int> mo(od.size());
      for (size_t k = 0; k < od.size(); ++k) mo[k] = ma[k] * dims_b[k] + mb[k];
      out[ravel(mo, od)] = a[ia] * b[ib];
    }
  }
  return out;
}

// The cases, appended to the table's: degenerate placements (first and last component, a dim-1
// output that simplifies away) as well as ordinary ones.
inline void add_linear_cases(std::vector<OpCase>& cs) {
  using namespace tessel;
  using GK = GradKind;
  const Draw u2 = uniform(-2, 2);
  const CaseAdder add(cs);
  for (auto [n, m] : std::vector<std::pair<int, int>>{{5, 3}, {4, 0}, {4, 3}, {1, 0}})
    add(
        "ElemT" + std::to_string(n) + std::to_string(m), OpCode::ElemT, {1},
        [n, m](auto& v) { return elem_t(v[0], n, m); },
        [n, m](const Point& p) {
          Vec r(n, 0.0);
          r[m] = p[0][0];
          return r;
        },
        {u2});
  // (arg dim, start, dim): inside, at the start, at the end, the whole output (simplified away)
  for (auto [d, st, dim] : std::vector<std::tuple<int, int, int>>{
           {5, 3, 10}, {3, 0, 5}, {3, 2, 5}, {1, 0, 4}, {1, 3, 4}, {3, 0, 3}})
    add(
        "ExtractT" + std::to_string(d) + "_" + std::to_string(st) + "_" + std::to_string(dim),
        OpCode::ExtractT, {d}, [st, dim](auto& v) { return extract_t(v[0], st, dim); },
        [st, dim](const Point& p) {
          Vec r(dim, 0.0);
          std::copy(p[0].begin(), p[0].end(), r.begin() + st);
          return r;
        },
        {u2});
  for (int dim : {4, 1})
    add(
        "SumT" + std::to_string(dim), OpCode::SumT, {1},
        [dim](auto& v) { return sum_t(v[0], dim); },
        [dim](const Point& p) { return Vec(dim, p[0][0]); }, {u2});
  // Both bounds are included; the integer draws land on them often.
  const auto dci_ref = [](const Point& p) {
    Vec r;
    for (double x : p[0]) r.push_back(x < -1 ? 0.0 : x > 2 ? 0.0 : 1.0);
    return r;
  };
  add(
      "DiffClampInt", OpCode::DiffClampInt, {3},
      [](auto& v) { return diff_clampint(v[0], -1, 2); }, dci_ref, {uniform(-3, 4)}, GK::Zero);
  add(
      "DiffClampInt_edges", OpCode::DiffClampInt, {4},
      [](auto& v) { return diff_clampint(v[0], -1, 2); }, dci_ref, {ints(-3, 4)}, GK::Zero);
  // Kron is a TensorDot; its cases check the permutation that makes it numpy's kron.
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> krons = {
      {{2, 3}, {2, 2}}, {{3, 2, 1, 2}, {1, 2, 2, 3}}, {{3}, {2}}, {{2, 1}, {1, 3}}, {{}, {}}};
  for (const auto& [da, db] : krons) {
    std::string name = "Kron";
    for (int v : da) name += std::to_string(v);
    name += "_";
    for (int v : db) name += std::to_string(v);
    add(
        name, OpCode::TensorDot, {prod(da), prod(db)},
        [da, db](auto& v) { return kron(v[0], v[1], da, db); },
        [da, db](const Point& p) { return kron_ref(da, db, p[0], p[1]); }, {u2});
  }
}

}  // namespace op_cases
