// The KeOps text parser: aliases, precedence, every op's syntax, printing round trips and errors.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "ir/node.hpp"
#include "ops/op.hpp"
#include "ops/tensordot.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;

namespace {

// One formula per table op, with dims that op accepts and no simplification firing.
Formula sample(OpCode code) {
  const Formula x = vi(0, 3), y = vj(1, 3), z = pm(2, 3), s = pm(3, 1);
  // The ops that take other arguments than (x, y, z) cut to their arity, or parameters.
  struct Sample {
    OpCode code;
    std::vector<Formula> args;
    std::vector<int64_t> params;
  };
  // (2x3) . (3x4) -> (2x4), then transposed: a permutation the builder never makes
  const TensorDotSpec td{{2, 3}, {3, 4}, {1}, {0}, {1, 0}};
  const Sample samples[] = {
      {OpCode::Pow, {x}, {3}},
      {OpCode::Round, {x}, {2}},
      {OpCode::ClampInt, {x}, {0, 1}},
      {OpCode::Elem, {x}, {1}},
      {OpCode::Extract, {x}, {1, 2}},
      {OpCode::OneHot, {s}, {4}},
      {OpCode::SqNormIso, {s, x}, {}},
      {OpCode::SymSqNorm, {pm(4, 9), x}, {}},
      {OpCode::MatVecMult, {pm(4, 6), x}, {}},
      {OpCode::VecMatMult, {vj(5, 2), pm(4, 6)}, {}},
      {OpCode::TensorProd, {x, vj(5, 2)}, {}},
      {OpCode::TensorDot, {pm(4, 6), vj(5, 12)}, td.encode()},
      {OpCode::ComplexRealScal, {s, vi(0, 4)}, {}},
      {OpCode::ComplexSumT, {vj(1, 2)}, {4}},
      {OpCode::ElemT, {s}, {4, 1}},
      {OpCode::ExtractT, {x}, {1, 5}},
      {OpCode::SumT, {s}, {4}},
      {OpCode::DiffClampInt, {x}, {0, 1}},
      {OpCode::BSpline, {x, s}, {1}},
      {OpCode::SoftDTW, {x, vj(5, 2), s}, {}},
      {OpCode::SoftDTWGrad, {x, vj(5, 2), s}, {}},
      {OpCode::SoftDTWGradDir, {x, vj(5, 2), s, pm(4, 12)}, {}},
  };
  for (const Sample& c : samples)
    if (c.code == code) return make(code, c.args, c.params);
  std::vector<Formula> args = {x, y, z};
  for (OpCode c : {OpCode::ComplexAdd, OpCode::ComplexSubtract, OpCode::ComplexMult,
                   OpCode::ComplexDivide, OpCode::Conj, OpCode::ComplexExp, OpCode::ComplexReal,
                   OpCode::ComplexImag, OpCode::ComplexSquareAbs, OpCode::ComplexAbs,
                   OpCode::ComplexAngle, OpCode::ComplexSum})
    if (c == code) args = {vi(0, 4), vj(1, 4)};  // complex operands: even dims
  args.resize(op_info(code).arity);
  return make(code, args);
}

std::vector<OpCode> table_ops() {
  std::vector<OpCode> ops;
  for (int c = static_cast<int>(OpCode::Add); c < static_cast<int>(OpCode::Count_); ++c)
    ops.push_back(static_cast<OpCode>(c));
  return ops;
}

void expect_round_trip(const Formula& f) {
  const std::string text = f.str();
  Formula g;
  ASSERT_NO_THROW(g = parse(text)) << text;
  EXPECT_TRUE(g.same(f)) << text << "\n  reparsed as " << g.str();
  EXPECT_EQ(g.hash(), f.hash()) << text;
}

// The message names the problem and the column, and the caret sits under that column.
void expect_error(const std::string& text, const std::vector<std::string>& aliases,
                  const std::string& piece, size_t column) {
  try {
    (void)parse(text, aliases);
    ADD_FAILURE() << "no error for \"" << text << "\"";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_EQ(w.rfind("tessel::parse: ", 0), 0u) << w;
    EXPECT_NE(w.find(piece), std::string::npos) << "want \"" << piece << "\" in:\n" << w;
    EXPECT_NE(w.find(" at column " + std::to_string(column) + "\n"), std::string::npos) << w;
    const std::string caret = "\n  " + std::string(column, ' ') + "^";
    EXPECT_EQ(w.substr(w.size() - std::min(w.size(), caret.size())), caret) << w;
  }
}

const std::vector<std::string> kXYZ = {"X = Vi(3)", "Y = Vj(3)", "Z = Vj(2)"};

}  // namespace

