// The IR node: one immutable, interned DAG node per distinct sub-formula.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "tessel/formula.hpp"

namespace tessel {

enum class OpCode : uint16_t {
  Var,
  Const,
  Zero,
  // arithmetic
  Add,
  Sub,
  Mul,
  Div,
  Neg,
  // elementwise math
  Exp,
  Log,
  XLogX,
  Sqrt,
  Rsqrt,
  Inv,
  Pow,
  Powf,
  Square,
  Abs,
  Sign,
  Step,
  ReLU,
  Sin,
  Cos,
  Asin,
  Acos,
  Atan,
  SinXDivX,
  Atan2,
  Floor,
  Round,
  Mod,
  Clamp,
  ClampInt,
  IfElse,
  ElemMin,
  ElemMax,
  Less,
  LessEq,
  Greater,
  GreaterEq,
  Equal,
  NotEqual,
  // vector
  Sum,
  Max,
  Min,
  ArgMax,
  ArgMin,
  Elem,
  Extract,
  Concat,
  OneHot,
  SqNorm2,
  Norm2,
  Normalize,
  SqDist,
  Scalprod,
  SymSqNorm,
  SqNormIso,
  SqNormDiag,
  // tensor
  MatVecMult,
  VecMatMult,
  TensorProd,
  TensorDot,
  // complex, on (re, im) pairs
  ComplexAdd,
  ComplexSubtract,
  ComplexMult,
  ComplexDivide,
  Conj,
  ComplexExp,
  ComplexReal,
  ComplexImag,
  ComplexSquareAbs,
  ComplexAbs,
  ComplexAngle,
  Real2Complex,
  Imag2Complex,
  ComplexExp1j,
  ComplexRealScal,
  ComplexSum,
  ComplexSumT,
  // KeOps's linear injections and ClampInt's derivative
  ElemT,
  ExtractT,
  SumT,
  DiffClampInt,
  // recursions over components (ops/sequence.cpp)
  BSpline,
  SoftDTW,
  SoftDTWGrad,
  SoftDTWGradDir,
  DifferenceMatrix,
  Count_
};

using NodePtr = std::shared_ptr<const Node>;

// Const nodes remember how they were written so that printing round-trips.
enum class ConstKind : int64_t { Float = 0, Int = 1, Rational = 2 };

struct Node {
  OpCode op;
  int dim;
  std::vector<NodePtr> args;
  std::vector<int64_t> ip;  // integer parameters: Var {index, category}, Elem {m}, Pow {n}, ...
  double value = 0;         // Const only
  Hash128 hash;
  // Derived, not hashed: whether an i or j variable occurs below. Uniform sub-formulas (params
  // and constants only) are loop invariants; rewrites use this to keep divisions out of loops.
  bool varies = false;

  // Iterative: the default destructor would release a chain of last references by recursion,
  // one stack frame per level, and a formula a few hundred thousand deep would overflow it.
  ~Node();

  bool is_var() const { return op == OpCode::Var; }
  int var_index() const { return static_cast<int>(ip[0]); }
  Category var_cat() const { return static_cast<Category>(ip[1]); }
  bool is_const() const { return op == OpCode::Const; }
  bool is_zero() const { return op == OpCode::Zero || (op == OpCode::Const && value == 0.0); }
};

// Interns a node whose fields are already validated (dims computed, simplification done).
Formula intern(OpCode op, int dim, std::vector<NodePtr> args, std::vector<int64_t> ip,
               double value = 0);

// The same stable 128-bit mixing, for other structures (reductions, kernel keys).
Hash128 hash_words(const std::vector<int64_t>& words);
Hash128 hash_bytes(std::string_view bytes);  // the same mixing over a byte string (sources, keys)

// Nodes of f in an order where every node follows its arguments; each node once.
std::vector<NodePtr> topo_order(const NodePtr& root);

}  // namespace tessel
