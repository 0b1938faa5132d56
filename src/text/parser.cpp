// KeOps text -> Formula: aliases and formulas, the inverse of the printer (src/ir/printer.cpp).
//
// The formula parser is an iterative operator-precedence parser with an explicit stack of open
// groups and calls: printed formulas nest one parenthesis per node, so recursion would tie the
// depth of a formula that can be parsed to the size of the caller's stack.
#include <atomic>
#include <cctype>
#include <charconv>
#include <climits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/op.hpp"
#include "text/cursor.hpp"

namespace tessel {

namespace {

using namespace parse_detail;

// ---- what a function name means -----------------------------------------------------------------
// Table ops and composites (Kron) are read as the table says (ParamSpec); the other forms are
// leaves, builders without parameters and KeOps's derivative operators.
enum class Form { TableOp, Var, VarCat, IntCst, Rat, Zero, WSqNorm, WSqDist, Grad, IntInv };

struct Callee {
  Form form = Form::TableOp;
  const OpInfo* op = nullptr;
  Category cat = Category::I;
  size_t n_f = 0;                   // formula arguments
  size_t n_p_min = 0, n_p_max = 0;  // then integer parameters, or tuples (op->params.tuples)
};

std::optional<Callee> callee(const std::string& name) {
  const auto v = [](Category cat) { return Callee{Form::Var, nullptr, cat, 0, 2, 2}; };
  const auto f = [](Form form, size_t n_f, size_t n_p_min, size_t n_p_max) {
    return Callee{form, nullptr, Category::I, n_f, n_p_min, n_p_max};
  };
  // KeOps's symbolic gradient: Grad(f, x, e) is the gradient of <f, e> with respect to x.
  static const std::unordered_map<std::string, Callee> special = {
      {"Vi", v(Category::I)}, {"Vx", v(Category::I)}, {"Vj", v(Category::J)},
      {"Vy", v(Category::J)}, {"Pm", v(Category::Param)}, {"Var", f(Form::VarCat, 0, 3, 3)},
      {"IntCst", f(Form::IntCst, 0, 1, 1)}, {"Rat", f(Form::Rat, 0, 2, 2)},
      {"RatCst", f(Form::Rat, 0, 2, 2)},
      {"Zero", f(Form::Zero, 0, 1, 1)},
      {"WeightedSqNorm", f(Form::WSqNorm, 2, 0, 0)}, {"WeightedSqDist", f(Form::WSqDist, 3, 0, 0)},
      {"Grad", f(Form::Grad, 3, 0, 0)}, {"IntInv", f(Form::IntInv, 0, 1, 1)},
      // KeOps's derivative operators (expanded by the autodiff layer) and its factorisation
      // hints: the IR is hash-consed and each distinct node is evaluated once, so a repeated
      // sub-formula is already shared and Factorize(f, g) / AutoFactorize(f) are f.
      {"GradMatrix", f(Form::Grad, 2, 0, 0)}, {"Diff", f(Form::Grad, 3, 0, 0)},
      {"Divergence", f(Form::Grad, 2, 0, 0)}, {"Laplacian", f(Form::Grad, 2, 0, 0)},
      {"TraceOperator", f(Form::Grad, 2, 0, 0)}, {"Factorize", f(Form::Grad, 2, 0, 0)},
      {"AutoFactorize", f(Form::Grad, 1, 0, 0)}};
  if (auto it = special.find(name); it != special.end()) return it->second;
  const OpInfo* o = op_by_name(name);
  if (!o) return std::nullopt;
  Callee c;
  c.op = o;
  c.n_f = static_cast<size_t>(o->arity);
  c.n_p_min = static_cast<size_t>(o->params.min);
  c.n_p_max = static_cast<size_t>(o->params.max);
  return c;
}

std::string plural(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}
std::string range(size_t lo, size_t hi, const char* what) {
  return lo == hi ? plural(lo, what) : std::to_string(lo) + " or " + plural(hi, what);
}
std::string found(size_t n) { return ", found " + (n ? std::to_string(n) : std::string("none")); }
bool takes_tuples(const Callee& c) { return c.op && c.op->params.tuples; }
std::string signature(const std::string& name, const Callee& c) {
  std::string s = "'" + name + "' takes " + range(c.n_f + c.n_p_min, c.n_f + c.n_p_max, "argument");
  if (c.n_f > 0 && c.n_p_max > 0)
    s += ": " + plural(c.n_f, "formula") + ", then " +
         range(c.n_p_min, c.n_p_max, takes_tuples(c) ? "tuple" : "integer");
  else if (c.n_f == 0)
    s += ", all integers";
  return s;
}

// ---- the formula parser -------------------------------------------------------------------------
// Negation ('n') binds tightest, then * /, then + -, then | (scalar product): C++ precedence.
int prec(char op) {
  return op == 'n' ? 4 : op == '*' || op == '/' ? 3 : op == '+' || op == '-' ? 2 : 1;
}

struct PendingOp {
  char op;
  size_t pos;
};

// An open '(' group, an open call, or the whole formula (bottom of the stack).
struct Frame {
  size_t at = 0;     // column of the '(' or of the call's name
  std::string name;  // the called function; empty for groups and the whole formula
  Callee callee;
  std::vector<Formula> args;  // a call's finished formula arguments
  std::vector<Formula> vals;  // operands and operators of the expression being read
  std::vector<PendingOp> ops;
};

class Parser {
 public:
  Parser(const std::string& text, const std::unordered_map<std::string, Formula>& names)
      : cur_(text), names_(names) {}

