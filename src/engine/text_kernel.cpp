// TextKernel: the arguments of a KeOps reduction text in alias order, their count and gradients.
#include "tessel/text_kernel.hpp"

#include <algorithm>

#include "tessel/error.hpp"

namespace tessel {

namespace {

bool reads(const std::vector<VarSlot>& slots, int index) {
  return std::any_of(slots.begin(), slots.end(),
                     [&](const VarSlot& s) { return s.index == index; });
}

}  // namespace

const char* category_word(Category c) {
  return c == Category::I ? "Vi" : c == Category::J ? "Vj" : "Pm";
}

std::string TextKernel::Arg::label() const {
  return "argument '" + name + "' (" + category_word(cat) + "(" + std::to_string(dim) + "))";
}

TextKernel::TextKernel(const std::string& text, const std::vector<std::string>& aliases)
    : r_(parse_reduction(text, aliases)), text_(text) {
  const std::vector<VarSlot> slots = r_.inputs();
  for (const AliasInfo& a : parse_aliases(aliases)) {
    const std::string name = a.name.empty() ? "Var" + std::to_string(a.index) : a.name;
    args_.push_back({name, a.index, a.dim, a.cat, reads(slots, a.index)});
  }
  // A variable the text names without an alias is still an argument: the caller must fill it.
  for (const VarSlot& s : slots) {
    const bool known =
        std::any_of(args_.begin(), args_.end(), [&](const Arg& a) { return a.index == s.index; });
    if (!known && !s.computed)
      args_.push_back({"Var" + std::to_string(s.index), s.index, s.dim, s.cat, true});
  }
}

std::string TextKernel::arg_names() const {
  std::string names;
  for (const Arg& a : args_) names += (names.empty() ? "" : ", ") + a.name;
  return names;
}

void TextKernel::check_count(size_t given, const std::string& who) const {
  if (given == args_.size()) return;
  // Not detail::fail: the message names the caller's function, not a C++ one.
  throw Error(who + ": expected " + std::to_string(args_.size()) + " arguments (" + arg_names() +
              "), got " + std::to_string(given));
}

size_t TextKernel::num_slots() const {
  int max_index = -1;
  for (const Arg& a : args_)
    if (a.used) max_index = std::max(max_index, a.index);
  return static_cast<size_t>(max_index + 1);
}

TextKernel TextKernel::grad(size_t position, const std::string& cotangent) const {
  if (position >= args_.size())
    detail::fail("TextKernel::grad", "no argument at position ", position,
                 " (0-based; the kernel has ", args_.size(), ")");
  const Arg& var = args_[position];
  TextKernel g;
  g.r_ = tessel::grad(r_, var.index);
  g.text_ = "Grad(" + text_ + ", " + var.name + ")";
  g.args_ = args_;
  const std::vector<VarSlot> slots = g.r_.inputs();
  for (Arg& a : g.args_) a.used = a.used && reads(slots, a.index);
  // The cotangent is the one variable the gradient reads that this kernel did not; an argument
  // declared without being read may share its index, and stays unread.
  for (const VarSlot& s : slots) {
    const bool known = std::any_of(args_.begin(), args_.end(),
                                   [&](const Arg& a) { return a.used && a.index == s.index; });
    if (!known && !s.computed) {
      g.args_.push_back({cotangent, s.index, s.dim, s.cat, true});
      break;
    }
  }
  return g;
}

}  // namespace tessel
