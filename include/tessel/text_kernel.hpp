// A kernel as the language bindings see it: a KeOps reduction text, its arguments in alias order.
//
// rkeops and KeOpsLab users call a kernel with one array per alias, in the order the aliases were
// written, including aliases the formula never reads (KeOps checks them and passes them by). The
// core's Reduction reads only the variables it uses, by index. TextKernel is the map between the
// two, kept here once so that every binding counts, names and differentiates arguments alike;
// reading the language's arrays and raising its errors stay in the binding.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tessel/formula.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

/// "Vi", "Vj" or "Pm": how KeOps texts write a category.
const char* category_word(Category c);

class TextKernel {
 public:
  /// One argument, in the order the caller passes them.
  struct Arg {
    std::string name;  // the alias ("Var<index>" for a variable the text names without one)
    int index = 0;     // the variable index in the formula
    int dim = 1;
    Category cat = Category::I;
    bool used = false;  // the reduction reads it; an unread one is only checked by the binding

    /// "argument 'X' (Vi(3))", for messages.
    std::string label() const;
  };

  TextKernel() = default;
  /// `text` a whole KeOps reduction ("Sum_Reduction(F, 0)", see parse_reduction) read with
  /// `aliases`. The arguments are the aliases in order, then any variable the reduction reads that
  /// no alias declares (written as Var(5, 3, 0) in the text). Throws Error as parse_reduction.
  TextKernel(const std::string& text, const std::vector<std::string>& aliases);

  const Reduction& reduction() const { return r_; }
  /// The reduction text, or Grad(<text>, <argument>) for a gradient.
  const std::string& text() const { return text_; }
  const std::vector<Arg>& args() const { return args_; }
  /// The argument names joined by ", ", for messages.
  std::string arg_names() const;

  /// Throws Error "<who>: expected N arguments (X, Y, B), got <given>" unless given == N.
  void check_count(size_t given, const std::string& who) const;
  /// The input views evaluate() takes: one slot per variable index up to the largest one the
  /// reduction reads (slots of unread indices stay empty).
  size_t num_slots() const;

  /// The gradient for the argument at 0-based `position`: a kernel whose reduction is
  /// grad(reduction(), index) and whose arguments are these, then the cotangent of output 0,
  /// named `cotangent`. Arguments the gradient no longer reads are marked unused. A gradient is a
  /// TextKernel again, so it can be differentiated again (with another cotangent name).
  TextKernel grad(size_t position, const std::string& cotangent) const;

 private:
  Reduction r_;
  std::string text_;
  std::vector<Arg> args_;
};

}  // namespace tessel
