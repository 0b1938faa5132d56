// parse_reduction: KeOps's "Name_Reduction(F, [K,] tag[, G])" texts against reductions built
// from their parts, and a clear error for every malformed text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/tessel.hpp"

using namespace tessel;

namespace {

const std::vector<std::string> kAliases = {"X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)",
                                           "W = Vj(1)"};

Reduction built(ReductionOp op, const std::string& f, int axis, int k = 0,
                const std::string& w = "") {
  return Reduction(op, parse(f, kAliases), axis, k, w.empty() ? Formula{} : parse(w, kAliases));
}

std::string error_of(const std::string& text) {
  try {
    parse_reduction(text, kAliases);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ReductionText, EveryFamilyReadsAsItsParts) {
  const std::string gauss = "Exp(-G*SqDist(X,Y))*B";
  struct Case {
    std::string text;
    Reduction want;
  };
  const std::vector<Case> cases = {
      {"Sum_Reduction(" + gauss + ", 0)", built(ReductionOp::Sum, gauss, 1)},
      {"  Sum_Reduction( " + gauss + " ,1 ) ", built(ReductionOp::Sum, gauss, 0)},
      {"Min_ArgMin_Reduction(SqDist(X,Y), 0)", built(ReductionOp::MinArgMin, "SqDist(X,Y)", 1)},
      {"MinArgMin_Reduction(SqDist(X,Y), 0)", built(ReductionOp::MinArgMin, "SqDist(X,Y)", 1)},
      {"Max_Reduction(X-Y, 1)", built(ReductionOp::Max, "X-Y", 0)},
      {"ArgKMin_Reduction(SqDist(X,Y), 5, 0)", built(ReductionOp::ArgKMin, "SqDist(X,Y)", 1, 5)},
      {"KMin_ArgKMin_Reduction(SqDist(X,Y), 2, 1)",
       built(ReductionOp::KMinArgKMin, "SqDist(X,Y)", 0, 2)},
      {"LogSumExp_Reduction(-SqDist(X,Y), 0)", built(ReductionOp::LogSumExp, "-SqDist(X,Y)", 1)},
      {"LogSumExp_Reduction(-SqDist(X,Y), 0, W)",
       built(ReductionOp::LogSumExp, "-SqDist(X,Y)", 1, 0, "W")},
      {"SumSoftMaxWeight_Reduction(-SqDist(X,Y), 0, B)",
       built(ReductionOp::SumSoftMaxWeight, "-SqDist(X,Y)", 1, 0, "B")},
  };
  for (const auto& c : cases) {
    Reduction got = parse_reduction(c.text, kAliases);
    EXPECT_EQ(got.hash(), c.want.hash()) << c.text << ": " << got.str() << " vs " << c.want.str();
  }
}

TEST(ReductionText, CommasInsideTheFormulaDoNotSplitIt) {
  // SqDist(X,Y) and Extract(X,0,1) hold commas of their own.
  Reduction got = parse_reduction("Sum_Reduction(Extract(X,0,1)*SqDist(X,Y), 0)", kAliases);
  EXPECT_EQ(got.hash(), built(ReductionOp::Sum, "Extract(X,0,1)*SqDist(X,Y)", 1).hash());
}

TEST(ReductionText, MalformedTextsSayWhatWasExpected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"SqDist(X,Y)", "not a reduction name ending in _Reduction"},
      {"Sum(SqDist(X,Y), 0)", "not a reduction name ending in _Reduction"},
      {"Mean_Reduction(X, 0)", "unknown reduction 'Mean'"},
      {"Sum_Reduction(X, 0", "an unclosed parenthesis"},
      {"Sum_Reduction(X, 0) + 1", "text after the reduction's closing parenthesis"},
      {"Sum_Reduction(X)", "has 1 arguments; expected Sum_Reduction(F, tag)"},
      {"Sum_Reduction(X, 2)", "the tag must be 0 (reduce over j) or 1 (over i), got 2"},
      {"Sum_Reduction(X, -1)", "the tag (last index) must be a non-negative integer, got '-1'"},
      {"ArgKMin_Reduction(SqDist(X,Y), 0)", "expected ArgKMin_Reduction(F, K, tag)"},
      {"ArgKMin_Reduction(SqDist(X,Y), 0, 0)", "K must be at least 1"},
      {"ArgKMin_Reduction(SqDist(X,Y), K, 0)", "K must be a non-negative integer, got 'K'"},
      {"SumSoftMaxWeight_Reduction(-SqDist(X,Y), 0)", "needs a weight formula G"},
      {"Sum_Reduction(Exp(Z), 0)", "Z"},
      {"", "no parenthesis"},
  };
  for (const auto& [text, fragment] : cases) {
    std::string msg = error_of(text);
    EXPECT_NE(msg.find("parse"), std::string::npos) << text << ": " << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << text << ": " << msg;
  }
}