TEST(Parser, ReadmeExample) {
  const Formula f =
      parse("Exp(-G*SqDist(X,Y)) * B", {"G = Pm(1)", "X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"});
  EXPECT_TRUE(f.same(exp(-pm(0, 1) * sqdist(vi(1, 3), vj(2, 3))) * vj(3, 2))) << f.str();
}

TEST(Parser, RoundTripsEveryOp) {
  for (OpCode code : table_ops()) {
    const OpInfo& o = op_info(code);
    SCOPED_TRACE(o.name);
    const Formula f = sample(code);
    ASSERT_EQ(f.node().op, code) << f.str();
    expect_round_trip(f);
    expect_round_trip(exp(sum(f)) * 2.5 - rational(1, 3));
  }
}

TEST(Parser, EveryOpByItsKeOpsName) {
  // Infix ops and Minus too: Add(a,b), Subtract(a,b), Mult(a,b), Divide(a,b), Scalprod(a,b).
  for (OpCode code : table_ops()) {
    if (code == OpCode::TensorDot) continue;  // tuples: see TensorDotSpellings
    const OpInfo& o = op_info(code);
    SCOPED_TRACE(o.name);
    const Formula f = sample(code);
    std::string text = std::string(o.name) + "(";
    for (size_t k = 0; k < f.node().args.size(); ++k)
      text += (k ? ", " : "") + Formula(f.node().args[k]).str();
    for (int64_t v : f.node().ip) text += ", " + std::to_string(v);
    text += ")";
    Formula g;
    ASSERT_NO_THROW(g = parse(text)) << text;
    EXPECT_TRUE(g.same(f)) << text;
  }
}

TEST(Parser, RoundTripsGradients) {
  const Formula x = vi(1, 3), y = vj(2, 3), g = pm(0, 1), b = vj(3, 2);
  const Formula gauss = exp(-g * sqdist(x, y)) * b;
  expect_round_trip(grad(gauss, x, vi(4, 2)));
  expect_round_trip(grad(gauss, g, vi(4, 2)));
  expect_round_trip(grad(grad(gauss, x, vi(4, 2)) | vi(5, 3), y, constant(1.0)));
  expect_round_trip(jvp(gauss, y, vj(6, 3)));
  // The VJP of every op, as produced by the differentiator, prints and parses back.
  for (OpCode code : table_ops()) {
    const Formula f = sample(code);
    SCOPED_TRACE(op_info(code).name);
    for (const Formula& v : variables(f)) expect_round_trip(grad(f, v, vi(9, f.dim())));
  }
}

TEST(Parser, RoundTripsConstants) {
  const Formula x = vi(0, 3);
  for (const Formula& c : {int_cst(2), int_cst(-3), rational(-1, 3), rational(7, 2), constant(2.0),
                           constant(-2.5), constant(0.1), constant(1e-300), constant(1e300),
                           constant(4.9406564584124654e-324), constant(-123456789012.0)}) {
    SCOPED_TRACE(c.str());
    expect_round_trip(c);
    expect_round_trip(c * x);
    expect_round_trip(x - c);
    expect_round_trip(x / c);
  }
  expect_round_trip(concat(zero(2), x));
  expect_round_trip(zero(4));
}

