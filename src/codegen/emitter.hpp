// Straight-line code emission: operations on Expr append `const V tN = ...;` to the active Emitter.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/op.hpp"

namespace tessel {

class Emitter {
 public:
  // Installs this emitter as the target of Expr operations on this thread until destroyed.
  Emitter();
  ~Emitter();
  Emitter(const Emitter&) = delete;
  Emitter& operator=(const Emitter&) = delete;

  Expr assign(const std::string& rhs);  // a new temporary
  std::string fresh();                  // a new temporary's name, declared by the caller
  // The name of an array holding v[0..n): the array v already lives in, else a new one.
  std::string array_of(const Expr* v, int64_t n);
  const std::string& code() const { return code_; }
  void raw(const std::string& line) { code_ += line; }
  static Emitter& current();

 private:
  std::string code_;
  int next_ = 0;
  Emitter* prev_ = nullptr;
};

// Emits f through the active Emitter; variables are named by `var_name(node, component)`.
// `memo` shares sub-formulas between several calls (a formula and its weight). `special`, when
// set, may emit a node in a backend's own form: it fills out (n.dim values, n's arguments already
// in memo) and returns true, or returns false for the op table's form.
using ExprMemo = std::unordered_map<const Node*, std::vector<Expr>>;
using EmitSpecial = std::function<bool(const Node& n, const ExprMemo& memo, Expr* out)>;
std::vector<Expr> emit_formula(const Formula& f,
                               const std::function<std::string(const Node&, int)>& var_name,
                               ExprMemo& memo, const EmitSpecial& special = {});

}  // namespace tessel
