// Formula -> KeOps-style text. Every form printed here is one the parser reads back to the same hash.
#include <charconv>
#include <cmath>
#include <string>
#include <unordered_map>

#include "ops/op.hpp"
#include "ops/tensordot.hpp"

namespace tessel {

namespace {

std::string number(double v) {
  // The text of %.17g, but not subject to the C locale: a decimal comma would split call arguments.
  char buf[40];
  std::string s(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 17).ptr);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? "," : "") + std::to_string(v[k]);
  return s + ")";
}

std::string print_node(const Node& n, const std::vector<std::string>& a) {
  switch (n.op) {
    case OpCode::Var: {
      const char* f = n.var_cat() == Category::I ? "Vi" : n.var_cat() == Category::J ? "Vj" : "Pm";
      return std::string(f) + "(" + std::to_string(n.var_index()) + "," + std::to_string(n.dim) + ")";
    }
    case OpCode::Const:
      switch (static_cast<ConstKind>(n.ip[0])) {
        case ConstKind::Int: return "IntCst(" + std::to_string(n.ip[1]) + ")";
        case ConstKind::Rational:
          return "Rat(" + std::to_string(n.ip[1]) + "," + std::to_string(n.ip[2]) + ")";
        default: return number(n.value);
      }
    case OpCode::Zero: return "Zero(" + std::to_string(n.dim) + ")";
    case OpCode::Neg: return "(-" + a[0] + ")";
    case OpCode::TensorDot: {
      const TensorDotSpec t = TensorDotSpec::decode(n.ip);
      return "TensorDot(" + a[0] + "," + a[1] + "," + tuple(t.dims_a) + "," + tuple(t.dims_b) +
             "," + tuple(t.contr_a) + "," + tuple(t.contr_b) + "," + tuple(t.perm) + ")";
    }
    default: break;
  }
  const OpInfo& o = op_info(n.op);
  if (o.infix) return "(" + a[0] + o.infix + a[1] + ")";
  std::string s = std::string(o.name) + "(";
  for (size_t k = 0; k < a.size(); ++k) s += (k ? "," : "") + a[k];
  for (int64_t v : n.ip) s += "," + std::to_string(v);
  return s + ")";
}

}  // namespace

std::string Formula::str() const {
  if (!node_) return "<null>";
  std::unordered_map<const Node*, std::string> text;
  for (const NodePtr& n : topo_order(node_)) {
    std::vector<std::string> a;
    for (const NodePtr& c : n->args) a.push_back(text.at(c.get()));
    text[n.get()] = print_node(*n, a);
  }
  return text.at(node_.get());
}

}  // namespace tessel