TEST(Parser, NumericLiterals) {
  EXPECT_TRUE(parse("2").same(int_cst(2)));
  EXPECT_TRUE(parse("2.0").same(constant(2.0)));
  EXPECT_TRUE(parse("2.").same(constant(2.0)));
  EXPECT_TRUE(parse(".5").same(constant(0.5)));
  EXPECT_TRUE(parse("1e3").same(constant(1000.0)));
  EXPECT_TRUE(parse("2.5E-1").same(constant(0.25)));
  EXPECT_TRUE(parse("IntCst(-7)").same(int_cst(-7)));
  EXPECT_TRUE(parse("Rat(2, -6)").same(rational(-1, 3)));
  EXPECT_TRUE(parse("Zero(5)").same(zero(5)));
  // The printer writes a negative constant as "-2.5"; negation folds into the same node.
  EXPECT_EQ(constant(-2.5).str(), "-2.5");
  EXPECT_TRUE(parse("-2.5").same(constant(-2.5)));
  EXPECT_EQ(parse("-2.5").hash(), constant(-2.5).hash());
  EXPECT_TRUE(parse("-2").same(-int_cst(2)));
  EXPECT_TRUE(parse("Minus(2.5)").same(constant(-2.5)));
}

TEST(Parser, Precedence) {
  const Formula a = vi(0, 3), b = vj(1, 3), c = pm(2, 3);
  const std::vector<std::string> al = {"a = Vi(3)", "b = Vj(3)", "c = Pm(3)"};
  EXPECT_TRUE(parse("a+b*c", al).same(a + (b * c)));
  EXPECT_TRUE(parse("a*b+c", al).same((a * b) + c));
  EXPECT_TRUE(parse("a|b+c", al).same(a | (b + c)));
  EXPECT_TRUE(parse("a*b|c", al).same((a * b) | c));
  EXPECT_TRUE(parse("-a*b", al).same((-a) * b));
  EXPECT_TRUE(parse("a*-b", al).same(a * (-b)));
  EXPECT_TRUE(parse("a - -b", al).same(a - (-b)));
  EXPECT_TRUE(parse("-(a+b)", al).same(-(a + b)));
  EXPECT_TRUE(parse("a-b-c", al).same((a - b) - c));
  EXPECT_TRUE(parse("a/b/c", al).same((a / b) / c));
  EXPECT_TRUE(parse("a-b+c", al).same((a - b) + c));
  EXPECT_TRUE(parse("a-(b+c)", al).same(a - (b + c)));
  EXPECT_TRUE(parse("2*a/2.5", al).same((int_cst(2) * a) / constant(2.5)));
  EXPECT_TRUE(parse("a[1] * -b[2]", al).same(elem(a, 1) * -elem(b, 2)));
  EXPECT_TRUE(parse("(a+b)[0]", al).same(elem(a + b, 0)));
}

TEST(Parser, AliasesAndIndices) {
  // Position in the list is the index, unless the alias gives one.
  EXPECT_TRUE(parse("X + Y", {"X = Vi(3)", "Y = Vj(3)"}).same(vi(0, 3) + vj(1, 3)));
  EXPECT_TRUE(parse("X + Y", {"X = Vi(4, 3)", "Y = Vj(3)"}).same(vi(4, 3) + vj(1, 3)));
  EXPECT_TRUE(parse("X*Y", {"Y=Vj(2,3)", "X=Vi(3)"}).same(vi(1, 3) * vj(2, 3)));
  // Two aliases may name the same variable.
  EXPECT_TRUE(parse("X - Y", {"X = Vi(1, 3)", "Y = Vi(3)"}).same(zero(3)));
  // Old spellings.
  EXPECT_TRUE(parse("X | Y", {"X = Vx(3)", "Y = Vy(3)"}).same(vi(0, 3) | vj(1, 3)));
  EXPECT_TRUE(
      parse("SqDist(X, Y)", {"X = Vx(0,2)", "Y = Vy(7,2)"}).same(sqdist(vi(0, 2), vj(7, 2))));
  // Variables written in place.
  EXPECT_TRUE(parse("Vi(0,3) + Vj(1,3) * Pm(2,1)").same(vi(0, 3) + vj(1, 3) * pm(2, 1)));
  EXPECT_TRUE(parse("Vx(0,3) - Vy(1,3)").same(vi(0, 3) - vj(1, 3)));
  EXPECT_TRUE(parse("Var(0,3,0) + Var(1,3,1) + Var(2,3,2)").same(vi(0, 3) + vj(1, 3) + pm(2, 3)));
  // Names of functions do not clash with aliases.
  EXPECT_TRUE(parse("Exp(Exp)", {"Exp = Pm(1)"}).same(exp(pm(0, 1))));
}

