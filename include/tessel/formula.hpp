// Formulas: immutable, hash-consed expressions of i-, j- and parameter variables, and the C++
// builder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessel {

struct Node;  // defined in the library; users only hold Formula handles

/// Which index a variable follows: i (rows of the output for a reduction over j), j, or none.
enum class Category : uint8_t { I = 0, J = 1, Param = 2 };

/// A stable 128-bit structural hash: equal formulas have equal hashes across runs and machines.
struct Hash128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Hash128&) const = default;
  std::string hex() const;
};

class Formula {
 public:
  Formula() = default;  // a null formula; most functions reject it
  explicit Formula(std::shared_ptr<const Node> n) : node_(std::move(n)) {}

  bool valid() const { return node_ != nullptr; }
  int dim() const;
  Hash128 hash() const;
  /// Printing gives KeOps-style text that parses back to the same hash.
  std::string str() const;
  const Node& node() const { return *node_; }
  const std::shared_ptr<const Node>& ptr() const { return node_; }
  /// Hash-consing makes structural equality a pointer comparison.
  bool same(const Formula& o) const { return node_ == o.node_; }

  Formula operator[](int m) const;  // Elem(f, m)

 private:
  std::shared_ptr<const Node> node_;
};

// ---- leaves -------------------------------------------------------------------------------------
Formula vi(int index, int dim);
Formula vj(int index, int dim);
Formula pm(int index, int dim);
Formula var(int index, int dim, Category cat);
Formula constant(double value);              // a floating constant
Formula int_cst(int64_t value);              // IntCst(n)
Formula rational(int64_t num, int64_t den);  // Rat(p, q), reduced
Formula zero(int dim);                       // Zero(d)
Formula int_inv(int64_t n);                  // IntInv(n) = Rat(1, n), n != 0

// ---- arithmetic (dim-1 operands broadcast)
// -------------------------------------------------------
Formula operator+(const Formula& a, const Formula& b);
Formula operator-(const Formula& a, const Formula& b);
Formula operator*(const Formula& a, const Formula& b);
Formula operator/(const Formula& a, const Formula& b);
Formula operator-(const Formula& a);
Formula operator+(const Formula& a, double b);
Formula operator+(double a, const Formula& b);
Formula operator-(const Formula& a, double b);
Formula operator-(double a, const Formula& b);
Formula operator*(const Formula& a, double b);
Formula operator*(double a, const Formula& b);
Formula operator/(const Formula& a, double b);
Formula operator/(double a, const Formula& b);
Formula operator|(const Formula& a, const Formula& b);  // Scalprod

// ---- elementwise math
// ----------------------------------------------------------------------------
Formula exp(const Formula& a);
Formula log(const Formula& a);
Formula xlogx(const Formula& a);
Formula sqrt(const Formula& a);
Formula rsqrt(const Formula& a);
Formula inv(const Formula& a);
Formula square(const Formula& a);
Formula abs(const Formula& a);
Formula sign(const Formula& a);
Formula step(const Formula& a);
Formula relu(const Formula& a);
Formula sin(const Formula& a);
Formula cos(const Formula& a);
Formula asin(const Formula& a);
Formula acos(const Formula& a);
Formula atan(const Formula& a);
Formula sin_x_div_x(const Formula& a);  // sin(x)/x, 1 at 0: KeOps's SinXDivX
/// The normalised sinc of NumPy, PyTorch and pykeops's LazyTensor.sinc: sin(pi x)/(pi x), 1 at 0.
Formula sinc(const Formula& a);
Formula floor(const Formula& a);
Formula round(const Formula& a);  // half away from zero
Formula pow(const Formula& a, int n);
Formula powf(const Formula& a, const Formula& b);
Formula atan2(const Formula& y, const Formula& x);
Formula elem_min(const Formula& a, const Formula& b);
Formula elem_max(const Formula& a, const Formula& b);
/// comparisons give 1 or 0
Formula less(const Formula& a, const Formula& b);
Formula less_eq(const Formula& a, const Formula& b);
Formula greater(const Formula& a, const Formula& b);
Formula greater_eq(const Formula& a, const Formula& b);
Formula equal(const Formula& a, const Formula& b);
Formula not_equal(const Formula& a, const Formula& b);
Formula mod(const Formula& a, const Formula& n, const Formula& d);  // a - n*floor((a-d)/n)
Formula clamp(const Formula& a, const Formula& lo, const Formula& hi);
Formula clampint(const Formula& a, int lo, int hi);
Formula ifelse(const Formula& c, const Formula& a, const Formula& b);  // c >= 0 ? a : b
Formula diff_clampint(const Formula& a, int lo, int hi);  // 1 where lo <= a <= hi, else 0

