// KeOps's reduction strings ("Sum_Reduction(F, 0)") read into Reductions, for the bindings whose
// users write whole reductions as text (rkeops, KeOpsLab).
#include <string>
#include <string_view>
#include <vector>

#include "tessel/error.hpp"
#include "tessel/reduction.hpp"

namespace tessel {
namespace {

constexpr const char* kWho = "parse_reduction";
constexpr std::string_view kSuffix = "_Reduction";

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\n' || s[a] == '\r')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\n' || s[b - 1] == '\r'))
    --b;
  return std::string(s.substr(a, b - a));
}

[[noreturn]] void expected(const std::string& text, const char* what) {
  detail::fail(
      kWho, what, " in '", text,
      "'; expected a reduction such as 'Sum_Reduction(F, 0)', 'ArgKMin_Reduction(F, K, 0)' "
      "or 'SumSoftMaxWeight_Reduction(F, 0, G)' (the last index is 0 to reduce over j, "
      "1 over i)");
}

// The top-level arguments of the call whose '(' is at `open`: commas inside parentheses do not
// split. The call's ')' must end the text.
std::vector<std::string> split_args(const std::string& t, size_t open) {
  std::vector<std::string> args;
  int depth = 0;
  size_t start = open + 1;
  for (size_t p = open; p < t.size(); ++p) {
    char c = t[p];
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth == 0) {
        if (p + 1 != t.size()) expected(t, "text after the reduction's closing parenthesis");
        args.push_back(trim(std::string_view(t).substr(start, p - start)));
        return args;
      }
    } else if (c == ',' && depth == 1) {
      args.push_back(trim(std::string_view(t).substr(start, p - start)));
      start = p + 1;
    }
  }
  expected(t, "an unclosed parenthesis");
}

int64_t integer(const std::string& t, const std::string& arg, const char* what) {
  if (arg.empty() || arg.size() > 9 || arg.find_first_not_of("0123456789") != std::string::npos)
    detail::fail(kWho, what, " must be a non-negative integer, got '", arg, "' in '", t, "'");
  return std::stoll(arg);
}

const ReductionSummary& summary(ReductionOp op) {
  static const std::vector<ReductionSummary> table = reduction_table();
  for (const auto& r : table)
    if (r.op == op) return r;
  detail::fail(kWho, "no entry for reduction ", reduction_name(op));
}

}  // namespace

Reduction parse_reduction(const std::string& text, const std::vector<std::string>& aliases) {
  const std::string t = trim(text);
  const size_t open = t.find('(');
  if (open == std::string::npos) expected(t, "no parenthesis");
  const std::string head = trim(std::string_view(t).substr(0, open));
  if (head.size() <= kSuffix.size() ||
      head.compare(head.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    expected(t, ("'" + head + "' is not a reduction name ending in _Reduction").c_str());
  const std::string name = head.substr(0, head.size() - kSuffix.size());
  ReductionOp op;
  try {
    op = reduction_from_name(name);
  } catch (const Error& e) {
    detail::fail(kWho, "in '", t, "': ", e.what());
  }
  const ReductionSummary& info = summary(op);
  if (!info.by_name) detail::fail(kWho, "in '", t, "': ", name, " is not a reduction to call");
  const std::vector<std::string> args = split_args(t, open);
  // KeOps's order: (F, tag), (F, K, tag), (F, tag, G).
  const size_t want = 2 + (info.uses_k ? 1 : 0);
  const bool weighted = info.weight != "none" && args.size() == want + 1;
  if (args.size() != want && !weighted) {
    std::string form = name + "_Reduction(F, " + (info.uses_k ? "K, " : "") + "tag" +
                       (info.weight == "required"   ? ", G"
                        : info.weight == "optional" ? "[, G]"
                                                    : "") +
                       ")";
    detail::fail(kWho, "'", t, "' has ", args.size(), " arguments; expected ", form,
                 " (tag 0 reduces over j, 1 over i)");
  }
  if (info.weight == "required" && !weighted)
    detail::fail(kWho, "in '", t, "': ", name, " needs a weight formula G: ", name,
                 "_Reduction(F, tag, G)");
  const int64_t tag = integer(t, args[want - 1], "the tag (last index)");
  if (tag > 1)
    detail::fail(kWho, "the tag must be 0 (reduce over j) or 1 (over i), got ", tag, " in '", t,
                 "'");
  const int64_t k = info.uses_k ? integer(t, args[1], "K") : 0;
  if (info.uses_k && k < 1) detail::fail(kWho, "K must be at least 1, got ", k, " in '", t, "'");
  Formula f = parse(args[0], aliases);
  Formula w = weighted ? parse(args[want], aliases) : Formula{};
  return Reduction(op, f, tag == 0 ? 1 : 0, static_cast<int>(k), w);
}

}  // namespace tessel