TEST(Parser, Whitespace) {
  const Formula f = exp(-pm(0, 1) * sqdist(vi(1, 3), vj(2, 3))) * elem(vj(3, 2), 1);
  const std::vector<std::string> al = {" G\t=Pm ( 1 ) ", "X=Vi(3)", "\nY =  Vj( 2 ,3 )",
                                       "B = Vj(2)"};
  EXPECT_TRUE(parse("Exp(-G*SqDist(X,Y))*B[1]", al).same(f));
  EXPECT_TRUE(parse("  Exp ( - G * SqDist ( X , Y ) ) *\n B [ 1 ]  ", al).same(f));
  EXPECT_TRUE(parse("Pow( X , -3 )", al).same(pow(vi(1, 3), -3)));
}

// KeOps formulas are Python expressions: trailing commas, spaces, signed integers, KeOps's names.
TEST(Parser, PythonArgumentLists) {
  const Formula x = vi(0, 3), y = vj(1, 3);
  const std::vector<std::string> al = {"X = Vi(3,)", "Y = Vj(1, 3,)"};
  EXPECT_TRUE(parse("Abs(X,)", al).same(abs(x)));
  EXPECT_TRUE(parse("Pow(X,2,)", al).same(pow(x, 2)));
  EXPECT_TRUE(parse("Pow( X , - 2 , )", al).same(pow(x, -2)));
  EXPECT_TRUE(parse("Pow(X,+2)", al).same(pow(x, 2)));
  EXPECT_TRUE(parse("Extract(X,0,1,)", al).same(extract(x, 0, 1)));
  EXPECT_TRUE(parse("SqDist(X,Y,)", al).same(sqdist(x, y)));
  EXPECT_TRUE(parse("Round(X,)", al).same(round(x)));
  EXPECT_TRUE(parse("IntCst(3,) * X", al).same(int_cst(3) * x));
  EXPECT_TRUE(parse("IntCst( -3 ) * X", al).same(int_cst(-3) * x));
  EXPECT_TRUE(parse("RatCst(1, 3) * X", al).same(rational(1, 3) * x));
  EXPECT_TRUE(parse("Var(0,3,0,) + Vj(1,3,)", al).same(x + y));
  EXPECT_TRUE(parse("Zero(3,)", al).same(zero(3)));
  EXPECT_TRUE(parse("Sum (\tX\n)", al).same(sum(x)));
  EXPECT_TRUE(parse("TensorDot(X, Y, (3,), (3,), (0,), (0,),)", al)
                  .same(tensordot(x, y, {3}, {3}, {0}, {0})));
  EXPECT_TRUE(parse("LessThan(X, Y)", al).same(less(x, y)));
  EXPECT_TRUE(parse("LessOrEqual(X, Y,)", al).same(less_eq(x, y)));
  EXPECT_TRUE(parse("Equal(X, Y)", al).same(equal(x, y)));
  EXPECT_TRUE(parse("NotEqual(X, Y)", al).same(not_equal(x, y)));
  EXPECT_EQ(parse("LessThan(X, Y)", al).str(), less(x, y).str());  // printed canonically
  EXPECT_EQ(parse_aliases({"X = Vi(3,)"})[0].dim, 3);
}

// Each malformed argument list is reported where the problem is: {text, message, column}.
TEST(Parser, ArgumentListErrors) {
  const std::vector<std::tuple<std::string, std::string, int>> cases = {
      {"Abs(,X)", "empty argument in 'Abs(...)'", 4},
      {"SqDist(X,,Y)", "empty argument in 'SqDist(...)'", 9},
      {"Pow(X,,2)", "empty argument in 'Pow(...)'", 6},
      {"Abs(X,,)", "empty argument in 'Abs(...)'", 6},
      {"IntCst(,3)", "empty argument in 'IntCst(...)'", 7},
      {"Abs()", "'Abs' takes 1 argument, found none", 0},
      {"X + SqDist(X,)", "'SqDist' takes 2 arguments, found 1", 4},
      {"Pow(X,)", "'Pow' takes 2 arguments: 1 formula, then 1 integer, found 1", 0},
      {"Abs(X, Y)", "too many arguments: 'Abs' takes 1 argument", 7},
      {"Abs(X,Y,)", "too many arguments", 6},
      {"Pow(X,2,3)", "too many arguments", 8},
      {"Abs(X", "missing ')' closing 'Abs(' at column 0", 5},
      {"Exp(Abs(X,)", "missing ')' closing 'Exp(' at column 0", 11},
      {"Pow(X, 2", "missing ')' closing 'Pow(' at column 0", 8},
      {"Pow(X, 2,", "missing ')' closing 'Pow(' at column 0", 9},
      {"X * (Y + X", "missing ')' closing the '(' at column 4", 10},
      {"Pow(X, - )", "expected an integer", 7},
      {"LessThan(X)", "'LessThan' takes 2 arguments, found 1", 0},
      {"Pow(X, 2 3)", "expected ')', found '3'", 9},
  };
  for (const auto& [text, message, column] : cases)
    expect_error(text, kXYZ, message, static_cast<size_t>(column));
  EXPECT_THROW(parse_aliases({"X = Vi(3,,)"}), Error);
  EXPECT_THROW(parse_aliases({"X = Vi(,3)"}), Error);
}

