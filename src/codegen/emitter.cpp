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
Expr t_exp(const Expr& a) { return call("v_exp", {&a}); }
Expr t_log(const Expr& a) { return call("v_log", {&a}); }
Expr t_sqrt(const Expr& a) { return call("v_sqrt", {&a}); }
Expr t_rsqrt(const Expr& a) { return call("v_rsqrt", {&a}); }
Expr t_sin(const Expr& a) { return call("v_sin", {&a}); }
Expr t_cos(const Expr& a) { return call("v_cos", {&a}); }
Expr t_asin(const Expr& a) { return call("v_asin", {&a}); }
Expr t_acos(const Expr& a) { return call("v_acos", {&a}); }
Expr t_atan(const Expr& a) { return call("v_atan", {&a}); }
Expr t_atan2(const Expr& y, const Expr& x) { return call("v_atan2", {&y, &x}); }
Expr t_floor(const Expr& a) { return call("v_floor", {&a}); }
Expr t_round(const Expr& a) { return call("v_round", {&a}); }
Expr t_abs(const Expr& a) { return call("v_abs", {&a}); }
Expr t_min(const Expr& a, const Expr& b) { return call("v_min", {&a, &b}); }
Expr t_max(const Expr& a, const Expr& b) { return call("v_max", {&a, &b}); }
Expr t_lt(const Expr& a, const Expr& b, const Expr& x, const Expr& y) {
  return call("v_lt", {&a, &b, &x, &y});
}
Expr t_le(const Expr& a, const Expr& b, const Expr& x, const Expr& y) {
  return call("v_le", {&a, &b, &x, &y});
}
Expr t_eq(const Expr& a, const Expr& b, const Expr& x, const Expr& y) {
  return call("v_eq", {&a, &b, &x, &y});
}

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
