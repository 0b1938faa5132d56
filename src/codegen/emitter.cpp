// Expr's operations: each emits one statement through the active Emitter (see ops/op.hpp).
#include "codegen/emitter.hpp"

#include <cstdio>

#include "ops/contraction.hpp"

namespace tessel {

namespace {
thread_local Emitter* active = nullptr;
}

Emitter::Emitter() : prev_(active) { active = this; }
Emitter::~Emitter() { active = prev_; }

Emitter& Emitter::current() {
  TESSEL_ASSERT(active, "no active emitter");
  return *active;
}

std::string Emitter::fresh() { return "t" + std::to_string(next_++); }

Expr Emitter::assign(const std::string& rhs) {
  std::string name = fresh();
  code_ += "    const V " + name + " = " + rhs + ";\n";
  return Expr(std::move(name));
}

std::string Emitter::array_of(const Expr* v, int64_t n) {
  const size_t open = v[0].s.find('[');
  if (open != std::string::npos && v[0].s.compare(open, std::string::npos, "[0]") == 0) {
    const std::string base = v[0].s.substr(0, open);
    bool whole = true;
    for (int64_t k = 1; k < n && whole; ++k) whole = v[k].s == base + "[" + std::to_string(k) + "]";
    if (whole) return base;
  }
  std::string name = fresh();
  code_ += "    const V " + name + "[" + std::to_string(n) + "] = {";
  for (int64_t k = 0; k < n; ++k) code_ += (k ? ", " : "") + v[k].s;
  code_ += "};\n";
  return name;
}

Expr::Expr(double c) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "bc(%.17g)", c);
  s = buf;
}

namespace {
Expr call(const char* f, std::initializer_list<const Expr*> args) {
  std::string r = std::string(f) + "(";
  bool first = true;
  for (const Expr* a : args) {
    r += (first ? "" : ", ") + a->s;
    first = false;
  }
  return Emitter::current().assign(r + ")");
}
Expr bin(const Expr& a, const char* op, const Expr& b) {
  return Emitter::current().assign(a.s + " " + op + " " + b.s);
}
}  // namespace

Expr operator+(const Expr& a, const Expr& b) { return bin(a, "+", b); }
Expr operator-(const Expr& a, const Expr& b) { return bin(a, "-", b); }
Expr operator*(const Expr& a, const Expr& b) { return bin(a, "*", b); }
Expr operator/(const Expr& a, const Expr& b) { return bin(a, "/", b); }
Expr operator-(const Expr& a) { return Emitter::current().assign("-" + a.s); }
#define TESSEL_EXPR_PRIMITIVE(name, ar, value)        \
  Expr t_##name(TESSEL_PARAMS_##ar(const Expr&)) {    \
    return call("v_" #name, {TESSEL_ADDRESSES_##ar}); \
  }
#define TESSEL_ADDRESSES_1 &x
#define TESSEL_ADDRESSES_2 &x, &y
#define TESSEL_ADDRESSES_4 &x, &y, &z, &w
TESSEL_PRIMITIVES(TESSEL_EXPR_PRIMITIVE)
#undef TESSEL_EXPR_PRIMITIVE

// Up to this many product terms a contraction is straight-line code (the compiler schedules it
// freely); above, a loop nest, because straight-line code grows with the product of the dims and
// g++ -O2 takes minutes on the tens of thousands of statements a TensorDot or its gradient
// (another TensorDot) then makes.
constexpr int64_t kUnrolledTerms = 256;

void contract(const Contraction& c, const Expr* a, const Expr* b, Expr* out) {
  if (c.terms() <= kUnrolledTerms) {
    contract<Expr>(c, a, b, out);
    return;
  }
  Emitter& em = Emitter::current();
  const std::string A = em.array_of(a, c.extent(0)), B = em.array_of(b, c.extent(1));
  const std::string O = em.fresh();
  const int64_t n_out = Contraction::count(c.out);
  std::string s = "    V " + O + "[" + std::to_string(n_out) + "];\n    {\n";
  // Loop q<k> over axis k, the output axes first; each index is a sum of q<k> * stride.
  std::string ia = "0", ib = "0", io = "0";
  int k = 0;
  auto loop = [&](const Contraction::Axis& x, int64_t out_stride) {
    const std::string q = "q" + std::to_string(k++) + "_";
    s += "    for (int " + q + " = 0; " + q + " < " + std::to_string(x.size) + "; ++" + q + ")\n";
    if (x.sa) ia += " + " + q + " * " + std::to_string(x.sa);
    if (x.sb) ib += " + " + q + " * " + std::to_string(x.sb);
    if (out_stride) io += " + " + q + " * " + std::to_string(out_stride);
  };
  int64_t stride = n_out;
  for (const Contraction::Axis& x : c.out) loop(x, stride /= x.size);
  s += "    {\n      V s_ = bc(0.0);\n";
  for (const Contraction::Axis& x : c.con) loop(x, 0);
  s += "      s_ = s_ + " + A + "[" + ia + "] * " + B + "[" + ib + "];\n";
  s += "      " + O + "[" + io + "] = s_;\n    }\n    }\n";
  em.raw(s);
  for (int64_t o = 0; o < n_out; ++o) out[o] = Expr(O + "[" + std::to_string(o) + "]");
}

std::vector<Expr> emit_formula(const Formula& f,
                               const std::function<std::string(const Node&, int)>& var_name,
                               ExprMemo& memo, const EmitSpecial& special) {
  for (const NodePtr& n : topo_order(f.ptr())) {
    if (memo.count(n.get())) continue;
    std::vector<Expr>& out = memo[n.get()];
    out.resize(n->dim);
    if (n->op == OpCode::Var) {
      for (int c = 0; c < n->dim; ++c) out[c] = Expr(var_name(*n, c));
    } else if (n->op == OpCode::Const) {
      out[0] = Expr(n->value);
    } else if (n->op == OpCode::Zero) {
      for (int c = 0; c < n->dim; ++c) out[c] = Expr(0.0);
    } else if (!special || !special(*n, memo, out.data())) {
      std::vector<const Expr*> args;
      for (const NodePtr& a : n->args) args.push_back(memo.at(a.get()).data());
      op_info(n->op).apply_e(*n, args.data(), out.data());
    }
  }
  return memo.at(f.ptr().get());
}

}  // namespace tessel