  // The variables the text names (aliases and Var/Vi/Vj/Pm leaves), as written: simplification
  // may drop some from the formula (Grad(x, y, e) = 0), but they remain arguments of the call.
  const std::vector<Formula>& named() const { return named_; }

  Formula run() {
    if (cur_.done()) fail_at(0, "empty formula");
    std::vector<Frame> stack(1);
    bool operand = true;  // the grammar position: an operand next, or an operator
    while (true) {
      Frame& f = stack.back();
      const size_t at = cur_.pos();
      const char c = cur_.peek();
      if (operand) {
        if (!f.name.empty() && f.ops.empty() && (c == ',' || c == ')')) {
          if (c == ',') fail_at(at, "empty argument in '" + f.name + "(...)'");
          fail_at(f.at, signature(f.name, f.callee) + found(f.args.size()));
        }
        if (cur_.accept('-')) {
          f.ops.push_back({'n', at});
        } else if (cur_.accept('(')) {
          stack.push_back(Frame{at});
        } else if (digit(c) || c == '.') {
          f.vals.push_back(cur_.number());
          operand = false;
        } else {
          operand = !start_name(stack, at);
        }
        continue;
      }
      const bool in_call = !f.name.empty();
      if (cur_.done()) {
        if (stack.size() > 1) fail_at(at, unclosed(f));
        return finish(f);
      }
      if (cur_.accept('[')) {  // x[m] is Elem(x, m)
        const int64_t m = checked_int(cur_.integer("index"), at);
        cur_.expect(']');
        f.vals.back() = build_at(at, [&] { return elem(f.vals.back(), static_cast<int>(m)); });
      } else if (c == '+' || c == '-' || c == '*' || c == '/' || c == '|') {
        cur_.accept(c);
        while (!f.ops.empty() && prec(f.ops.back().op) >= prec(c)) reduce(f);
        f.ops.push_back({c, at});
        operand = true;
      } else if (in_call && (c == ',' || c == ')')) {
        f.args.push_back(finish(f));
        if (f.args.size() < f.callee.n_f && cur_.accept(',')) {
          operand = true;
          continue;
        }
        if (f.args.size() < f.callee.n_f)
          fail_at(f.at, signature(f.name, f.callee) + found(f.args.size()));
        const auto params = close_call(f, true);
        Formula r = build_call(f, params);
        stack.pop_back();
        stack.back().vals.push_back(std::move(r));
      } else if (c == ')' && stack.size() > 1) {
        cur_.accept(')');
        Formula r = finish(f);
        stack.pop_back();
        stack.back().vals.push_back(std::move(r));
      } else {
        const char* want = in_call            ? "an operator, ',' or ')'"
                           : stack.size() > 1 ? "an operator or ')'"
                                              : "an operator or the end of the formula";
        fail_at(at, (c == ')' ? std::string("unmatched ')'") : "unexpected " + cur_.next()) +
                        "; expected " + want);
      }
    }
  }

 private:
  // A name in operand position: an alias, a variable/constant leaf, or the start of a call.
  // Returns whether a complete operand was read.
  bool start_name(std::vector<Frame>& stack, size_t at) {
    const std::string name = cur_.ident();
    if (name.empty())
      fail_at(at, cur_.done() ? "unexpected end of the formula; expected a formula"
                              : "unexpected " + cur_.next() + "; expected a formula");
    if (cur_.peek() != '(') {
      auto it = names_.find(name);
      if (it == names_.end()) fail_at(at, "unknown name '" + name + "'");
      stack.back().vals.push_back(it->second);
      named_.push_back(it->second);
      return true;
    }
    const std::optional<Callee> ce = callee(name);
    if (!ce)
      fail_at(at, names_.count(name) ? "'" + name + "' is an alias, not a function"
                                     : "unknown function '" + name + "'");
    cur_.accept('(');
    Frame call{at, name, *ce};
    if (ce->n_f > 0) {
      stack.push_back(std::move(call));
      return false;
    }
    const auto params = close_call(call, false);
    stack.back().vals.push_back(build_call(call, params));
    return true;
  }

