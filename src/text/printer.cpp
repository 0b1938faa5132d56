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

// How a node prints around its arguments: `open`, the arguments separated by `sep`, `close`.
// A leaf is all `open`.
struct Pieces {
  std::string open, sep = ",", close = ")";
};

Pieces pieces(const Node& n) {
  switch (n.op) {
    case OpCode::Var: {
      const char* f = n.var_cat() == Category::I ? "Vi" : n.var_cat() == Category::J ? "Vj" : "Pm";
      return {std::string(f) + "(" + std::to_string(n.var_index()) + "," + std::to_string(n.dim) +
              ")", "", ""};
    }
    case OpCode::Const:
      switch (static_cast<ConstKind>(n.ip[0])) {
        case ConstKind::Int: return {"IntCst(" + std::to_string(n.ip[1]) + ")", "", ""};
        case ConstKind::Rational:
          return {"Rat(" + std::to_string(n.ip[1]) + "," + std::to_string(n.ip[2]) + ")", "", ""};
        default: return {number(n.value), "", ""};
      }
    case OpCode::Zero: return {"Zero(" + std::to_string(n.dim) + ")", "", ""};
    case OpCode::Neg: return {"(-", "", ")"};
    case OpCode::TensorDot: {
      const TensorDotSpec t = TensorDotSpec::decode(n.ip);
      return {"TensorDot(", ",",
              "," + tuple(t.dims_a) + "," + tuple(t.dims_b) + "," + tuple(t.contr_a) + "," +
                  tuple(t.contr_b) + "," + tuple(t.perm) + ")"};
    }
    default: break;
  }
  const OpInfo& o = op_info(n.op);
  if (o.infix) return {"(", o.infix, ")"};
  Pieces p{std::string(o.name) + "(", ",", ""};
  for (int64_t v : n.ip) p.close += "," + std::to_string(v);
  p.close += ")";
  return p;
}

}  // namespace

std::string Formula::str() const {
  if (!node_) return "<null>";
  // One pass appending to one string, with an explicit stack: linear in the length of the text
  // (building each node's text from its arguments' copies was quadratic in the depth) and
  // independent of the call stack's size.
  std::string out;
  std::unordered_map<const Node*, Pieces> memo;  // shared sub-formulas print many times
  auto of = [&](const Node* n) -> const Pieces& {
    auto it = memo.find(n);
    return it != memo.end() ? it->second : memo.emplace(n, pieces(*n)).first->second;
  };
  std::vector<std::pair<const Node*, size_t>> stack{{node_.get(), 0}};
  out += of(node_.get()).open;
  while (!stack.empty()) {
    auto& [n, k] = stack.back();
    if (k < n->args.size()) {
      if (k > 0) out += of(n).sep;
      const Node* c = n->args[k++].get();
      out += of(c).open;
      stack.push_back({c, 0});
    } else {
      out += of(n).close;
      stack.pop_back();
    }
  }
  return out;
}

}  // namespace tessel