TEST(Parser, SpecialForms) {
  const Formula x = vi(0, 3), w = pm(1, 3), y = vj(2, 3);
  const std::vector<std::string> al = {"X = Vi(3)", "W = Pm(3)", "Y = Vj(3)"};
  EXPECT_TRUE(parse("Round(X)", al).same(round(x)));
  EXPECT_TRUE(parse("Round(X, 0)", al).same(round(x)));
  EXPECT_TRUE(parse("Round(X, 3)", al).same(make(OpCode::Round, {x}, {3})));
  EXPECT_TRUE(parse("WeightedSqNorm(W, X)", al).same(weighted_sqnorm(w, x)));
  EXPECT_TRUE(parse("WeightedSqDist(W, X, Y)", al).same(weighted_sqdist(w, x, y)));
  EXPECT_TRUE(parse("Inv(Square(X))", al).same(inv(square(x))));
  EXPECT_TRUE(parse("Minus(X)", al).same(-x));
  EXPECT_TRUE(parse("IfElse(X, Clamp(X, W, Y), Mod(X, W, Y))", al)
                  .same(ifelse(x, clamp(x, w, y), mod(x, w, y))));
}

TEST(Parser, TensorDotSpellings) {
  const Formula a = pm(0, 4), b = vi(1, 2);
  const std::vector<std::string> al = {"A = Pm(4)", "B = Vi(2)"};
  const Formula want = tensordot(a, b, {2, 2}, {2}, {1}, {0});
  EXPECT_TRUE(parse("TensorDot(A, B, (2,2), (2), (1), (0))", al).same(want));
  EXPECT_TRUE(parse("TensorDot(A,B,(2,2),(2),(1),(0),(0))", al).same(want));
  EXPECT_TRUE(parse("TensorDot(A, B, Ind(2,2), Ind(2), Ind(1), Ind(0))", al).same(want));
  EXPECT_TRUE(parse("TensorDot(A, B, (2,2), (2,), (1,), (0,))", al).same(want));
  // The text's permutation is the builder's, in KeOps's convention, not its inverse.
  const Formula perm = tensordot(a, b, {2, 2}, {2}, {}, {}, {1, 2, 0});
  EXPECT_TRUE(parse("TensorDot(A, B, (2,2), (2), (), (), (1,2,0))", al).same(perm));
  EXPECT_FALSE(parse("TensorDot(A, B, (2,2), (2), (), (), (2,0,1))", al).same(perm));
  EXPECT_NE(perm.str().find("(1,2,0)"), std::string::npos) << perm.str();
  expect_round_trip(perm);
  // Full contraction: empty tuples.
  const Formula full = tensordot(a, pm(2, 4), {2, 2}, {2, 2}, {0, 1}, {0, 1});
  EXPECT_TRUE(parse("TensorDot(A, Pm(2,4), (2,2), (2,2), (0,1), (0,1), ())", al).same(full));
  expect_round_trip(full);
  expect_round_trip(want);
  expect_error("TensorDot(A, B, (2,2), (2), (1))", al, "'TensorDot' takes 6 or 7 arguments", 0);
  expect_error("TensorDot(A, B, (2,2), (2), (1), (0, 1))", al, "lengths 1 and 2", 0);
  expect_error("TensorDot(A, B, (2,2), 2, (1), (0))", al, "expected a tuple", 23);
  expect_error("TensorDot(A, B, (3,2), (2), (1), (0))", al, "multiply to 6", 0);
}