  static std::string unclosed(const Frame& f) {
    return "missing ')' closing " +
           (f.name.empty() ? std::string("the '('") : "'" + f.name + "('") + " at column " +
           std::to_string(f.at);
  }

  int64_t checked_int(int64_t v, size_t at) {
    if (v < INT_MIN || v > INT_MAX)
      fail_at(at, "integer " + std::to_string(v) + " is out of range");
    return v;
  }

  std::vector<int64_t> tuple() {
    const size_t at = cur_.pos();
    // "(2,3)", KeOps's C++ spelling "Ind(2,3)" or its Python list "[2,3]"
    const std::string word = cur_.ident();
    const bool list = word.empty() && cur_.peek() == '[';
    if (!list && ((!word.empty() && word != "Ind") || cur_.peek() != '('))
      fail_at(at, "expected a tuple like (2,3) or a list like [2,3], found " +
                      (word.empty() ? cur_.next() : "'" + word + "'"));
    const char close = list ? ']' : ')';
    cur_.accept(list ? '[' : '(');
    std::vector<int64_t> t;
    while (!cur_.accept(close)) {  // a trailing comma is fine: Python writes (2,)
      const size_t p = cur_.pos();
      t.push_back(checked_int(cur_.integer("in a tuple"), p));
      if (!cur_.accept(',')) {
        cur_.expect(close);
        break;
      }
    }
    return t;
  }

  // Reads a call's integer parameters (or tuples, where the table says so) and its ')'. Each is
  // one vector. As in Python, the argument list may end with a comma: "Pow(x, 2,)".
  std::vector<std::vector<int64_t>> close_call(const Frame& f, bool after_formulas) {
    const Callee& c = f.callee;
    std::vector<std::vector<int64_t>> out;
    for (bool first = !after_formulas; first || cur_.accept(','); first = false) {
      const size_t p = cur_.pos();
      if (cur_.done() || cur_.peek() == ')') break;  // no parameter, or a trailing comma
      if (cur_.peek() == ',') fail_at(p, "empty argument in '" + f.name + "(...)'");
      if (out.size() == c.n_p_max) fail_at(p, "too many arguments: " + signature(f.name, c));
      if (takes_tuples(c)) {
        out.push_back(tuple());
      } else {
        // Only IntCst, Rat and IntInv hold 64-bit values; every other parameter is an int in the
        // builder.
        const int64_t v = cur_.integer("parameter of '" + f.name + "'");
        const bool wide = c.form == Form::IntCst || c.form == Form::Rat || c.form == Form::IntInv;
        out.push_back({wide ? v : checked_int(v, p)});
      }
    }
    if (out.size() < c.n_p_min)
      fail_at(f.at, signature(f.name, c) + found(f.args.size() + out.size()));
    if (cur_.done()) fail_at(cur_.pos(), unclosed(f));
    cur_.expect(')');
    return out;
  }

  Formula build_call(const Frame& f, const std::vector<std::vector<int64_t>>& ps) {
    std::vector<int64_t> ip;
    if (!takes_tuples(f.callee))
      for (const auto& p : ps) ip.push_back(p[0]);
    const std::vector<Formula>& a = f.args;
    return build_at(f.at, [&]() -> Formula {
      switch (f.callee.form) {
        case Form::Var:
          return named_.emplace_back(
              var(static_cast<int>(ip[0]), static_cast<int>(ip[1]), f.callee.cat));
        case Form::VarCat:
          if (ip[2] < 0 || ip[2] > 2)
            detail::fail("Var", "category must be 0 (i), 1 (j) or 2 (parameter), got ", ip[2]);
          return named_.emplace_back(var(static_cast<int>(ip[0]), static_cast<int>(ip[1]),
                                         static_cast<Category>(ip[2])));
        case Form::IntCst:
          return int_cst(ip[0]);
        case Form::Rat:
          return rational(ip[0], ip[1]);
        case Form::Zero:
          return zero(static_cast<int>(ip[0]));
        case Form::WSqNorm:
          return weighted_sqnorm(a[0], a[1]);
        case Form::WSqDist:
          return weighted_sqdist(a[0], a[1], a[2]);
        case Form::Grad:
          return calculus(f.name, a);
        case Form::IntInv:
          return int_inv(ip[0]);
        case Form::TableOp:
          return make_written(*f.callee.op, a, ps);
      }
      return {};
    });
  }

