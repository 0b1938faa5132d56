// CUDA statements of one outer row's formula: the op table's forms plus the folded exponential.
//
// The Gaussian kernel's exp(-g |x - y|^2) was -g d (one FMUL per pair), then v_exp's d' log2 e
// (another), then MUFU.EX2. With the j-invariant factor -g moved into the ex2's constant,
// ex2(d (-g log2 e)), the constant is loop-invariant and the pair keeps one FMUL. The value is the
// same exponential with one rounding moved: fl(fl(-g log2 e) d) instead of fl(fl(-g d) log2 e),
// both a relative error of two roundings in the exponent.
#include "codegen/cuda_formula.hpp"

#include <optional>
#include <unordered_map>

#include "codegen/emitter.hpp"
#include "codegen/hoist.hpp"
#include "reduction/reduction_info.hpp"

namespace tessel::cuda_gen {

using std::string;

string var_name(const KernelLayout::Entry& e, int row, int c) {
  if (e.cat == Category::I)
    return string("o") + std::to_string(e.index) + "_" + std::to_string(row) + "_" +
           std::to_string(c);
  return string(e.cat == Category::J ? "j" : "p") + std::to_string(e.index) + "_" +
         std::to_string(c);
}

namespace {

using ByIndex = std::unordered_map<int, const KernelLayout::Entry*>;

// exp(arg) with arg = +-(rest * k) or +-(rest / k), k j-invariant: emitted as ex2(rest * k'),
// k' = +-k log2 e (or +-log2 e / k), which the compiler hoists out of the inner loop.
class ExpFold {
 public:
  explicit ExpFold(const ByIndex& by_index) : by_index_(by_index) {}

  bool operator()(const Node& n, const ExprMemo& memo, Expr* out) {
    if (n.op != OpCode::Exp) return false;
    const std::optional<Split> s = split(*n.args[0]);
    if (!s || (!s->k && !s->neg) || !varies(*s->rest)) return false;
    for (int c = 0; c < n.dim; ++c) {
      const auto [rest, scale] = log2_scaled(*s, memo, c);
      out[c] = Emitter::current().assign("ex2(" + rest + " * " + scale + ")");
    }
    return true;
  }

  // a log2 e - ml as one fma, a being a node already emitted (component 0).
  string log2_minus(const Node& a, const ExprMemo& memo, const string& ml) {
    std::optional<Split> s = split(a);
    if (!s || !varies(*s->rest)) s = Split{&a};
    const auto [rest, scale] = log2_scaled(*s, memo, 0);
    return Emitter::current().assign("fma(" + rest + ", " + scale + ", -" + ml + ")").s;
  }

 private:
  struct Split {
    const Node* rest = nullptr;  // varies with j
    const Node* k = nullptr;     // j-invariant; null: 1
    bool div = false;            // rest / k
    bool neg = false;
  };

  // Whether n depends on an inner (J) variable.
  bool varies(const Node& n) {
    auto it = varies_.find(&n);
    if (it != varies_.end()) return it->second;
    bool v = n.is_var() && by_index_.at(n.var_index())->cat == Category::J;
    for (const NodePtr& a : n.args) v = v || varies(*a);
    varies_[&n] = v;
    return v;
  }

  std::optional<Split> split(const Node& a) {
    if (a.op == OpCode::Neg) {
      std::optional<Split> s = split(*a.args[0]);
      if (!s) s = Split{a.args[0].get()};
      s->neg = !s->neg;
      return s;
    }
    if ((a.op == OpCode::Mul || a.op == OpCode::Div) && a.args.size() == 2) {
      const Node &x = *a.args[0], &y = *a.args[1];
      const bool div = a.op == OpCode::Div;
      // The factor's components must broadcast like the product's: a scalar, or a.dim of them.
      auto fits = [&](const Node& k) { return k.dim == 1 || k.dim == a.dim; };
      if (varies(x) && !varies(y) && fits(y) && x.dim == a.dim) return Split{&x, &y, div};
      if (!div && varies(y) && !varies(x) && fits(x) && y.dim == a.dim) return Split{&y, &x};
    }
    return std::nullopt;
  }

