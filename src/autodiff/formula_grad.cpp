// Symbolic differentiation of formulas (reverse mode through each op's VJP; forward mode from it).
#include <algorithm>
#include <climits>
#include <unordered_map>

#include "ops/op.hpp"

namespace tessel {

namespace {

void check_var(const char* fn, const Formula& v) {
  if (!v.valid() || !v.node().is_var())
    detail::fail(fn, "the variable must be a leaf made by vi/vj/pm (or a parsed alias)");
}

}  // namespace

Formula grad(const Formula& f, const Formula& v, const Formula& cot) {
  if (!f.valid()) detail::fail("grad", "the formula is null");
  check_var("grad", v);
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
  check_var("jvp", v);
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

}  // namespace tessel
