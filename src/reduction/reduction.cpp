// Reduction specs: construction checks, variable slots, output shapes, hashing and printing.
#include <algorithm>
#include <unordered_map>

#include "ops/op.hpp"
#include "reduction/reduction_impl.hpp"
#include "reduction/reduction_info.hpp"

namespace tessel {

namespace {

void add_vars(const Formula& f, std::vector<VarSlot>& out) {
  if (!f.valid()) return;
  for (const Formula& v : variables(f))
    out.push_back(VarSlot{v.node().var_index(), v.node().var_cat(), v.dim(), DType::Float32, false});
}

const char* cat_name(Category c) {
  return c == Category::I ? "Vi" : c == Category::J ? "Vj" : "Pm";
}

}  // namespace

const VarSlot* ReductionImpl::find_var(int index) const {
  for (const auto& v : vars)
    if (v.index == index) return &v;
  return nullptr;
}

int ReductionImpl::num_outputs() const { return reduction_info(op).num_outputs(); }

int ReductionImpl::output_dim(int out) const {
  (void)out;  // every output of a row has the same columns
  return reduction_info(op).output_dim(f.dim(), weight.valid() ? weight.dim() : 0, k);
}

bool ReductionImpl::output_is_index(int out) const {
  return reduction_info(op).output_is_index(out);
}

int ReductionImpl::next_input_index() const {
  int n = 0;
  for (const auto& v : vars)
    if (v.index < kComputedBase) n = std::max(n, v.index + 1);
  return n;
}

int ReductionImpl::next_computed_index() const {
  int n = kComputedBase;
  for (const auto& v : vars) n = std::max(n, v.index + 1);
  return n;
}

void ReductionImpl::finalize() {
  std::sort(vars.begin(), vars.end(), [](const VarSlot& a, const VarSlot& b) {
    return a.index < b.index;
  });
  std::vector<VarSlot> merged;
  for (const VarSlot& v : vars) {
    if (!merged.empty() && merged.back().index == v.index) {
      const VarSlot& u = merged.back();
      if (u.cat != v.cat || u.dim != v.dim)
        detail::fail("Reduction", "variable ", v.index, " is used both as ", cat_name(u.cat), "(",
                     u.index, ",", u.dim, ") and as ", cat_name(v.cat), "(", v.index, ",", v.dim,
                     ")");
      merged.back().computed |= v.computed;
      if (v.kind == DType::Int64) merged.back().kind = DType::Int64;
      continue;
    }
    merged.push_back(v);
  }
  vars = std::move(merged);
  // Hash everything that changes the result, so kernel caches and Python pickles can key on it.
  std::vector<int64_t> ip = {static_cast<int64_t>(op), axis, k, full_sum, index_var};
  for (const auto& v : vars)
    ip.insert(ip.end(), {v.index, static_cast<int64_t>(v.cat), v.dim, static_cast<int64_t>(v.kind),
                         v.computed});
  for (const auto& c : computed)
    ip.insert(ip.end(), {c.index, c.output, static_cast<int64_t>(c.source->hash.lo),
                         static_cast<int64_t>(c.source->hash.hi)});
  for (const auto& s : slot_vars) ip.insert(ip.end(), {s.var, s.src, static_cast<int64_t>(s.kind)});
  for (const auto& a : addends)
    ip.insert(ip.end(), {static_cast<int64_t>(a->hash.lo), static_cast<int64_t>(a->hash.hi)});
  for (const Formula& p : {f, weight}) {
    if (!p.valid()) continue;
    ip.push_back(static_cast<int64_t>(p.hash().lo));
    ip.push_back(static_cast<int64_t>(p.hash().hi));
  }
  Hash128 h = hash_words(ip);
  hash = h;
}

Reduction::Reduction(ReductionOp op, Formula f, int axis, int k, Formula weight) {
  const char* fn = "Reduction";
  if (!f.valid()) detail::fail(fn, "the formula is null");
  if (axis != 0 && axis != 1) detail::fail(fn, "axis must be 0 (over i) or 1 (over j), got ", axis);
  const ReductionInfo& info = reduction_info(op);
  if (!info.by_name)
    detail::fail(fn, info.name, " is produced by differentiation, not built directly");
  auto impl = std::make_shared<ReductionImpl>();
  impl->op = op;
  impl->f = f;
  impl->axis = axis;
  impl->k = k;
  if (info.uses_k) {
    if (k < 1) detail::fail(fn, info.name, " needs K >= 1, got ", k);
  } else if (k != 0) {
    detail::fail(fn, "K is only used by the KMin reductions, got K = ", k, " for ", info.name);
  }
  if (info.scalar_formula && f.dim() != 1)
    detail::fail(fn, info.name, " needs a formula of dim 1, got dim ", f.dim());
  if (info.weight == WeightUse::Required && !weight.valid())
    detail::fail(fn, info.name, " needs the weight formula G");
  if (weight.valid() && info.weight == WeightUse::None)
    detail::fail(fn, "a weight formula is only used by LogSumExp and SumSoftMaxWeight");
  impl->weight = weight;
  add_vars(f, impl->vars);
  add_vars(weight, impl->vars);
  for (const auto& v : impl->vars)
    if (v.index >= kComputedBase)
      detail::fail(fn, "variable index ", v.index, " is reserved (must be < ", kComputedBase, ")");
  impl->finalize();
  impl_ = std::move(impl);
}

static const ReductionImpl& checked(const std::shared_ptr<const ReductionImpl>& p) {
  if (!p) detail::fail("Reduction", "this reduction is empty (default-constructed)");
  return *p;
}

const ReductionImpl& Reduction::impl() const { return checked(impl_); }
ReductionOp Reduction::op() const { return checked(impl_).op; }
int Reduction::axis() const { return checked(impl_).axis; }
int Reduction::k() const { return checked(impl_).k; }
const Formula& Reduction::formula() const { return checked(impl_).f; }
const Formula& Reduction::weight() const { return checked(impl_).weight; }
int Reduction::num_outputs() const { return checked(impl_).num_outputs(); }
int Reduction::output_dim(int out) const { return checked(impl_).output_dim(out); }
bool Reduction::output_is_index(int out) const { return checked(impl_).output_is_index(out); }
bool Reduction::full_sum() const { return checked(impl_).full_sum; }
Hash128 Reduction::hash() const { return checked(impl_).hash; }

std::vector<VarSlot> Reduction::inputs() const {
  std::vector<VarSlot> r;
  for (const auto& v : checked(impl_).vars)
    if (!v.computed) r.push_back(v);
  return r;
}

std::string Reduction::str() const {
  const ReductionImpl& r = checked(impl_);
  std::string s = std::string(reduction_name(r.op)) + "_Reduction(" + r.f.str();
  if (r.weight.valid()) s += ", weight=" + r.weight.str();
  s += ", axis=" + std::to_string(r.axis);
  if (r.k) s += ", K=" + std::to_string(r.k);
  if (r.full_sum) s += ", summed over outputs";
  for (const auto& a : r.addends) s += " + " + Reduction(a).str();
  return s + ")";
}

}  // namespace tessel