  static Formula calculus(const std::string& name, const std::vector<Formula>& a) {
    if (name == "Grad") return grad(a[0], a[1], a[2]);
    if (name == "Factorize" || name == "AutoFactorize") return a[0];
    if (name == "GradMatrix") return grad_matrix(a[0], a[1]);
    if (name == "Diff") return diff(a[0], a[1], a[2]);
    if (name == "Divergence") return divergence(a[0], a[1]);
    if (name == "Laplacian") return laplacian(a[0], a[1]);
    return trace_operator(a[0], a[1]);
  }
  void reduce(Frame& f) {
    const PendingOp o = f.ops.back();
    f.ops.pop_back();
    const Formula b = std::move(f.vals.back());
    f.vals.pop_back();
    if (o.op == 'n') {
      f.vals.push_back(build_at(o.pos, [&] { return -b; }));
      return;
    }
    Formula& a = f.vals.back();
    a = build_at(o.pos, [&] {
      if (o.op == '+') return a + b;
      if (o.op == '-') return a - b;
      if (o.op == '*') return a * b;
      return o.op == '/' ? a / b : (a | b);
    });
  }

  Formula finish(Frame& f) {
    while (!f.ops.empty()) reduce(f);
    Formula r = std::move(f.vals.back());
    f.vals.clear();
    return r;
  }

