// Expr's operations: each emits one statement through the active Emitter (see ops/op.hpp).
#include "codegen/emitter.hpp"

#include <cstdio>

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

Expr Emitter::assign(const std::string& rhs) {
  std::string name = "t" + std::to_string(next_++);
  code_ += "    const V " + name + " = " + rhs + ";\n";
  return Expr(std::move(name));
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
#define TESSEL_EXPR_PRIMITIVE(name, ar, value)                 \
  Expr t_##name(TESSEL_PARAMS_##ar(const Expr&)) {             \
    return call("v_" #name, {TESSEL_ADDRESSES_##ar});          \
  }
#define TESSEL_ADDRESSES_1 &x
#define TESSEL_ADDRESSES_2 &x, &y
#define TESSEL_ADDRESSES_4 &x, &y, &z, &w
TESSEL_PRIMITIVES(TESSEL_EXPR_PRIMITIVE)
#undef TESSEL_EXPR_PRIMITIVE

std::vector<Expr> emit_formula(const Formula& f,
                               const std::function<std::string(const Node&, int)>& var_name,
                               ExprMemo& memo) {
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
    } else {
      std::vector<const Expr*> args;
      for (const NodePtr& a : n->args) args.push_back(memo.at(a.get()).data());
      op_info(n->op).apply_e(*n, args.data(), out.data());
    }
  }
  return memo.at(f.ptr().get());
}

}  // namespace tessel
