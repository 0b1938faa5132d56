// Products regrouped so that their factors that do not depend on the inner index come first.
//
// Gradients are long products: the Gaussian's d/dx is ((e_i * b_j) * exp(..)) * -g * 2 * (x_i -
// y_j), four multiplies per pair before the difference. Grouped as (b_j * exp(..)) * (e_i * -g *
// 2) * (x_i - y_j), the second factor is the same for every pair of a row, and the C++ compiler
// computes it once outside the inner loop (loop-invariant code motion): two multiplies per pair
// are gone. Only the association of a product changes, so the value is the same product of the
// same factors (its rounding error bound does not change: one rounding per multiply).
#include "codegen/hoist.hpp"

#include <unordered_map>

#include "ops/op.hpp"

namespace tessel {

namespace {

struct Hoister {
  Category inner;
  std::unordered_map<const Node*, bool> varies_;
  std::unordered_map<const Node*, Formula> done_;

  // Whether n depends on a variable of the inner category.
  bool varies(const NodePtr& n) {
    auto it = varies_.find(n.get());
    if (it != varies_.end()) return it->second;
    bool v = n->is_var() && n->var_cat() == inner;
    for (const NodePtr& a : n->args) v = v || varies(a);
    varies_[n.get()] = v;
    return v;
  }

  const Formula& mapped(const NodePtr& n) { return done_.at(n.get()); }

  // The factors of a product that varies: the inner loop's own products are opened up, factors
  // that do not vary are kept whole (they are computed outside the loop anyway).
  void factors(const NodePtr& n, std::vector<Formula>& out) {
    if (n->op == OpCode::Mul && varies(n)) {
      for (const NodePtr& a : n->args) factors(a, out);
    } else {
      out.push_back(mapped(n));
    }
  }

  Formula product(const NodePtr& n) {
    std::vector<Formula> fs;
    factors(n, fs);
    // Two factors have nothing to regroup: keep the node (and its hash) as it is.
    if (fs.size() == 2) return make(OpCode::Mul, {fs[0], fs[1]});
    // Scalars before vectors: a scalar times a vector costs one multiply per component.
    Formula fixed_s, fixed_v, moving_s, moving_v;
    auto times = [](Formula& acc, const Formula& f) { acc = acc.valid() ? acc * f : f; };
    for (const Formula& f : fs) {
      const bool moves = varies(f.ptr()), scalar = f.dim() == 1;
      times(moves ? (scalar ? moving_s : moving_v) : (scalar ? fixed_s : fixed_v), f);
    }
    Formula fixed = fixed_s;
    if (fixed_v.valid()) times(fixed, fixed_v);
    Formula r = moving_s;
    if (fixed.valid()) times(r, fixed);
    if (moving_v.valid()) times(r, moving_v);
    return r;
  }

  Formula run(const Formula& f) {
    for (const NodePtr& n : topo_order(f.ptr())) {
      if (n->args.empty()) {
        done_[n.get()] = Formula(n);
        continue;
      }
      const bool regroup = n->op == OpCode::Mul && varies(n);
      if (regroup) {
        done_[n.get()] = product(n);
        continue;
      }
      bool changed = false;
      std::vector<Formula> args;
      for (const NodePtr& a : n->args) {
        args.push_back(mapped(a));
        changed |= !args.back().same(Formula(a));
      }
      done_[n.get()] = changed ? make(n->op, std::move(args), n->ip) : Formula(n);
    }
    return mapped(f.ptr());
  }
};

}  // namespace

Formula hoist_invariant_factors(const Formula& f, Category inner) {
  if (!f.valid()) return f;
  return Hoister{inner, {}, {}}.run(f);
}

}  // namespace tessel