// ---- vector ops
// ----------------------------------------------------------------------------------
Formula sum(const Formula& a);
Formula max(const Formula& a);
Formula min(const Formula& a);
Formula argmax(const Formula& a);
Formula argmin(const Formula& a);
Formula elem(const Formula& a, int m);
Formula extract(const Formula& a, int start, int len);
Formula concat(const Formula& a, const Formula& b);
Formula one_hot(const Formula& a, int dim);
Formula sqnorm2(const Formula& a);
Formula norm2(const Formula& a);
Formula normalize(const Formula& a);
Formula sqdist(const Formula& a, const Formula& b);
Formula scalprod(const Formula& a, const Formula& b);
Formula weighted_sqnorm(const Formula& w, const Formula& a);
Formula weighted_sqdist(const Formula& w, const Formula& a, const Formula& b);
Formula sym_sqnorm(const Formula& s, const Formula& a);   // s: full d×d matrix, row-major
Formula sqnorm_iso(const Formula& s, const Formula& a);   // s: scalar
Formula sqnorm_diag(const Formula& s, const Formula& a);  // s: diagonal, dim d

// ---- tensor ops (row-major matrices stored as flat vectors)
// --------------------------------------
Formula matvecmult(const Formula& a, const Formula& v);  // a: (m×n), v: n -> m
Formula vecmatmult(const Formula& v, const Formula& a);  // v: m, a: (m×n) -> n
Formula tensorprod(const Formula& a, const Formula& b);  // outer product, dim(a)*dim(b)
/// KeOps TensorDot: contract dims_a[contr_a[k]] with dims_b[contr_b[k]]; the remaining axes, a's
/// then b's, go to output positions perm[0], perm[1], ... (KeOps's convention; empty: in order).
Formula tensordot(const Formula& a, const Formula& b, const std::vector<int>& dims_a,
                  const std::vector<int>& dims_b, const std::vector<int>& contr_a,
                  const std::vector<int>& contr_b, const std::vector<int>& perm = {});
/// KeOps's Kronecker product of row-major tensors of shapes dims_a and dims_b (equal ranks), as
/// numpy.kron: a TensorDot that interleaves the axes; dim = dim(a) * dim(b).
Formula kron(const Formula& a, const Formula& b, const std::vector<int>& dims_a,
             const std::vector<int>& dims_b);
/// The adjoints of elem, extract and sum (KeOps's ElemT, ExtractT, SumT): the scalar a at
/// position m of a dim-n vector; a at [start, start + dim(a)) of a dim-`dim` vector; the scalar a
/// in every component of a dim-`dim` vector. Zeros elsewhere.
Formula elem_t(const Formula& a, int n, int m);
Formula extract_t(const Formula& a, int start, int dim);
Formula sum_t(const Formula& a, int dim);

