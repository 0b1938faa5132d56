// Gradients of reductions are reductions: reverse mode (grad) and forward mode (jvp) for every op.
#include "reduction/reduction_impl.hpp"
#include "ops/op.hpp"

#include <unordered_set>

namespace tessel {

namespace {

std::shared_ptr<ReductionImpl> derived_from(const ReductionImpl& r) {
  auto d = std::make_shared<ReductionImpl>();
  d->vars = r.vars;
  d->computed = r.computed;
  d->axis = r.axis;
  d->full_sum = r.full_sum;
  return d;
}

// A new variable filled from output `output` of `source` (evaluated on the same inputs).
Formula add_computed(ReductionImpl& d, const ReductionPtr& source, int output, Category cat) {
  const int index = d.next_computed_index();
  const bool is_index = source->output_is_index(output);
  const int dim = source->output_dim(output);
  d.vars.push_back(VarSlot{index, cat, dim, is_index ? DType::Int64 : DType::Float32, true});
  d.computed.push_back(ComputedVar{index, source, output});
  return var(index, dim, cat);
}

ReductionPtr sub_reduction(const ReductionImpl& r, ReductionOp op, int k = 0, Formula w = {}) {
  auto s = std::make_shared<ReductionImpl>();
  s->op = op;
  s->f = r.f;
  s->weight = w;
  s->axis = r.axis;
  s->k = k;
  // Same variables (and dependencies) as r: a sub-reduction reads the same inputs.
  s->vars = r.vars;
  s->computed = r.computed;
  s->finalize();
  return s;
}

// Which sum-like reduction carries a derivative with respect to a variable of category `c`:
// the output stays indexed like the original when c is the outer category (or a parameter).
void place(ReductionImpl& d, const ReductionImpl& r, Category c, bool gather_like) {
  if (c == Category::Param) {
    d.full_sum = true;
    d.axis = r.axis;
    d.op = gather_like ? r.op : ReductionOp::Sum;
    return;
  }
  d.full_sum = false;  // a derivative for an i or j variable is per row, even of a summed output
  if (!gather_like) {
    d.op = ReductionOp::Sum;
    d.axis = c == r.outer() ? r.axis : 1 - r.axis;
    return;
  }
  // Gather/Scatter: the anchor holds the index variable; the output follows the variable.
  const Category anchor = r.op == ReductionOp::ScatterSum ? r.inner() : r.outer();
  d.op = c == anchor ? ReductionOp::GatherSum : ReductionOp::ScatterSum;
  const Category out_cat = c;
  d.axis = out_cat == Category::I ? 1 : 0;
}

// Gradient through the selected indices of Min/Max/KMin: a Gather/Scatter of the formula's VJP.
void select_grad(ReductionImpl& d, const ReductionImpl& r, const Formula& x, const Formula& e,
                 const VarSlot& v) {
  const ReductionInfo& info = reduction_info(r.op);
  const bool kmin = info.family == ReductionFamily::KSelect;
  const ReductionPtr idx_src = sub_reduction(r, info.index_op, kmin ? r.k : 0);
  const Formula idx = add_computed(d, idx_src, 0, r.outer());
  // The slot variable carries the cotangent of the selected entry into the component it was
  // selected for: e[o, k * D + c] into component c for KMin (slot k * D + c), e[o, c] for Min/Max
  // (slot c).
  const int slot_index = d.next_computed_index();
  const int slot_dim = r.f.dim();
  d.vars.push_back(VarSlot{slot_index, r.outer(), slot_dim, DType::Float32, true});
  d.slot_vars.push_back(
      SlotVar{slot_index, e.node().var_index(), kmin ? SlotKind::Elem : SlotKind::Masked});
  d.index_var = idx.node().var_index();
  d.k = kmin ? r.k * r.f.dim() : r.f.dim();
  d.f = grad(r.f, x, var(slot_index, slot_dim, r.outer()));
  ReductionImpl as_gather = r;
  as_gather.op = ReductionOp::GatherSum;
  place(d, as_gather, v.cat, true);
}

// A slot variable of dim `dim` that is 1 in component k % dim at slot k, else 0.
Formula one_hot(ReductionImpl& d, Category cat, int dim) {
  const int oh = d.next_computed_index();
  d.vars.push_back(VarSlot{oh, cat, dim, DType::Float32, true});
  d.slot_vars.push_back(SlotVar{oh, -1, SlotKind::OneHot});
  return var(oh, dim, cat);
}

// The component of gs (the derivative with respect to slot variable sv) that slot k's source
// entry reached: all of gs when sv has dim 1 or is Masked (the one-hot on the source selects),
// else (KMin of a vector: source entry k sits in component k % D) component k % D of gs.
Formula slot_component(ReductionImpl& d, const SlotVar& s, const VarSlot& sv, const Formula& gs) {
  if (sv.dim == 1 || s.kind == SlotKind::Masked) return gs;
  return sum(gs * one_hot(d, sv.cat, sv.dim));
}

// Gather/Scatter derivatives keep the slots and indices of the reduction they come from.
void copy_slots(ReductionImpl& d, const ReductionImpl& r) {
  d.k = r.k;
  d.index_var = r.index_var;
  d.slot_vars = r.slot_vars;
}

// The forward values a SumSoftMaxWeight derivative reads: its LogSumExp L and its value S.
std::pair<Formula, Formula> softmax_values(ReductionImpl& d, const ReductionPtr& rp) {
  const Formula L = add_computed(d, sub_reduction(*rp, ReductionOp::LogSumExp), 0, rp->outer());
  return {L, add_computed(d, rp, 0, rp->outer())};
}

// The slot of input `index` wherever a reduction reads it: in its own variables, its addends, or
// the reductions that fill its computed variables. A derivative reduction reads its cotangent
// through a computed variable (the chain rule run backwards), so an input can reach a reduction
// only through its sources: skipping those dropped terms of third-order derivatives silently.
const VarSlot* find_input(const ReductionImpl& r, int index,
                          std::unordered_set<const ReductionImpl*>& seen) {
  if (const VarSlot* v = r.find_var(index)) return v;
  if (!seen.insert(&r).second) return nullptr;
  for (const auto& a : r.addends)
    if (const VarSlot* v = find_input(*a, index, seen)) return v;
  for (const ComputedVar& c : r.computed)
    if (const VarSlot* v = find_input(*c.source, index, seen)) return v;
  return nullptr;
}

const VarSlot* find_input(const ReductionImpl& r, int index) {
  std::unordered_set<const ReductionImpl*> seen;
  return find_input(r, index, seen);
}

// Where the cotangent of output 0 comes from: an input slot, or another reduction's output (when
// the chain rule runs backwards through a computed variable).
struct Cot {
  int input = -1;
  ReductionPtr source;
};

std::shared_ptr<ReductionImpl> grad_impl(const ReductionPtr& rp, int var_index, const Cot& cot);

// d<R, e>/dC for each computed float variable C of R, as a reduction indexed like C; the chain
// term is then C's own source differentiated with that as its cotangent.
void chain_through_computed(ReductionImpl& d, const ReductionImpl& r, const Formula& e,
                            int var_index) {
  for (const ComputedVar& c : r.computed) {
    if (c.source->output_is_index(c.output)) continue;  // indices are locally constant
    const VarSlot* cs = r.find_var(c.index);
    const Formula C = var(c.index, cs->dim, cs->cat);
    TESSEL_ASSERT(reduction_info(r.op).family == ReductionFamily::Sum,
                  "computed variable inside ", reduction_name(r.op));
    const Formula h = grad(r.f, C, e);
    if (is_zero(h)) continue;
    auto cbar = std::make_shared<ReductionImpl>();
    cbar->op = ReductionOp::Sum;
    cbar->f = h;
    cbar->axis = cs->cat == Category::J ? 0 : 1;
    cbar->full_sum = cs->cat == Category::Param;
    cbar->vars = d.vars;
    cbar->computed = d.computed;
    cbar->finalize();
    if (auto term = grad_impl(c.source, var_index, Cot{-1, cbar})) d.addends.push_back(term);
  }
}

std::shared_ptr<ReductionImpl> grad_impl(const ReductionPtr& rp, int var_index, const Cot& cot) {
  const ReductionImpl& r = *rp;
  const char* fn = "grad";
  const VarSlot* vp = find_input(r, var_index);
  if (!vp) return nullptr;  // r reads no input that depends on this variable
  auto d = derived_from(r);
  if (!r.find_var(var_index)) d->vars.push_back(*vp);  // read only through a computed variable
  // The cotangent of output 0: per outer row, or one vector when the output was summed.
  const Category e_cat = r.full_sum ? Category::Param : r.outer();
  Formula e;
  if (cot.source) {
    e = add_computed(*d, cot.source, 0, e_cat);
  } else {
    d->vars.push_back(VarSlot{cot.input, e_cat, r.output_dim(0), DType::Float32, false});
    e = var(cot.input, r.output_dim(0), e_cat);
  }
  for (const auto& a : r.addends)
    if (auto g = grad_impl(a, var_index, cot)) d->addends.push_back(std::move(g));
  const VarSlot& v = *vp;
  if (v.computed || v.kind == DType::Int64)
    detail::fail(fn, "variable ", var_index, " is filled internally and cannot be differentiated");
  const Formula x = var(v.index, v.dim, v.cat);
  const Formula& F = r.f;

  switch (reduction_info(r.op).grad) {
    case GradRule::Sum:
      d->f = grad(F, x, e);
      place(*d, r, v.cat, false);
      break;
    case GradRule::LogSumExp: {
      const Formula L = add_computed(*d, rp, 0, r.outer());
      const Formula p = e * exp(F - L);
      d->f = r.weight.valid() ? grad(F, x, sum(p * r.weight)) + grad(r.weight, x, p)
                              : grad(F, x, p);
      place(*d, r, v.cat, false);
      break;
    }
    case GradRule::SoftMax: {
      const auto [L, S] = softmax_values(*d, rp);
      const Formula p = exp(F - L);
      const Formula& G = r.weight;
      d->f = grad(G, x, e * p) + grad(F, x, p * ((G | e) - (S | e)));
      place(*d, r, v.cat, false);
      break;
    }
    case GradRule::Select:
    case GradRule::KSelect:
      if (r.full_sum)
        detail::fail(fn, "second derivatives through ", reduction_name(r.op),
                     " of a parameter gradient are not supported");
      select_grad(*d, r, x, e, v);
      break;
    case GradRule::Indexed:
      copy_slots(*d, r);
      d->f = grad(F, x, e);
      // A variable that feeds a slot (the cotangent of a Min, say) reaches F through it: the
      // derivative for slot k lands in component k, which a one-hot slot variable selects.
      for (const SlotVar& s : r.slot_vars) {
        if (s.src != var_index) continue;
        const VarSlot* sv = r.find_var(s.var);
        const Formula gs = grad(F, var(s.var, sv->dim, sv->cat), e);
        if (is_zero(gs)) continue;
        const Formula picked = slot_component(*d, s, *sv, gs);
        d->f = d->f + one_hot(*d, sv->cat, v.dim) * picked;
      }
      place(*d, r, v.cat, true);
      break;
    case GradRule::None:
      TESSEL_UNREACHABLE("no gradient rule for ", reduction_name(r.op));
  }
  chain_through_computed(*d, r, e, var_index);
  d->finalize();
  return d;
}

std::shared_ptr<ReductionImpl> jvp_impl(const ReductionPtr& rp, int var_index, int t_index) {
  const ReductionImpl& r = *rp;
  const char* fn = "jvp";
  const VarSlot* vp = find_input(r, var_index);
  if (!vp) return nullptr;
  auto d = derived_from(r);
  if (!r.find_var(var_index)) d->vars.push_back(*vp);
  for (const auto& a : r.addends)
    if (auto j = jvp_impl(a, var_index, t_index)) d->addends.push_back(std::move(j));
  const Formula x = var(vp->index, vp->dim, vp->cat), t = var(t_index, vp->dim, vp->cat);
  d->vars.push_back(VarSlot{t_index, vp->cat, vp->dim, DType::Float32, false});
  const Formula& F = r.f;
  auto dF = [&](const Formula& g) { return jvp(g, x, t); };
  Formula chain = zero(F.dim());  // sum over computed C of dF/dC . dC
  for (const ComputedVar& c : r.computed) {
    if (c.source->output_is_index(c.output)) continue;
    const VarSlot* cs = r.find_var(c.index);
    const Formula C = var(c.index, cs->dim, cs->cat);
    auto src = jvp_impl(c.source, var_index, t_index);
    if (!src) continue;
    const Formula Cdot = add_computed(*d, src, 0, cs->cat);
    chain = chain + jvp(F, C, Cdot);
  }
  const ReductionInfo& info = reduction_info(r.op);
  TESSEL_ASSERT(is_zero(chain) || info.family == ReductionFamily::Sum,
                "computed variable inside ", reduction_name(r.op));
  d->op = ReductionOp::Sum;
  switch (info.grad) {
    case GradRule::Sum:
      d->f = dF(F) + chain;
      break;
    case GradRule::LogSumExp: {
      const Formula L = add_computed(*d, rp, 0, r.outer());
      d->f = r.weight.valid() ? exp(F - L) * (r.weight * dF(F) + dF(r.weight))
                              : exp(F - L) * dF(F);
      break;
    }
    case GradRule::SoftMax: {
      const auto [L, S] = softmax_values(*d, rp);
      d->f = exp(F - L) * (dF(r.weight) + (r.weight - S) * dF(F));
      break;
    }
    case GradRule::Select: {
      if (F.dim() != 1)
        detail::fail(fn, "forward mode through ", reduction_name(r.op),
                     " needs a formula of dim 1, got dim ", F.dim());
      const ReductionPtr idx_src = sub_reduction(r, info.index_op);
      d->index_var = add_computed(*d, idx_src, 0, r.outer()).node().var_index();
      d->k = 1;
      d->op = ReductionOp::GatherSum;
      d->f = dF(F);
      break;
    }
    case GradRule::Indexed:
      d->op = r.op;
      copy_slots(*d, r);
      d->f = dF(F);
      break;
    case GradRule::KSelect:
    case GradRule::None:
      detail::fail(fn, "forward mode through ", reduction_name(r.op), " is not supported");
  }
  d->finalize();
  return d;
}

}  // namespace

Reduction grad(const Reduction& red, int var_index) {
  const ReductionImpl& r = red.impl();
  const VarSlot* v = r.find_var(var_index);
  if (!v) detail::fail("grad", "variable ", var_index, " does not occur in this reduction");
  if (v->computed || v->kind == DType::Int64)
    detail::fail("grad", "variable ", var_index, " is filled internally and cannot be differentiated");
  if (r.output_is_index(0))
    detail::fail("grad", reduction_name(r.op), " returns indices, which have no gradient");
  return Reduction(
      std::shared_ptr<const ReductionImpl>(grad_impl(red.impl_ptr(), var_index, Cot{r.next_input_index(), nullptr})));
}

Reduction jvp(const Reduction& red, int var_index) {
  const ReductionImpl& r = red.impl();
  const VarSlot* v = r.find_var(var_index);
  if (!v || v->computed || v->kind == DType::Int64)
    detail::fail("jvp", "variable ", var_index, " is not an input of this reduction");
  if (r.output_is_index(0))
    detail::fail("jvp", reduction_name(r.op), " returns indices, which have no derivative");
  return Reduction(
      std::shared_ptr<const ReductionImpl>(jvp_impl(red.impl_ptr(), var_index, r.next_input_index())));
}

}  // namespace tessel