  // Component c of s's varying part, and its scale: +-k log2 e (or +-log2 e / k), j-invariant.
  std::pair<string, string> log2_scaled(const Split& s, const ExprMemo& memo, int c) {
    string scale = "LOG2E_T";
    if (s.k) {
      const string k = component(memo, *s.k, c);
      scale = s.div ? "LOG2E_T / " + k : k + " * LOG2E_T";
    }
    if (s.k || s.neg) scale = Emitter::current().assign((s.neg ? "-(" : "(") + scale + ")").s;
    return {component(memo, *s.rest, c), scale};
  }

  static string component(const ExprMemo& memo, const Node& n, int c) {
    return memo.at(&n)[n.dim == 1 ? 0 : c].s;
  }

  const ByIndex& by_index_;
  std::unordered_map<const Node*, bool> varies_;
};

// Splits the j-invariant scalar factors off a (hoisted) product: f = factor * rest.
Formula split_factor(const Formula& f, Category inner, Formula& factor) {
  std::unordered_map<const Node*, bool> memo;
  auto varies = [&](auto& self, const NodePtr& n) -> bool {
    auto it = memo.find(n.get());
    if (it != memo.end()) return it->second;
    bool v = n->is_var() && n->var_cat() == inner;
    for (const NodePtr& a : n->args) v = v || self(self, a);
    return memo[n.get()] = v;
  };
  std::vector<NodePtr> factors;
  auto open = [&](auto& self, const NodePtr& n) -> void {
    if (n->op == OpCode::Mul && varies(varies, n))
      for (const NodePtr& a : n->args) self(self, a);
    else
      factors.push_back(n);
  };
  open(open, f.ptr());
  Formula rest_s, rest_v;
  auto times = [](Formula& acc, const Formula& x) { acc = acc.valid() ? acc * x : x; };
  for (const NodePtr& n : factors) {
    const Formula x(n);
    if (!varies(varies, n) && n->dim == 1)
      times(factor, x);
    else
      times(n->dim == 1 ? rest_s : rest_v, x);
  }
  if (!factor.valid() || (!rest_s.valid() && !rest_v.valid())) {
    factor = Formula();
    return f;
  }
  if (rest_v.valid()) times(rest_s, rest_v);
  return rest_s;
}

}  // namespace

RowForms row_forms(const ReductionImpl& r) {
  RowForms o;
  o.f = hoist_invariant_factors(r.f, r.inner());
  o.w = hoist_invariant_factors(r.weight, r.inner());
  if (reduction_info(r.op).family == ReductionFamily::Sum && !r.weight.valid())
    o.f = split_factor(o.f, r.inner(), o.factor);
  return o;
}

RowForms unfactored(const RowForms& forms) {
  if (!forms.factor.valid()) return forms;
  return {forms.factor * forms.f, forms.w, Formula()};
}

void emit_row(const RowForms& forms, const KernelLayout& lay, int row, bool f64,
              std::vector<string>& f, std::vector<string>& w, string* log2_arg, const string& ml) {
  ByIndex by_index;
  for (const auto& e : lay.vars) by_index[e.index] = &e;
  auto name = [&](const Node& n, int c) { return var_name(*by_index.at(n.var_index()), row, c); };
  ExprMemo memo;
  ExpFold fold(by_index);
  EmitSpecial special;
  if (!f64)
    special = [&fold](const Node& n, const ExprMemo& m, Expr* out) { return fold(n, m, out); };
  f.clear();
  w.clear();
  for (const Expr& e : emit_formula(forms.f, name, memo, special)) f.push_back(e.s);
  if (log2_arg) *log2_arg = fold.log2_minus(*forms.f.ptr(), memo, ml);
  if (forms.w.valid())
    for (const Expr& e : emit_formula(forms.w, name, memo, special)) w.push_back(e.s);
}

string emit_factor(const RowForms& forms, const KernelLayout& lay, int row) {
  ByIndex by_index;
  for (const auto& e : lay.vars) by_index[e.index] = &e;
  auto name = [&](const Node& n, int c) { return var_name(*by_index.at(n.var_index()), row, c); };
  ExprMemo memo;
  return emit_formula(forms.factor, name, memo).at(0).s;
}

}  // namespace tessel::cuda_gen