// ---- complex ops: a complex vector of dim D is 2D reals (re0, im0, re1, im1, ...), as in KeOps
// ---
/// Binary complex ops take equal even dims, or one operand of dim 2 (one complex number).
Formula complex_add(const Formula& a, const Formula& b);
Formula complex_sub(const Formula& a, const Formula& b);
Formula complex_mult(const Formula& a, const Formula& b);
Formula complex_divide(const Formula& a, const Formula& b);
Formula conj(const Formula& a);
Formula complex_exp(const Formula& a);
Formula complex_real(const Formula& a);        // dim 2D -> D
Formula complex_imag(const Formula& a);        // dim 2D -> D
Formula complex_square_abs(const Formula& a);  // |z|^2, dim 2D -> D
Formula complex_abs(const Formula& a);         // |z|, dim 2D -> D
Formula complex_angle(const Formula& a);       // atan2(im, re), 0 at 0, dim 2D -> D
Formula real2complex(const Formula& a);        // x + 0i, dim D -> 2D
Formula imag2complex(const Formula& a);        // 0 + xi, dim D -> 2D
Formula complex_exp1j(const Formula& a);       // exp(i x) of a real x, dim D -> 2D
Formula complex_real_scal(const Formula& a, const Formula& b);  // real scalar times complex
Formula complex_sum(const Formula& a);             // sum of the complex components -> dim 2
Formula complex_sum_t(const Formula& a, int dim);  // ComplexSum's adjoint: dim 2 -> dim

// ---- recursions over components
// ------------------------------------------------------------------
/// KeOps's BSpline: the dim(knots) - order - 1 B-spline basis functions of the given order (0:
/// indicators of [t_j, t_j+1)) at the scalar x, by De Boor's recursion; a ratio over coincident
/// knots is 0.
Formula bspline(const Formula& knots, const Formula& x, int order);
/// KeOps's SoftDTW_SqDist: soft-DTW between the series x and y (their components) with the cost
/// (x_i - y_j)^2 and smoothing gamma (dim 1); dim 1.
Formula softdtw_sqdist(const Formula& x, const Formula& y, const Formula& gamma);
/// x[a] - y[b] at a * dim(y) + b: pykeops's difference_matrix.
Formula difference_matrix(const Formula& x, const Formula& y);

// ---- calculus on formulas
// ------------------------------------------------------------------------
/// Reverse mode: the gradient of <f, cot> with respect to variable `v` (a leaf made by var()).
Formula grad(const Formula& f, const Formula& v, const Formula& cot);
/// Forward mode: the directional derivative of f along `tangent` for variable `v`.
Formula jvp(const Formula& f, const Formula& v, const Formula& tangent);
/// KeOps's derivative operators, expanded into plain formulas (v: a variable leaf).
/// grad_matrix: the Jacobian of f in v, row-major (entry k * dim(v) + l is d f_k / d v_l);
/// diff: the directional derivative along u (dim u = dim v, forward mode, as jvp);
/// divergence: the trace of the Jacobian (dim f = dim v); laplacian: the divergence of the
/// gradient of a scalar f; trace_operator: the trace of f, a linear function of v (dim f = dim v,
/// or dim f = 1: the sum of its gradient's entries), refused when f is not linear in v.
Formula grad_matrix(const Formula& f, const Formula& v);
Formula diff(const Formula& f, const Formula& v, const Formula& u);
Formula divergence(const Formula& f, const Formula& v);
Formula laplacian(const Formula& f, const Formula& v);
Formula trace_operator(const Formula& f, const Formula& v);

/// Variables that occur in f, sorted by (index), each once.
std::vector<Formula> variables(const Formula& f);

