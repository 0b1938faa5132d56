// Products summed over shared axes (TensorDot, MatVecMult, VecMatMult, TensorProd) described once
// for every scalar type, so that code generation can write a loop nest where straight-line code
// would grow with the product of the dims.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op.hpp"

namespace tessel {

// out[o] = sum over c of a[ia(o, c)] * b[ib(o, c)]: o runs row-major over the output axes, c over
// the contracted axes, and ia, ib are the multi-indices (o, c) dotted with each axis's strides.
struct Contraction {
  struct Axis {
    int64_t size, sa, sb;  // extent; stride in a and in b (0 where the axis is not the tensor's)
  };
  std::vector<Axis> out, con;

  static int64_t count(const std::vector<Axis>& axes) {
    int64_t n = 1;
    for (const Axis& x : axes) n *= x.size;
    return n;
  }
  int64_t terms() const { return count(out) * count(con); }
  // The number of elements of a (`which` 0) or b (1) that the contraction reads.
  int64_t extent(int which) const {
    int64_t last = 0;
    for (const auto* axes : {&out, &con})
      for (const Axis& x : *axes) last += (x.size - 1) * (which == 0 ? x.sa : x.sb);
    return last + 1;
  }

  // Calls f(o, ia, ib, first_term_of_o) for every term, in the order of the sums.
  template <class F>
  void for_each_term(F f) const {
    std::vector<int64_t> oi(out.size(), 0), ci(con.size(), 0);
    const int64_t n_out = count(out), n_con = count(con);
    for (int64_t o = 0; o < n_out; ++o) {
      int64_t base_a = 0, base_b = 0;
      for (size_t t = 0; t < out.size(); ++t)
        base_a += oi[t] * out[t].sa, base_b += oi[t] * out[t].sb;
      std::fill(ci.begin(), ci.end(), 0);
      for (int64_t c = 0; c < n_con; ++c) {
        int64_t ia = base_a, ib = base_b;
        for (size_t k = 0; k < con.size(); ++k) ia += ci[k] * con[k].sa, ib += ci[k] * con[k].sb;
        f(o, ia, ib, c == 0);
        next(ci, con);
      }
      next(oi, out);
    }
  }

 private:
  static void next(std::vector<int64_t>& idx, const std::vector<Axis>& axes) {
    for (int k = static_cast<int>(axes.size()) - 1; k >= 0; --k) {
      if (++idx[k] < axes[k].size) return;
      idx[k] = 0;
    }
  }
};

template <class S>
void contract(const Contraction& c, const S* a, const S* b, S* out) {
  c.for_each_term([&](int64_t o, int64_t ia, int64_t ib, bool first) {
    const S p = a[ia] * b[ib];
    out[o] = first ? p : out[o] + p;
  });
}

// Code generation (codegen/emitter.cpp): straight-line code for a few hundred terms, a loop nest
// over arrays above that, whose size and compile time then follow the output, not the terms.
void contract(const Contraction& c, const Expr* a, const Expr* b, Expr* out);

}  // namespace tessel