TEST(Parser, DeepNesting) {
  // Nesting depth is bounded by memory, not by the call stack.
  const int n = 200000;
  const std::string text = std::string(n, '(') + "X" + std::string(n, ')');
  EXPECT_TRUE(parse(text, {"X = Vi(3)"}).same(vi(0, 3)));
  Formula f = vi(0, 1);
  for (int k = 0; k < 2000; ++k) f = (k % 2 ? f + pm(1, 1) : exp(f));
  expect_round_trip(f);
}

TEST(Parser, FormulaErrors) {
  expect_error("Exp(Foo*X)", kXYZ, "unknown name 'Foo'", 4);
  expect_error("Foo(X)", kXYZ, "unknown function 'Foo'", 0);
  expect_error("X + X(1)", kXYZ, "'X' is an alias, not a function", 4);
  expect_error("X + $", kXYZ, "unexpected '$'", 4);
  expect_error("X # Y", kXYZ, "unexpected '#'", 2);
  expect_error("Exp(X", kXYZ, "missing ')'", 5);
  expect_error("(X + Y", kXYZ, "missing ')'", 6);
  expect_error("Exp(X Y)", kXYZ, "unexpected 'Y'; expected an operator, ',' or ')'", 6);
  expect_error("X)", kXYZ, "unmatched ')'", 1);
  expect_error("Exp(X) Y", kXYZ, "unexpected 'Y'; expected an operator or the end", 7);
  expect_error("X + ", kXYZ, "unexpected end of the formula", 4);
  expect_error("", kXYZ, "empty formula", 0);
  expect_error("   ", kXYZ, "empty formula", 0);
  expect_error("Exp(X, Y)", kXYZ, "too many arguments: 'Exp' takes 1 argument", 7);
  expect_error("X + SqDist(X)", kXYZ, "'SqDist' takes 2 arguments", 4);
  expect_error("Pow(X)", kXYZ, "'Pow' takes 2 arguments: 1 formula, then 1 integer", 0);
  expect_error("Elem(X, 1, 2)", kXYZ, "too many arguments: 'Elem' takes 2 arguments", 11);
  expect_error("Vi(0)", kXYZ, "'Vi' takes 2 arguments", 0);
  expect_error("Zero()", kXYZ, "'Zero' takes 1 argument, all integers, found none", 0);
  expect_error("Pow(X, 2.5)", kXYZ, "expected an integer", 7);
  expect_error("Elem(X, Y)", kXYZ, "expected an integer", 8);
  expect_error("X[Y]", kXYZ, "expected an integer", 2);
  expect_error("1e", kXYZ, "malformed number", 0);
  expect_error("X * 1.2.3", kXYZ, "malformed number", 4);
  expect_error("99999999999999999999", kXYZ, "out of range", 0);
  expect_error("Pow(X, 99999999999)", kXYZ, "out of range", 7);
}

// The builders' own errors, at the column of the call that failed: {text, message, column}.
TEST(Parser, BuilderErrorsCarryTheColumn) {
  const std::tuple<const char*, const char*, int> cases[] = {
      {"X + Z", "Add: operands have dims 3 and 2", 2},
      {"Exp(X * Z)", "Mult: operands have dims 3 and 2", 6},
      {"1 + SqDist(X, Z)", "SqDist: operands have dims 3 and 2", 4},
      {"X[3]", "Elem: index 3 is out of range", 1},
      {"Vi(-1, 3)", "index must be >= 0", 0},
      {"Var(0, 3, 5)", "category must be 0", 0},
      {"Rat(1, 0)", "denominator must be non-zero", 0},
      {"1e999", "out of range", 0}};
  for (const auto& [text, message, column] : cases)
    expect_error(text, kXYZ, message, static_cast<size_t>(column));
}