// ---- the op table, for tools and tests that iterate over every op ------------------------------
/// How an op's output dim follows from its argument dims, read off the op's own dim rule:
/// "elementwise" (equal dims, dim-1 arguments broadcast), "to_scalar" (one argument, any dim -> 1),
/// "same_to_scalar" (equal dims -> 1) or "custom" (anything else, or a rule that depends on the
/// op's integer parameters). Composites, entries that build other ops (Kron: a TensorDot), are
/// listed after the ops, "custom".
struct OpSummary {
  std::string name;      // the KeOps text name the parser reads
  int arity = 0;         // formula arguments
  int n_int_params = 0;  // integer parameters after them (ops that take tuples: 0)
  std::string infix;     // "+", "-", "*", "/", "|" for ops printed infix, else empty
  std::string dim_rule;
  std::string method;  // the LazyTensor method name ("sinxdivx", "power"), "" for none
  /// The parameters as a caller writes them: integers or tuples of integers (TensorDot, Kron),
  /// from min to max of them (Round's decimals may be left out), named by `param_names`
  /// (space-separated; empty where they are positional only).
  bool tuple_params = false;
  int min_params = 0, max_params = 0;
  std::string param_names;
};
std::vector<OpSummary> op_table();

// ---- text
// -----------------------------------------------------------------------------------------
/// Parse KeOps syntax, e.g. parse("Exp(-G*SqDist(X,Y)) * B", {"G = Pm(1)", "X = Vi(3)", ...}).
/// Aliases without an explicit index are numbered in the order given.
Formula parse(const std::string& text, const std::vector<std::string>& aliases = {});

/// One alias: "X = Vi(3)" (index = its position in the list), "X = Vi(0, 3)", "X = Var(0, 3, 0)"
/// (index, dim, category), or the same without a name (it declares an argument that a formula
/// names as Var(index, dim, cat)); Vx / Vy are old spellings of Vi / Vj.
struct AliasInfo {
  std::string name;  // empty for an unnamed alias
  int index = 0;
  int dim = 1;
  Category cat = Category::I;
};
/// The aliases as parse() reads them, with the same checks (syntax, duplicate names, one variable
/// per index): front ends that need the declared variables use this, not a parser of their own.
std::vector<AliasInfo> parse_aliases(const std::vector<std::string>& aliases);
/// The variables a formula text names (through its aliases or as Var(...), Vi(...), ...), by
/// index and unnamed, including those that simplification removes from parse()'s result (as in
/// Grad(x, y, e) = 0): KeOps counts them among a call's arguments.
std::vector<AliasInfo> named_variables(const std::string& text,
                                       const std::vector<std::string>& aliases = {});
/// What a front end reads from a reduction's texts, in one pass of the parser: the declared
/// aliases (as parse_aliases), each text's formula (as parse) and the variables the texts name
/// (as named_variables, over all texts).
struct ParsedTexts {
  std::vector<AliasInfo> declared;
  std::vector<Formula> formulas;
  std::vector<AliasInfo> named;
};
ParsedTexts parse_texts(const std::vector<std::string>& texts,
                        const std::vector<std::string>& aliases);
/// How many times parse, parse_aliases, named_variables and parse_texts were entered in this
/// process: tests hold the call path of a built reduction to none.
uint64_t parser_entries();

// ---- rebuilding formulas (front ends build and transform formulas through these) ----------------
/// Op `name` of op_table() on formula arguments and its integer parameters, with the checks of
/// the text syntax (Round's decimals may be left out).
Formula make_op(const std::string& name, std::vector<Formula> args,
                std::vector<int64_t> params = {});
/// The same with the parameters as written, one vector each: a tuple for ops that take tuples
/// (TensorDot, Kron), a vector of one for an integer.
Formula make_op_written(const std::string& name, std::vector<Formula> args,
                        const std::vector<std::vector<int64_t>>& params);
/// Replace variables: every leaf `from[k]` becomes `to[k]` (dims must match).
Formula substitute(const Formula& f, const std::vector<Formula>& from,
                   const std::vector<Formula>& to);
/// The variables that occur in f (index, dim, category; no names), sorted by index.
std::vector<AliasInfo> variable_info(const Formula& f);
/// Variable k becomes variable index_map[k] (an empty map keeps the indices); swap_ij exchanges
/// the i and j categories (the transpose of a kernel matrix). Dims and parameters stay.
Formula relabel(const Formula& f, const std::vector<int>& index_map, bool swap_ij = false);

}  // namespace tessel