  Cursor cur_;
  const std::unordered_map<std::string, Formula>& names_;
  std::vector<Formula> named_;
};

// ---- aliases ------------------------------------------------------------------------------------
struct AliasDef {
  AliasInfo info;
  size_t name_pos = 0, kind_pos = 0;
};

// "X = Vi(3)" (index = position in the alias list), "X = Vi(0, 3)", "X = Var(0, 3, 0)", and the
// same without "X =" (pykeops declares arguments that formulas name as Var(0, 3, 0) that way);
// Vx / Vy are old spellings of Vi / Vj.
AliasDef parse_alias(const std::string& text, int position) {
  Cursor c(text);
  AliasDef d;
  d.name_pos = c.pos();
  if (c.done()) fail_at(0, "empty alias");
  std::string word = c.ident();
  if (word.empty()) fail_at(d.name_pos, "expected an alias name, found " + c.next());
  d.kind_pos = d.name_pos;
  if (c.peek() != '(') {
    d.info.name = word;
    c.expect('=');
    d.kind_pos = c.pos();
    word = c.ident();
  }
  const bool generic = word == "Var";
  Category cat = Category::I;
  if (word == "Vi" || word == "Vx") {
    cat = Category::I;
  } else if (word == "Vj" || word == "Vy") {
    cat = Category::J;
  } else if (word == "Pm") {
    cat = Category::Param;
  } else if (!generic) {
    fail_at(d.kind_pos, "expected Vi, Vj, Pm, Var, Vx or Vy, found " +
                            (word.empty() ? c.next() : "'" + word + "'"));
  }
  c.expect('(');
  const size_t first_pos = c.pos();
  const int64_t first = c.integer(generic ? "(the index)" : "(the dim, or the index then the dim)");
  int64_t index = position, dim = first;
  size_t dim_pos = first_pos;
  const bool comma = c.accept(',');  // a trailing comma is fine, as in Python: "Vi(3,)"
  const bool more = generic || (comma && c.peek() != ')');
  if (more) {
    if (generic && !comma) c.expect(',');
    index = first;
    dim_pos = c.pos();
    dim = c.integer("(the dim)");
    if (index < 0 || index > INT_MAX)
      fail_at(first_pos, "index must be >= 0, got " + std::to_string(index));
  }
  if (dim < 1 || dim > INT_MAX) fail_at(dim_pos, "dim must be >= 1, got " + std::to_string(dim));
  if (generic) {
    c.expect(',');
    const size_t cat_pos = c.pos();
    const int64_t k = c.integer("(the category: 0 = i, 1 = j, 2 = parameter)");
    if (k < 0 || k > 2)
      fail_at(cat_pos, "category must be 0 (i), 1 (j) or 2 (parameter), got " + std::to_string(k));
    cat = static_cast<Category>(k);
  }
  if (more) c.accept(',');
  c.expect(')');
  if (!c.done()) fail_at(c.pos(), "unexpected " + c.next() + " after the alias");
  d.info.index = static_cast<int>(index);
  d.info.dim = static_cast<int>(dim);
  d.info.cat = cat;
  return d;
}

std::string describe(const AliasInfo& a) {
  return (a.name.empty() ? std::string("an unnamed alias") : "alias '" + a.name + "'");
}

// Each alias checked against those before it: one name per alias, one variable per index.
std::vector<AliasInfo> read_aliases(const std::vector<std::string>& aliases) {
  std::vector<AliasInfo> out;
  std::map<std::string, size_t> names;
  std::map<int, size_t> owner;  // variable index -> the alias that claimed it
  for (size_t k = 0; k < aliases.size(); ++k) {
    try {
      const AliasDef d = parse_alias(aliases[k], static_cast<int>(k));
      const AliasInfo& a = d.info;
      if (!a.name.empty() && !names.try_emplace(a.name, k).second)
        fail_at(d.name_pos, "duplicate alias '" + a.name + "'");
      auto [it, fresh] = owner.try_emplace(a.index, k);
      const AliasInfo& prev = fresh ? a : out[it->second];
      if (prev.dim != a.dim || prev.cat != a.cat)
        fail_at(d.kind_pos, "'" + (a.name.empty() ? aliases[k] : a.name) + "' is " +
                                var(a.index, a.dim, a.cat).str() + " but " + describe(prev) +
                                " already gave index " + std::to_string(a.index) + " to " +
                                var(prev.index, prev.dim, prev.cat).str());
      out.push_back(a);
    } catch (const ParseError& e) {
      report("in aliases[" + std::to_string(k) + "]: ", aliases[k], e);
    }
  }
  return out;
}

std::unordered_map<std::string, Formula> alias_names(const std::vector<std::string>& aliases) {
  std::unordered_map<std::string, Formula> names;
  for (const AliasInfo& a : read_aliases(aliases))
    if (!a.name.empty()) names.emplace(a.name, var(a.index, a.dim, a.cat));
  return names;
}

// Entries into the text parser, counted so that tests can hold a call's path free of text.
std::atomic<uint64_t> entries{0};

}  // namespace

uint64_t parser_entries() { return entries.load(std::memory_order_relaxed); }

std::vector<AliasInfo> parse_aliases(const std::vector<std::string>& aliases) {
  entries.fetch_add(1, std::memory_order_relaxed);
  return read_aliases(aliases);
}

Formula parse(const std::string& text, const std::vector<std::string>& aliases) {
  entries.fetch_add(1, std::memory_order_relaxed);
  const auto names = alias_names(aliases);
  try {
    return Parser(text, names).run();
  } catch (const ParseError& e) {
    report("", text, e);
  }
}

namespace {

// The variables parser `p` met by name, added to `by_index` (one dim and category per index).
void collect_named(const Parser& p, const std::string& text, std::map<int, AliasInfo>& by_index) {
  for (const Formula& v : p.named()) {
    const Node& n = v.node();
    AliasInfo a{"", n.var_index(), n.dim, n.var_cat()};
    auto [it, fresh] = by_index.try_emplace(a.index, a);
    if (!fresh && (it->second.dim != a.dim || it->second.cat != a.cat))
      detail::fail("parse", "variable ", a.index, " is named as both ",
                   var(a.index, a.dim, a.cat).str(), " and ",
                   var(a.index, it->second.dim, it->second.cat).str(), " in ", text);
  }
}

std::vector<AliasInfo> by_index_list(const std::map<int, AliasInfo>& by_index) {
  std::vector<AliasInfo> out;
  for (const auto& [index, a] : by_index) out.push_back(a);
  return out;
}

}  // namespace

std::vector<AliasInfo> named_variables(const std::string& text,
                                       const std::vector<std::string>& aliases) {
  entries.fetch_add(1, std::memory_order_relaxed);
  const auto names = alias_names(aliases);
  Parser p(text, names);
  try {
    (void)p.run();
  } catch (const ParseError& e) {
    report("", text, e);
  }
  std::map<int, AliasInfo> by_index;
  collect_named(p, text, by_index);
  return by_index_list(by_index);
}

ParsedTexts parse_texts(const std::vector<std::string>& texts,
                        const std::vector<std::string>& aliases) {
  entries.fetch_add(1, std::memory_order_relaxed);
  ParsedTexts out;
  out.declared = read_aliases(aliases);
  std::unordered_map<std::string, Formula> names;
  for (const AliasInfo& a : out.declared)
    if (!a.name.empty()) names.emplace(a.name, var(a.index, a.dim, a.cat));
  std::map<int, AliasInfo> by_index;
  for (const std::string& text : texts) {
    Parser p(text, names);
    try {
      out.formulas.push_back(p.run());
    } catch (const ParseError& e) {
      report("", text, e);
    }
    collect_named(p, text, by_index);
  }
  out.named = by_index_list(by_index);
  return out;
}

}  // namespace tessel
