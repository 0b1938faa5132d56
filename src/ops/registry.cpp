// The op table, the generic node builder (checks, simplification, folding) and the leaf builders.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "ops/op.hpp"

namespace tessel {

namespace {

std::vector<OpInfo> build_table() {
  std::vector<OpInfo> t(static_cast<size_t>(OpCode::Count_));
  auto leaf = [&](OpCode c, const char* name) {
    t[static_cast<size_t>(c)].code = c;
    t[static_cast<size_t>(c)].name = name;
  };
  leaf(OpCode::Var, "Var");
  leaf(OpCode::Const, "Const");
  leaf(OpCode::Zero, "Zero");
  std::vector<OpInfo> reg;
  register_arith(reg);
  register_math(reg);
  register_vector(reg);
  register_tensor(reg);
  register_complex(reg);
  register_linear(reg);
  register_sequence(reg);
  register_soft_dtw(reg);
  for (auto& o : reg) t[static_cast<size_t>(o.code)] = o;
  for (size_t k = 0; k < t.size(); ++k) TESSEL_ASSERT(t[k].name, "op ", k, " is not registered");
  return t;
}

const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> t = build_table();
  return t;
}

}  // namespace

const OpInfo& op_info(OpCode code) { return table()[static_cast<size_t>(code)]; }

const std::vector<OpInfo>& composites() {
  static const std::vector<OpInfo> c = [] {
    std::vector<OpInfo> v;
    register_linear_composites(v);
    return v;
  }();
  return c;
}

