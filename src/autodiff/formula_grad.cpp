// Symbolic differentiation of formulas (reverse mode through each op's VJP; forward mode from it)
// and KeOps's derivative operators (GradMatrix, Diff, Divergence, Laplacian, TraceOperator).
//
// The operators are expanded here into ordinary formulas: the Jacobian's rows are reverse-mode
// gradients of the components of f, so nothing below the autodiff layer learns a new op, every
// backend evaluates them, and their own derivatives (second order and up) come from the same
// VJP rules. The IR is hash-consed and every code generator emits each distinct node once, so
// the forward sub-formulas that the rows share are computed once per (i, j) pair.
#include <algorithm>
#include <climits>
#include <string>
#include <unordered_map>

#include "ops/op.hpp"

namespace tessel {

namespace {

std::string shown(const Formula& f) {
  std::string s = f.str();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

void check_formula(const char* fn, const Formula& f) {
  if (!f.valid()) detail::fail(fn, "the formula (first argument) is null");
}

// KeOps differentiates with respect to a variable: Var(ind, dim, cat) or an alias of one.
void check_variable(const char* fn, const Formula& v) {
  if (!v.valid()) detail::fail(fn, "the variable (second argument) is null");
  if (!v.node().is_var())
    detail::fail(fn, "the second argument must be a variable (Vi, Vj, Pm, Var or an alias), got ",
                 shown(v));
}

// Row k of the Jacobian of f with respect to v: the gradient of f's component k (dim v).
Formula jacobian_row(const Formula& f, const Formula& v, int k) {
  return grad(f.dim() == 1 ? f : elem(f, k), v, int_cst(1));
}

// sum_k d f_k / d v_k for f and v of one dim: the rows' diagonal entries.
Formula diagonal_sum(const Formula& f, const Formula& v) {
  Formula r = elem(jacobian_row(f, v, 0), 0);
  for (int k = 1; k < f.dim(); ++k) r = r + elem(jacobian_row(f, v, k), k);
  return r;
}

// Whether f vanishes at v = 0 for every value of the other variables, read off its structure:
// v and Zero do; sums, negations, concatenations and zero-preserving unary ops of vanishing
// arguments do; products that are linear in each factor vanish with one factor. Anything else
// (an op this list does not know) counts as not vanishing: linearity is then refused, never
// assumed.
bool vanishes_at_origin(const Formula& f, const Formula& v) {
  std::unordered_map<const Node*, bool> zero;
  for (const NodePtr& n : topo_order(f.ptr())) {
    const auto z = [&](size_t k) { return zero.at(n->args[k].get()); };
    bool r = false;
    if (n.get() == v.ptr().get() || n->op == OpCode::Zero) {
      r = true;
    } else if (n->args.empty()) {
      r = n->is_zero();
    } else if (n->op == OpCode::Add || n->op == OpCode::Sub || n->op == OpCode::Concat) {
      r = z(0) && z(1);
    } else if (n->op == OpCode::Mul || n->op == OpCode::Scalprod || n->op == OpCode::MatVecMult ||
               n->op == OpCode::VecMatMult || n->op == OpCode::TensorProd ||
               n->op == OpCode::TensorDot) {
      r = z(0) || z(1);
    } else if (n->op == OpCode::Div || n->op == OpCode::Neg || op_info(n->op).zero_preserving) {
      r = z(0);
    }
    zero[n.get()] = r;
  }
  return zero.at(f.ptr().get());
}

}  // namespace

Formula grad(const Formula& f, const Formula& v, const Formula& cot) {
  if (!f.valid()) detail::fail("grad", "the formula is null");
  check_variable("grad", v);
  if (!cot.valid()) detail::fail("grad", "the cotangent is null");
  if (cot.dim() != f.dim())
    detail::fail("grad", "the cotangent has dim ", cot.dim(), "; expected the formula's dim ",
                 f.dim());
  const auto order = topo_order(f.ptr());
  std::unordered_map<const Node*, Formula> adj;
  adj[f.ptr().get()] = cot;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const NodePtr& n = *it;
    auto found = adj.find(n.get());
    if (found == adj.end() || n->args.empty()) continue;
    const Formula g = found->second;
    if (is_zero(g)) continue;
    const std::vector<Formula> parts = op_info(n->op).vjp(Formula(n), g);
    for (size_t k = 0; k < n->args.size(); ++k) {
      if (!parts[k].valid() || is_zero(parts[k])) continue;
      const Node* a = n->args[k].get();
      auto [slot, inserted] = adj.try_emplace(a, parts[k]);
      if (!inserted) slot->second = slot->second + parts[k];
    }
  }
  auto found = adj.find(v.ptr().get());
  return found == adj.end() ? zero(v.dim()) : found->second;
}

Formula jvp(const Formula& f, const Formula& v, const Formula& tangent) {
  if (!f.valid()) detail::fail("jvp", "the formula is null");
  check_variable("jvp", v);
  if (!tangent.valid() || tangent.dim() != v.dim())
    detail::fail("jvp", "the tangent must have the variable's dim ", v.dim());
  // J t = d/du <J^T u, t>: the transpose trick reuses every VJP rule. u is a placeholder variable
  // with an index no user formula has.
  const Formula u = pm(INT_MAX, f.dim());
  const Formula r = grad(grad(f, v, u) | tangent, u, constant(1.0));
  for (const Formula& w : variables(r))
    TESSEL_ASSERT(!w.same(u), "the derivative is not linear in the tangent");
  return r;
}

std::vector<Formula> variables(const Formula& f) {
  if (!f.valid()) detail::fail("variables", "the formula is null");
  std::vector<Formula> vars;
  for (const NodePtr& n : topo_order(f.ptr()))
    if (n->is_var()) vars.emplace_back(n);
  std::sort(vars.begin(), vars.end(), [](const Formula& a, const Formula& b) {
    const Node &x = a.node(), &y = b.node();
    if (x.var_index() != y.var_index()) return x.var_index() < y.var_index();
    if (x.var_cat() != y.var_cat()) return x.var_cat() < y.var_cat();
    return x.dim < y.dim;
  });
  return vars;
}

Formula grad_matrix(const Formula& f, const Formula& v) {
  check_formula("GradMatrix", f);
  check_variable("GradMatrix", v);
  // KeOps's layout: the gradients of f_0, f_1, ... concatenated, so entry k * dim(v) + l is
  // d f_k / d v_l (the Jacobian, row-major).
  Formula r = jacobian_row(f, v, 0);
  for (int k = 1; k < f.dim(); ++k) r = concat(r, jacobian_row(f, v, k));
  return r;
}

Formula diff(const Formula& f, const Formula& v, const Formula& u) {
  check_formula("Diff", f);
  check_variable("Diff", v);
  if (!u.valid()) detail::fail("Diff", "the direction (third argument) is null");
  if (u.dim() != v.dim())
    detail::fail("Diff", "the direction (third argument) has dim ", u.dim(),
                 "; expected the variable's dim ", v.dim());
  return jvp(f, v, u);
}

Formula divergence(const Formula& f, const Formula& v) {
  check_formula("Divergence", f);
  check_variable("Divergence", v);
  if (f.dim() != v.dim())
    detail::fail("Divergence", "the formula has dim ", f.dim(), " and the variable dim ", v.dim(),
                 "; the divergence needs equal dims");
  return diagonal_sum(f, v);
}

Formula laplacian(const Formula& f, const Formula& v) {
  check_formula("Laplacian", f);
  check_variable("Laplacian", v);
  if (f.dim() != 1)
    detail::fail("Laplacian", "the formula has dim ", f.dim(),
                 "; expected a scalar formula (dim 1)");
  return diagonal_sum(grad(f, v, int_cst(1)), v);
}

Formula trace_operator(const Formula& f, const Formula& v) {
  check_formula("TraceOperator", f);
  check_variable("TraceOperator", v);
  if (f.dim() != 1 && f.dim() != v.dim())
    detail::fail("TraceOperator", "the formula has dim ", f.dim(),
                 "; expected 1 or the variable's dim ", v.dim());
  // The trace is that of the matrix of a linear map: f must vanish at v = 0 and its Jacobian be
  // free of v. Both checks are symbolic, as KeOps's is: a formula linear only by an identity
  // they do not see is refused, never traced wrongly.
  bool linear = vanishes_at_origin(f, v) || is_zero(substitute(f, {v}, {zero(v.dim())}));
  for (int k = 0; linear && k < f.dim(); ++k)
    for (const Formula& w : variables(jacobian_row(f, v, k))) linear = linear && !w.same(v);
  if (!linear)
    detail::fail("TraceOperator", "the formula ", shown(f), " is not linear in the variable ",
                 shown(v));
  // dim f = 1: the trace of 1 x M (KeOps's convention), the sum of the gradient's entries.
  return f.dim() == v.dim() ? diagonal_sum(f, v) : sum(jacobian_row(f, v, 0));
}

}  // namespace tessel
