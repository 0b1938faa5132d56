// Formulas rebuilt through the op table: ops by name (for front ends), substitution and
// relabelling.
#include <algorithm>
#include <climits>
#include <string>
#include <tuple>
#include <unordered_map>

#include "ops/op.hpp"

namespace tessel {

namespace {

// f with some variable leaves replaced: `leaves` maps a leaf node to its replacement. Every node
// above a replaced leaf goes through make() again, so dims are re-checked and simplification
// sees the new arguments (a replaced j-variable may turn a sub-formula uniform, and so on).
Formula rebuild(const Formula& f, std::unordered_map<const Node*, Formula> leaves) {
  if (leaves.empty()) return f;
  for (const NodePtr& n : topo_order(f.ptr())) {
    if (n->args.empty()) continue;
    bool changed = false;
    std::vector<Formula> args;
    args.reserve(n->args.size());
    for (const NodePtr& a : n->args) {
      auto it = leaves.find(a.get());
      changed |= it != leaves.end();
      args.push_back(it != leaves.end() ? it->second : Formula(a));
    }
    if (changed) leaves[n.get()] = make(n->op, std::move(args), n->ip);
  }
  auto it = leaves.find(f.ptr().get());
  return it == leaves.end() ? f : it->second;
}

}  // namespace

Formula make_written(const OpInfo& o, std::vector<Formula> args, WrittenParams params) {
  const ParamSpec& p = o.params;
  const auto n = static_cast<int>(params.size());
  if (n < p.min || n > p.max) {
    const std::string count = p.min == p.max
                                  ? std::to_string(p.max)
                                  : std::to_string(p.min) + " to " + std::to_string(p.max);
    detail::fail(o.name, "expected ", count,
                 p.tuples ? " tuples of integers" : " integer parameters", ", got ", n);
  }
  for (const std::vector<int64_t>& v : params) {
    if (!p.tuples && v.size() != 1)
      detail::fail(o.name, "expected integer parameters, got a tuple of ", v.size());
    for (int64_t x : v)  // the ops read their parameters as ints
      if (x < INT_MIN || x > INT_MAX)
        detail::fail(o.name, "parameter ", x, " is out of the range of an int");
  }
  if (o.build) {
    if (static_cast<int>(args.size()) != o.arity)
      detail::fail(o.name, "expected ", o.arity, " arguments, got ", args.size());
    for (size_t k = 0; k < args.size(); ++k)
      if (!args[k].valid()) detail::fail(o.name, "argument ", k + 1, " is a null formula");
    return o.build(args, params);
  }
  std::vector<int64_t> ip;
  if (o.encode) {
    ip = o.encode(params);
  } else {
    for (const std::vector<int64_t>& v : params) ip.push_back(v[0]);
  }
  return make(o.code, std::move(args), std::move(ip));
}

namespace {

const OpInfo& named_op(const std::string& name) {
  const OpInfo* o = op_by_name(name);
  if (!o) detail::fail("make", "'", name, "' is not an op of the table (see op_table())");
  return *o;
}

}  // namespace

Formula make_op(const std::string& name, std::vector<Formula> args, std::vector<int64_t> params) {
  std::vector<std::vector<int64_t>> written;
  for (int64_t v : params) written.push_back({v});
  return make_written(named_op(name), std::move(args), written);
}

Formula make_op_written(const std::string& name, std::vector<Formula> args,
                        const std::vector<std::vector<int64_t>>& params) {
  return make_written(named_op(name), std::move(args), params);
}

Formula substitute(const Formula& f, const std::vector<Formula>& from,
                   const std::vector<Formula>& to) {
  if (!f.valid()) detail::fail("substitute", "the formula is null");
  if (from.size() != to.size())
    detail::fail("substitute", "got ", from.size(), " variables but ", to.size(), " replacements");
  std::unordered_map<const Node*, Formula> leaves;
  for (size_t k = 0; k < from.size(); ++k) {
    if (!from[k].valid() || !from[k].node().is_var())
      detail::fail("substitute", "variable ", k,
                   " must be a leaf made by vi/vj/pm (or a parsed alias)");
    if (!to[k].valid() || to[k].dim() != from[k].dim())
      detail::fail("substitute", "replacement ", k, " must have dim ", from[k].dim());
    leaves[from[k].ptr().get()] = to[k];
  }
  return rebuild(f, std::move(leaves));
}

std::vector<AliasInfo> variable_info(const Formula& f) {
  if (!f.valid()) detail::fail("variable_info", "the formula is null");
  std::vector<AliasInfo> out;
  for (const NodePtr& n : topo_order(f.ptr()))
    if (n->is_var()) out.push_back({"", n->var_index(), n->dim, n->var_cat()});
  std::sort(out.begin(), out.end(), [](const AliasInfo& a, const AliasInfo& b) {
    return std::tie(a.index, a.cat, a.dim) < std::tie(b.index, b.cat, b.dim);
  });
  return out;
}

Formula relabel(const Formula& f, const std::vector<int>& index_map, bool swap_ij) {
  if (!f.valid()) detail::fail("relabel", "the formula is null");
  // The variable a leaf becomes, or null when it stays.
  auto moved = [&](const Node& n) -> Formula {
    int index = n.var_index();
    if (!index_map.empty()) {
      if (index >= static_cast<int>(index_map.size()))
        detail::fail("relabel", "the formula has variable ", index, " but the index map covers ",
                     index_map.size());
      index = index_map[static_cast<size_t>(index)];
    }
    Category cat = n.var_cat();
    if (swap_ij && cat != Category::Param) cat = cat == Category::I ? Category::J : Category::I;
    if (index == n.var_index() && cat == n.var_cat()) return {};
    return var(index, n.dim, cat);
  };
  if (f.node().is_var()) {  // a lone variable, the common case of a front end's operand
    Formula v = moved(f.node());
    return v.valid() ? v : f;
  }
  std::unordered_map<const Node*, Formula> leaves;
  for (const NodePtr& p : topo_order(f.ptr()))
    if (p->is_var())
      if (Formula v = moved(*p); v.valid()) leaves[p.get()] = std::move(v);
  return rebuild(f, std::move(leaves));
}

}  // namespace tessel
