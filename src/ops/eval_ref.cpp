// Float64 reference evaluation at one point, through each op's apply<double>.
#include "ops/eval_ref.hpp"

#include <unordered_map>

#include "ops/op.hpp"

namespace tessel {

std::vector<double> eval_point(const Formula& f, const std::map<int, std::vector<double>>& values) {
  if (!f.valid()) detail::fail("eval_point", "the formula is null");
  std::unordered_map<const Node*, std::vector<double>> val;
  for (const NodePtr& n : topo_order(f.ptr())) {
    std::vector<double>& out = val[n.get()];
    out.assign(n->dim, 0.0);
    switch (n->op) {
      case OpCode::Var: {
        auto it = values.find(n->var_index());
        if (it == values.end()) detail::fail("eval_point", "no value for variable ", n->var_index());
        if (static_cast<int>(it->second.size()) != n->dim)
          detail::fail("eval_point", "variable ", n->var_index(), " needs ", n->dim, " values, got ",
                       it->second.size());
        out = it->second;
        break;
      }
      case OpCode::Const: out[0] = n->value; break;
      case OpCode::Zero: break;
      default: {
        std::vector<const double*> args;
        for (const NodePtr& a : n->args) args.push_back(val.at(a.get()).data());
        op_info(n->op).apply_d(*n, args.data(), out.data());
      }
    }
  }
  return val.at(f.ptr().get());
}

}  // namespace tessel