TEST(Parser, AliasErrors) {
  expect_error("X", {"X = Vk(3)"}, "in aliases[0]: expected Vi, Vj, Pm, Var, Vx or Vy, found 'Vk'", 4);
  expect_error("X", {"X Vi(3)"}, "expected '=', found 'Vi'", 2);
  expect_error("X", {"X = Vi(-1)"}, "dim must be >= 1, got -1", 7);
  expect_error("X", {"X = Vi(0)"}, "dim must be >= 1, got 0", 7);
  expect_error("X", {"X = Vi(-1, 3)"}, "index must be >= 0", 7);
  expect_error("X", {"X = Vi(3"}, "missing ')'", 8);
  expect_error("X", {"X = Vi(3) + 1"}, "unexpected '+' after the alias", 10);
  expect_error("X", {"X = Vi(1.5)"}, "expected an integer", 7);
  expect_error("X", {""}, "empty alias", 0);
  expect_error("X", {"3 = Vi(3)"}, "expected an alias name", 0);
  expect_error("X", {"X = Vi(3)", "X = Vj(3)"}, "in aliases[1]: duplicate alias 'X'", 0);
  expect_error("X", {"X = Vi(0, 3)", "Y = Vj(0, 3)"},
               "in aliases[1]: 'Y' is Vj(0,3) but alias 'X' already gave index 0 to Vi(0,3)", 4);
  expect_error("X", {"X = Vi(0, 3)", "Y = Vi(0, 2)"}, "already gave index 0", 4);
}

TEST(Parser, PykeopsAliasForms) {
  // Unnamed aliases and Var(index, dim, cat) declare arguments that formulas name as Var(...).
  const std::vector<std::string> al = {"X = Vx(3)", "Vj(1, 3)", "G = Var(2, 1, 2)", "Var(3,2,0)"};
  const std::vector<AliasInfo> a = parse_aliases(al);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].name, "X");
  EXPECT_EQ(a[0].index, 0);
  EXPECT_EQ(a[0].dim, 3);
  EXPECT_EQ(a[0].cat, Category::I);
  EXPECT_EQ(a[1].name, "");
  EXPECT_EQ(a[1].index, 1);
  EXPECT_EQ(a[1].cat, Category::J);
  EXPECT_EQ(a[2].name, "G");
  EXPECT_EQ(a[2].index, 2);
  EXPECT_EQ(a[2].cat, Category::Param);
  EXPECT_EQ(a[3].index, 3);
  EXPECT_EQ(a[3].dim, 2);
  EXPECT_TRUE(parse("G * SqDist(X, Var(1,3,1))", al)
                  .same(pm(2, 1) * sqdist(vi(0, 3), vj(1, 3))));
  EXPECT_TRUE(parse_aliases({}).empty());
  // Simplification drops the Grad's variables from the formula, not from the call's arguments.
  const std::vector<AliasInfo> n =
      named_variables("Grad(Grad(x + Var(1,3,1), x, Var(2,3,0)), x, Var(3,3,0))", {"x=Vi(0,3)"});
  ASSERT_EQ(n.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(n[k].index, k);
  EXPECT_EQ(n[1].cat, Category::J);
  EXPECT_THROW(named_variables("Var(0,3,0) + Var(0,3,1)"), Error);
  expect_error("X", {"Var(0, 3)"}, "expected ','", 8);
  expect_error("X", {"Var(0, 3, 3)"}, "category must be 0 (i), 1 (j) or 2 (parameter), got 3", 10);
  expect_error("X", {"X = Vi(0, 3)", "Vj(0, 3)"},
               "in aliases[1]: 'Vj(0, 3)' is Vj(0,3) but alias 'X' already gave index 0 to Vi(0,3)",
               0);
  expect_error("X", {"Vi(0, 3)", "Y = Vi(0, 2)"}, "but an unnamed alias already gave index 0", 4);
}

TEST(Parser, KeOpsGradForm) {
  const std::vector<std::string> al = {"X = Vi(3)", "Y = Vj(3)", "E = Vi(1)"};
  const Formula f = parse("Exp(-SqDist(X,Y))", al);
  EXPECT_TRUE(parse("Grad(Exp(-SqDist(X,Y)), X, E)", al).same(grad(f, vi(0, 3), vi(2, 1))));
  EXPECT_THROW(parse("Grad(Exp(-SqDist(X,Y)), X+Y, E)", al), Error);
  EXPECT_THROW(parse("Grad(Exp(-SqDist(X,Y)), X, Y)", al), Error);
}