const OpInfo* op_by_name(const std::string& name) {
  static const auto by_name = [] {
    std::unordered_map<std::string, const OpInfo*> m;
    std::vector<const OpInfo*> entries;
    for (const auto& o : table())
      if (o.apply_d) entries.push_back(&o);
    for (const auto& o : composites()) entries.push_back(&o);
    for (const OpInfo* e : entries) {
      const OpInfo& o = *e;
      TESSEL_ASSERT(m.emplace(o.name, &o).second, "the op name ", o.name, " is taken twice");
      for (std::string_view rest = o.also ? o.also : ""; !rest.empty();) {
        const size_t end = std::min(rest.find(' '), rest.size());
        const std::string spelling(rest.substr(0, end));
        const bool fresh = end == 0 || m.emplace(spelling, &o).second;
        TESSEL_ASSERT(fresh, "the op spelling ", spelling, " is taken twice");
        rest.remove_prefix(std::min(end + 1, rest.size()));
      }
    }
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

namespace {

// The output dim an op's dim rule gives for arguments of these dims, or -1 when it refuses them.
int probe_dim(const OpInfo& o, const std::vector<int>& dims, int64_t ip_value) {
  std::vector<Formula> args;
  for (size_t k = 0; k < dims.size(); ++k) args.push_back(vi(static_cast<int>(k), dims[k]));
  const std::vector<int64_t> ip(static_cast<size_t>(o.n_ip), ip_value);
  try {
    return o.dim(args, ip);
  } catch (const Error&) {
    return -1;
  }
}

// Classifies a dim rule by asking it, so the summary cannot drift from the rule. A rule must
// answer alike for integer parameters 0 and 1 to count as independent of them.
std::string dim_rule_kind(const OpInfo& o) {
  if (!o.dim || o.arity == 0) return "custom";
  auto holds = [&](auto&& pred) { return pred(int64_t{0}) && pred(int64_t{1}); };
  const bool elementwise = holds([&](int64_t ip) {
    for (int d : {1, 2, 3})
      if (probe_dim(o, std::vector<int>(o.arity, d), ip) != d) return false;
    for (int k = 0; k < o.arity && o.arity > 1; ++k) {
      std::vector<int> dims(o.arity, 3);
      dims[k] = 1;
      if (probe_dim(o, dims, ip) != 3) return false;
      dims[k] = 2;
      if (probe_dim(o, dims, ip) != -1) return false;
    }
    return true;
  });
  if (elementwise) return "elementwise";
  if (o.arity == 1 && holds([&](int64_t ip) {
        return probe_dim(o, {1}, ip) == 1 && probe_dim(o, {2}, ip) == 1 &&
               probe_dim(o, {3}, ip) == 1;
      }))
    return "to_scalar";
  if (o.arity == 2 && holds([&](int64_t ip) {
        return probe_dim(o, {1, 1}, ip) == 1 && probe_dim(o, {3, 3}, ip) == 1 &&
               probe_dim(o, {2, 3}, ip) == -1 && probe_dim(o, {1, 3}, ip) == -1 &&
               probe_dim(o, {6, 3}, ip) == -1 && probe_dim(o, {3, 6}, ip) == -1;
      }))
    return "same_to_scalar";
  return "custom";
}

}  // namespace

std::vector<OpSummary> op_table() {
  std::vector<OpSummary> v;
  auto add = [&](const OpInfo& o) {
    std::string method = o.method ? o.method : o.name;
    if (!o.method)
      for (char& ch : method) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const ParamSpec& p = o.params;
    v.push_back({o.name, o.arity, p.tuples ? 0 : o.n_ip, o.infix ? o.infix : "",
                 o.build ? "custom" : dim_rule_kind(o), method, p.tuples, p.min, p.max,
                 p.names});
  };
  for (const OpInfo& o : table())
    if (o.apply_d) add(o);  // leaves (variables, constants, zeros) are no ops
  for (const OpInfo& o : composites()) add(o);
  return v;
}

void dim_error(const char* op, const std::string& what) { detail::fail(op, what); }

int checked_dim(const char* op, int64_t d) {
  if (d < 1) dim_error(op, "dim must be >= 1, got " + std::to_string(d));
  if (d > kMaxDim)
    dim_error(op, "dim " + std::to_string(d) + " is larger than the largest supported dim " +
                      std::to_string(kMaxDim));
  return static_cast<int>(d);
}

int broadcast_dim(const char* op, int a, int b) {
  if (a == b || b == 1) return a;
  if (a == 1) return b;
  dim_error(op, "operands have dims " + std::to_string(a) + " and " + std::to_string(b) +
                    "; expected equal dims or one of them 1");
}

int same_dim(const char* op, int a, int b) {
  if (a != b)
    dim_error(op, "operands have dims " + std::to_string(a) + " and " + std::to_string(b) +
                      "; expected equal dims");
  return a;
}

bool is_const(const Formula& f, double* value) {
  if (!f.valid() || f.node().op != OpCode::Const) return false;
  if (value) *value = f.node().value;
  return true;
}
bool is_zero(const Formula& f) { return f.valid() && f.node().is_zero(); }
bool is_one(const Formula& f) {
  double v;
  return is_const(f, &v) && v == 1.0;
}

Formula unbroadcast(const Formula& g, int target_dim) {
  if (!g.valid() || g.dim() == target_dim) return g;
  TESSEL_ASSERT(target_dim == 1, "gradient dim ", g.dim(), " vs ", target_dim);
  return sum(g);
}

Formula make(OpCode code, std::vector<Formula> args, std::vector<int64_t> ip) {
  const OpInfo& o = op_info(code);
  if (static_cast<int>(args.size()) != o.arity)
    detail::fail(o.name, "expected ", o.arity, " arguments, got ", args.size());
  for (size_t k = 0; k < args.size(); ++k)
    if (!args[k].valid()) detail::fail(o.name, "argument ", k + 1, " is a null formula");
  const int d = checked_dim(o.name, o.dim(args, ip));
  if (o.simplify) {
    Formula s = o.simplify(args, ip);
    if (s.valid()) return s;
  }
  if (o.zero_preserving && is_zero(args[0])) return zero(d);
  // Fold operations on constants when the result is an ordinary finite number.
  if (d == 1 && !args.empty() &&
      std::all_of(args.begin(), args.end(), [](const Formula& a) { return is_const(a); })) {
    std::vector<double> vals(args.size());
    std::vector<const double*> ptrs(args.size());
    for (size_t k = 0; k < args.size(); ++k) {
      vals[k] = args[k].node().value;
      ptrs[k] = &vals[k];
    }
    std::vector<NodePtr> nodes;
    for (auto& a : args) nodes.push_back(a.ptr());
    Node tmp{code, d, nodes, ip, 0, {}};
    double r = 0;
    o.apply_d(tmp, ptrs.data(), &r);
    if (std::isfinite(r)) return constant(r);
  }
  std::vector<NodePtr> nodes;
  nodes.reserve(args.size());
  for (auto& a : args) nodes.push_back(a.ptr());
  return intern(code, d, std::move(nodes), std::move(ip));
}

// ---- Formula members and leaves --------------------------------------------------------------------

int Formula::dim() const {
  if (!node_) detail::fail("Formula::dim", "null formula");
  return node_->dim;
}
Hash128 Formula::hash() const {
  if (!node_) detail::fail("Formula::hash", "null formula");
  return node_->hash;
}
Formula Formula::operator[](int m) const { return elem(*this, m); }

Formula var(int index, int dim, Category cat) {
  const char* fn = cat == Category::I ? "Vi" : cat == Category::J ? "Vj" : "Pm";
  if (index < 0) detail::fail(fn, "index must be >= 0, got ", index);
  checked_dim(fn, dim);
  return intern(OpCode::Var, dim, {}, {index, static_cast<int64_t>(cat)});
}
Formula vi(int index, int dim) { return var(index, dim, Category::I); }
Formula vj(int index, int dim) { return var(index, dim, Category::J); }
Formula pm(int index, int dim) { return var(index, dim, Category::Param); }

Formula constant(double value) {
  if (!std::isfinite(value)) detail::fail("constant", "value must be finite, got ", value);
  if (value == 0.0) value = 0.0;  // one zero: -0.0 and 0.0 hash alike
  return intern(OpCode::Const, 1, {}, {static_cast<int64_t>(ConstKind::Float)}, value);
}
Formula int_cst(int64_t value) {
  return intern(OpCode::Const, 1, {}, {static_cast<int64_t>(ConstKind::Int), value},
                static_cast<double>(value));
}
Formula rational(int64_t num, int64_t den) {
  if (den == 0) detail::fail("Rat", "denominator must be non-zero");
  // -INT64_MIN does not exist, and gcd would negate it too.
  if (num == INT64_MIN || den == INT64_MIN)
    detail::fail("Rat", "numerator and denominator must lie within +-", INT64_MAX, ", got ", num,
                 "/", den);
  if (den < 0) num = -num, den = -den;
  int64_t g = std::gcd(num, den);
  if (g > 1) num /= g, den /= g;
  if (den == 1) return int_cst(num);
  return intern(OpCode::Const, 1, {}, {static_cast<int64_t>(ConstKind::Rational), num, den},
                static_cast<double>(num) / static_cast<double>(den));
}
Formula zero(int dim) {
  checked_dim("Zero", dim);
  return intern(OpCode::Zero, dim, {}, {dim});
}

}  // namespace tessel
