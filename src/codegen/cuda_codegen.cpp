// Reduction spec -> CUDA source (R outer rows per thread, inner rows through shared memory) + plan.
//
// The formula comes from the same op table as the CPU kernels (apply<Expr>), over a scalar
// prelude; the reduction states (cuda_reduce.cpp) keep the CPU semantics exactly (NaN, ties,
// -inf). This file only generates source: NVRTC compiles it with no GPU present, which is how
// the CUDA path is tested on machines without one. Launching it is the CUDA backend's job.
//
// Why the kernel looks the way it does (an H100 SM issues 4 warp instructions per clock, the rate
// of its float pipes, so every instruction per (i, j) pair counts; the Gaussian sum takes ~9.6,
// `tessel bench sass` counts them):
// - Each thread holds R outer rows in registers and evaluates them against every inner row of a
//   tile in shared memory: one 16-byte shared load per inner row serves R rows.
// - Inner rows sit in shared memory padded to 16 bytes, read as float4/double2 (LDS.128).
// - float32 exp is ex2.approx.ftz(x log2e): 2 instructions instead of ~9 for expf; its error,
//   2 + 1.2|x| ulp (CUDA's bound for __expf), is far below float32 tolerances for the sums it
//   feeds, whose large terms have small |x|.
// - Sums add in T within a tile and in double across tiles (block summation).
// - The inner loop is unrolled by hand; j-invariant work leaves it (cuda_formula.hpp: the exp's
//   folded constant, a Sum's factor); kernels whose rows fit 40 registers say so to ptxas
//   (__launch_bounds__), which keeps 75 % occupancy on sm_90.
// - Thread t of a block owns rows t*R .. t*R+R-1 of the block's range, so a small n_outer leaves
//   whole warps idle (they skip the arithmetic) instead of every thread computing dead rows.
#include "codegen/cuda_codegen.hpp"

#include <algorithm>

#include "codegen/cuda_formula.hpp"
#include "codegen/cuda_reduce.hpp"
#include "codegen/emitter.hpp"
#include "ops/op.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

using cuda_gen::var_name;
using std::string;
using std::to_string;

const char* kCudaPreludeHead = R"PRELUDE(
typedef long long i64;
#if TESSEL_F64
typedef double T;
#else
typedef float T;
#endif
typedef T V;
// NVRTC has no <math.h>: the special values come from their bit patterns.
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define INF ((T)INFINITY)
#define LOG2E_T ((T)1.4426950408889634)
#define DEV static __device__ __forceinline__
#if TESSEL_F64
DEV T ex2(T a) { return exp2(a); }
DEV T v_exp(T a) { return exp(a); }
#else
#ifdef TESSEL_CUDA_EMULATOR
// The emulator runs no PTX: exp2f made 2 ulp too large (the instruction's error bound, all in one
// direction) and flushing subnormal results, as .ftz does, stands in for it.
DEV T ex2(T a) { const T r = exp2f(a) * (1.0f + 0x1p-22f); return r < 1.17549435e-38f ? 0.0f : r; }
#else
// One MUFU.EX2; without .ftz (NVRTC's default) it costs 3 more instructions for subnormals.
DEV T ex2(T a) { T r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
#endif
DEV T v_exp(T a) { return ex2(a * LOG2E_T); }
#endif
DEV V bc(double c) { return (V)c; }
DEV V v_lt(V a, V b, V x, V y) { return a < b ? x : y; }
DEV V v_le(V a, V b, V x, V y) { return a <= b ? x : y; }
DEV V v_eq(V a, V b, V x, V y) { return a == b ? x : y; }
DEV V v_min(V a, V b) { return a < b ? a : b; }
DEV V v_max(V a, V b) { return a > b ? a : b; }
DEV V v_abs(V a) { return fabs(a); }
DEV V v_log(V a) { return log(a); }
DEV V v_sqrt(V a) { return sqrt(a); }
DEV V v_rsqrt(V a) { return a == (V)0 ? (V)0 : (V)1 / sqrt(a); }  // Rsqrt(0) = 0
DEV V v_floor(V a) { return floor(a); }
DEV V v_round(V a) { return round(a); }  // halves away from zero, like the CPU kernels
)PRELUDE";

}  // namespace

// The prelude, with the libm primitives (ops/op.hpp) as CUDA's math functions.
const string& cuda_prelude() {
  static const string s = [] {
    string r = kCudaPreludeHead;
#define TESSEL_CUDA_PRIMITIVE(name, ar, value)                       \
  r += ar == 1 ? "DEV V v_" #name "(V x) { return " #name "(x); }\n" \
               : "DEV V v_" #name "(V x, V y) { return " #name "(x, y); }\n";
    TESSEL_LIBM_PRIMITIVES(TESSEL_CUDA_PRIMITIVE)
#undef TESSEL_CUDA_PRIMITIVE
    return r;
  }();
  return s;
}

namespace {

const char* kLanes = "xyzw";

// Values per 16-byte shared-memory vector, and the vector type.
int vec_width(bool f64) { return f64 ? 2 : 4; }
const char* vec_type(bool f64) { return f64 ? "double2" : "float4"; }
// Inner-row stride in shared memory: inner_dim padded to whole vectors.
int padded_dim(const KernelLayout& lay, bool f64) {
  const int w = vec_width(f64);
  return (lay.inner_dim + w - 1) / w * w;
}

// Statements one row's formula takes: the size measure of the rows-per-thread heuristic.
int formula_statements(const ReductionImpl& r, bool f64, const KernelLayout& lay) {
  Emitter em;
  std::vector<string> f, w;
  cuda_gen::emit_row(cuda_gen::row_forms(r), lay, 0, f64, f, w);
  return static_cast<int>(std::count(em.code().begin(), em.code().end(), '\n'));
}

// Rows per thread: R rows share each shared-memory load and give the scheduler R independent
// chains, but their states, outer values and temporaries all stay live in registers. Budget: 64
// registers of state and outer values per thread, and few enough formula statements that R
// copies' temporaries fit beside them (past ~255 registers the kernel spills).
cuda_gen::ReduceCode reduce_code(const ReductionImpl& r, bool f64, CudaSumMode sum) {
  return cuda_gen::ReduceCode(r, sum.scheme, sum.acc_f64 && !f64);
}

// Registers one outer row holds through the inner loop: its state and its outer values.
int row_registers(const ReductionImpl& r, bool f64, const KernelLayout& lay, CudaSumMode sum) {
  return reduce_code(r, f64, sum).state_registers(f64) + lay.outer_dim * (f64 ? 2 : 1);
}

// How the kernel holds its rows. min_blocks: __launch_bounds__'s minimum of resident 256-thread
// blocks, 6 (75 % occupancy on sm_90: at most 40 registers) when the rows' registers leave ~16
// for the pair's temporaries, the tile's address and the loop (the Gaussian sum: 4 rows x 6, at
// 40 registers with no spill; ptxas alone took 48 once the inner loop was unrolled 8 times), else
// 0 (ptxas's choice: bigger states spill at 40). shared_totals: a Sum's double totals live in
// shared memory (flushed once per tile) when that is what brings the rows under the bound (the
// softmax family's rescaling branch spills at 40 registers even then: 56 bytes for LogSumExp).
struct KernelShape {
  int min_blocks = 0;
  bool shared_totals = false;
};
KernelShape kernel_shape(const ReductionImpl& r, bool f64, const KernelLayout& lay, int R,
                         CudaSumMode sum) {
  const int regs = R * row_registers(r, f64, lay, sum);
  const int totals = R * 2 * reduce_code(r, f64, sum).totals();
  if (regs + 16 <= 40) return {6, false};
  const bool sum_family = reduction_info(r.op).family == ReductionFamily::Sum;
  if (sum_family && regs - totals + 16 <= 40) return {6, true};
  return {};
}

// Shared memory bytes per thread of the rows' double totals.
size_t total_bytes(const ReductionImpl& r, bool f64, const KernelLayout& lay, int R,
                   CudaSumMode sum) {
  if (!kernel_shape(r, f64, lay, R, sum).shared_totals) return 0;
  return static_cast<size_t>(R) * reduce_code(r, f64, sum).totals() * 8;
}

// A float32 Sum or softmax-family reduction takes the most rows that keep 75 % occupancy, when 4
// rows do not: their pairs are chains of dependent FP32 operations, which need the warps (the
// gradient of the Gaussian sum, at 4 rows and 37.5 %, issued at half the sum's rate on the H200).
// On sm_90 the gradient reads 12.8 instructions per pair at 4 rows (104 registers, 25 %) and 13.5
// at 2 rows and 75 %; LogSumExp 9.6 at 4 rows (60 registers, 50 %), 10.2 at 2 rows and 75 %.
// float64 keeps its rows (40 registers hold few doubles).
int pick_rows(const ReductionImpl& r, bool f64, const KernelLayout& lay, CudaSumMode sum) {
  const int per_row = row_registers(r, f64, lay, sum);
  const int statements = formula_statements(r, f64, lay);
  int rows = 1;
  if (4 * per_row <= 64 && statements <= 24)
    rows = 4;
  else if (2 * per_row <= 64 && statements <= 96)
    rows = 2;
  const bool chains =
      reduction_info(r.op).family == ReductionFamily::Sum || reduce_code(r, f64, sum).optimistic();
  if (rows == 4 && chains && !f64 && kernel_shape(r, f64, lay, 4, sum).min_blocks == 0 &&
      kernel_shape(r, f64, lay, 2, sum).min_blocks > 0)
    rows = 2;
  return rows;
}

string row_suffix(int row) { return string("_") + to_string(row); }

// tessel_kernel's opening: its arguments, this thread's rows (block-sparse or dense) and their
// outer variables in registers, the parameters, the fold states declared and, for streamed inner
// blocks, resumed.
string kernel_opening(const cuda_gen::RowForms& forms, const KernelLayout& lay, int R,
                      const cuda_gen::ReduceCode& red, KernelShape shape, bool f64) {
  const int DO = lay.outer_dim;
  string s =
      "extern \"C\" __global__ void __launch_bounds__(256" +
      (shape.min_blocks > 0 ? ", " + to_string(shape.min_blocks) : string()) +
      ") tessel_kernel(\n"
      "    const T* __restrict__ X, const T* __restrict__ Y, const T* __restrict__ P, i64 "
      "n_outer,\n"
      "    i64 n_inner, T* __restrict__ out0, i64* __restrict__ outi, void* __restrict__ work,\n"
      "    i64 chunk, const i64* __restrict__ tab, const i64* __restrict__ ivs, int flags,\n"
      "    i64 j_offset) {\n";
  s += "  extern __shared__ __align__(16) unsigned char smem_[];\n  T* ys = (T*)smem_;\n";
  s += "  (void)X; (void)Y; (void)P; (void)out0; (void)outi; (void)ys;\n";
  s += "  const int tid = threadIdx.x, nb = blockDim.x;\n";
  // Block-sparse (tab non-null): this block's rows [ob, oe) reduce over the intervals
  // ivs[2q], ivs[2q + 1] for q in [q0, q1). Dense: all rows, the one interval [jb, je).
  s += "  const i64* tb_ = tab ? tab + 4 * (i64)blockIdx.x : 0;\n";
  s += "  const i64 ob = tb_ ? tb_[0] : 0, oe = tb_ ? tb_[1] : n_outer;\n";
  s += "  const i64 q0 = tb_ ? tb_[2] : 0, q1 = tb_ ? tb_[3] : 1;\n";
  s += "  const i64 i0 = (tb_ ? ob + (i64)tid * " + to_string(R) +
       " : ((i64)blockIdx.x * nb + tid) * " + to_string(R) + ");\n";
  s += "  const bool live = i0 < oe;  // some of this thread's rows exist\n";
  s += "  const i64 jb = (i64)blockIdx.y * chunk, je = jb + chunk < n_inner ? jb + chunk : "
       "n_inner;\n";
  for (int row = 0; row < R; ++row) {
    const string ir = "ir" + to_string(row), ix = "i0 + " + to_string(row);
    s += "  const i64 " + ir + " = " + ix + " < oe ? " + ix + " : oe - 1;  (void)" + ir + ";\n";
    for (const auto& e : lay.vars)
      if (e.cat == Category::I)
        for (int c = 0; c < e.dim; ++c)
          s += "  const V " + var_name(e, row, c) + " = X[" + ir + " * " + to_string(DO) + " + " +
               to_string(e.offset + c) + "];\n";
  }
  for (const auto& e : lay.vars)
    if (e.cat == Category::Param)
      for (int c = 0; c < e.dim; ++c)
        s += "  const V " + var_name(e, 0, c) + " = P[" + to_string(e.offset + c) + "];\n";
  if (shape.shared_totals) {
    // After the tile: this thread's totals at acc_[k * nb + tid] (k: row, then total).
    s += "  double* acc_ = (double*)(smem_ + (i64)nb * " +
         to_string(padded_dim(lay, f64) * (f64 ? 8 : 4)) + ");\n";
    for (int row = 0; row < R; ++row)
      s += red.declare(row_suffix(row), "(acc_ + " + to_string(row * red.totals()) + " * nb + tid)",
                       "nb");
  } else {
    for (int row = 0; row < R; ++row) s += red.declare(row_suffix(row));
  }
  if (forms.factor.valid()) {
    // The Sum's factor of each row: the pairs sum the rest while every factor is finite. An
    // infinite or NaN factor multiplies each term (0 * inf is NaN), which the thread then does
    // per pair, in the rolled loop.
    string fin = "true";
    for (int row = 0; row < R; ++row) {
      const string k = "fk" + row_suffix(row);
      Emitter em;
      const string e = cuda_gen::emit_factor(forms, lay, row);
      s += "  V " + k + ";\n  {\n" + em.code() + "    " + k + " = " + e + ";\n  }\n";
      fin += " && " + k + " - " + k + " == (V)0";
    }
    s += "  const bool fin_ = " + fin + ";\n";
    for (int row = 0; row < R; ++row)
      s += "  const double fd" + row_suffix(row) + " = fin_ ? (double)fk" + row_suffix(row) +
           " : 1.0;\n";
  }
  // Streamed inner blocks (flags & 1): each row resumes from the state the previous block left
  // in `work` (row i at slot i, one block row), so the folds see every inner row in order.
  s += "  if ((flags & 1) && live) {\n    const double* wv = (const double*)work; const i64* wi = "
       "(const i64*)work;\n    const i64 ws = n_outer; (void)wv; (void)wi; (void)ws;\n";
  for (int row = 0; row < R; ++row)
    s += "    if (i0 + " + to_string(row) + " < oe) {\n" +
         red.load(row_suffix(row), "(i0 + " + to_string(row) + ")") + "    }\n";
  s += "  }\n";
  return s;
}

// The body for one inner row jx of the tile: shared loads, then R formulas and their folds
// (`fast`: the softmax family's optimistic fold, ReduceCode::push_fast).
string tile_body(const cuda_gen::RowForms& forms, bool f64, const KernelLayout& lay, int R,
                 const cuda_gen::ReduceCode& red, bool fast = false) {
  const int S = padded_dim(lay, f64), VW = vec_width(f64);
  Emitter em;
  for (int v = 0; v < S / VW; ++v)
    em.raw("        const " + string(vec_type(f64)) + " y" + to_string(v) + "_ = ((const " +
           vec_type(f64) + "*)ys)[jx * " + to_string(S / VW) + " + " + to_string(v) + "];\n");
  for (const auto& e : lay.vars)
    if (e.cat == Category::J)
      for (int c = 0; c < e.dim; ++c) {
        const int k = e.offset + c;
        em.raw("        const V " + var_name(e, 0, c) + " = y" + to_string(k / VW) + "_." +
               kLanes[k % VW] + ";\n");
      }
  std::vector<std::vector<string>> f(R), w(R);
  std::vector<string> rows, a(R);
  for (int row = 0; row < R; ++row) {
    rows.push_back(row_suffix(row));
    cuda_gen::emit_row(forms, lay, row, f64, f[row], w[row], fast ? &a[row] : nullptr,
                       "ml" + rows.back());
  }
  em.raw(fast ? red.push_fast(rows, a, w) : red.push(rows, f, w));
  return em.code();
}

// A tile's other way through, for a thread that cannot take `body`'s: when `skip` holds, the
// tile runs through `body` alone, rolled (a Sum whose factor is not finite: the per-pair
// product); when `redo` holds after the fast loops, `reset` and then `body` run over the tile
// again (the softmax family's careful fold).
struct TileFallback {
  string skip, redo, reset, body;
};

// The walk of the inner intervals, a tile of inner rows at a time through shared memory, each
// row of the tile run through `body`, unrolled, or through the fallback's.
string tile_loop(bool f64, const KernelLayout& lay, int R, const cuda_gen::ReduceCode& red,
                 const string& body, const TileFallback& alt) {
  const int DI = lay.inner_dim, S = padded_dim(lay, f64);
  const int statements = static_cast<int>(std::count(body.begin(), body.end(), '\n'));
  // Unrolled by hand: `#pragma unroll 4` on a loop of unknown trip count got 2 from NVRTC. The
  // copies share the loop's counter, compare and branch (5 instructions per iteration); big
  // bodies gain little and compile longer. A tile's last nj % unroll rows take the rolled loop.
  const int unroll = statements <= 96 ? 8 : statements <= 192 ? 4 : statements <= 400 ? 2 : 1;
  string s = "  for (i64 q = q0; q < q1; ++q) {\n";
  s += "  const i64 js_ = tb_ ? ivs[2 * q] : jb, je_ = tb_ ? ivs[2 * q + 1] : je;\n";
  s += "  for (i64 j0 = js_; j0 < je_; j0 += nb) {\n";
  s += "    const int nj = (int)(je_ - j0 < nb ? je_ - j0 : nb);\n";
  if (DI > 0) {
    const string to =
        DI == S ? "q" : "q / " + to_string(DI) + " * " + to_string(S) + " + q % " + to_string(DI);
    s += "    for (int q = tid; q < nj * " + to_string(DI) + "; q += nb) ys[" + to + "] = Y[j0 * " +
         to_string(DI) + " + q];\n";
  }
  s += "    __syncthreads();\n    if (live) {\n";
  auto row_at = [&](const string& jx, const string& b) {
    string o = "      {\n        const int jx = " + jx + ";\n";
    if (red.needs_index()) o += "        const i64 j = j0 + jx + j_offset;\n";
    return o + b + "      }\n";
  };
  const string rolled = "#pragma unroll 1\n      for (int jj = 0; jj < nj; ++jj)\n";
  if (!alt.skip.empty()) s += "      if (!(" + alt.skip + ")) {\n";
  s += "      int jj = 0;\n";
  if (unroll > 1) {
    s += "      for (; jj + " + to_string(unroll) + " <= nj; jj += " + to_string(unroll) + ") {\n";
    for (int u = 0; u < unroll; ++u) s += row_at("jj + " + to_string(u), body);
    s += "      }\n";
  }
  s += "#pragma unroll 1\n      for (; jj < nj; ++jj)\n" + row_at("jj", body);
  if (!alt.skip.empty()) s += "      } else {\n" + rolled + row_at("jj", alt.body) + "      }\n";
  if (!alt.redo.empty())
    s += "      if (" + alt.redo + ") {\n" + alt.reset + rolled + row_at("jj", alt.body) +
         "      }\n";
  for (int row = 0; row < R; ++row)
    s += red.flush(row_suffix(row), alt.skip.empty() ? "" : "fd" + row_suffix(row));
  s += "    }\n    __syncthreads();  // the tile is read before the next one overwrites it\n  }\n"
       "  }\n";
  return s;
}

// tessel_kernel's closing: the rows' folds closed, then finished into the outputs or left as
// partial states in `work`.
string kernel_closing(int R, const cuda_gen::ReduceCode& red) {
  string s = "  if (!live) return;\n";
  // A row whose candidates were all NaN takes the first index it reduced over (the CPU's rule).
  s += "  const i64 jc = (tb_ ? (q0 < q1 ? ivs[2 * q0] : 0) : jb) + j_offset, "
       "jd = (tb_ ? (q0 < q1 ? ivs[2 * q0 + 1] : 0) : je) + j_offset;  (void)jc; (void)jd;\n";
  for (int row = 0; row < R; ++row) s += red.close(row_suffix(row), "jc", "jd");
  // flags & 2: leave the states in `work` for the next inner block instead of finishing.
  s += "  if (gridDim.y == 1 && !(flags & 2)) {\n";
  for (int row = 0; row < R; ++row)
    s += "    if (i0 + " + to_string(row) + " < oe) {\n" +
         red.finish(row_suffix(row), "(i0 + " + to_string(row) + ")") + "    }\n";
  s += "  } else {  // partial states of inner rows [jb, je) for tessel_combine\n";
  s += "    double* wv = (double*)work; i64* wi = (i64*)work; (void)wv; (void)wi;\n";
  s += "    const i64 ws = (i64)gridDim.y * n_outer, at = (i64)blockIdx.y * n_outer + i0;\n";
  for (int row = 0; row < R; ++row)
    s += "    if (i0 + " + to_string(row) + " < n_outer) {\n" +
         red.store(row_suffix(row), "at + " + to_string(row)) + "    }\n";
  s += "  }\n}\n";
  return s;
}

// The second pass: merges the split_j partial states of each row, in inner-row order.
string combine_kernel(const cuda_gen::ReduceCode& red) {
  string s =
      "extern \"C\" __global__ void __launch_bounds__(256) tessel_combine(\n"
      "    const void* __restrict__ work, i64 n_outer, int split, T* __restrict__ out0,\n"
      "    i64* __restrict__ outi) {\n";
  s += "  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n_outer) return;\n";
  s += "  const double* wv = (const double*)work; const i64* wi = (const i64*)work;\n";
  s += "  const i64 ws = (i64)split * n_outer;\n  (void)wv; (void)wi; (void)out0; (void)outi;\n";
  s += red.declare("_a") + red.declare("_b");
  s += "  {\n" + red.load("_a", "i") + "  }\n";
  s += "  for (int y = 1; y < split; ++y) {\n" + red.load("_b", "(i64)y * n_outer + i");
  s += red.merge("_a", "_b") + "  }\n";
  s += red.finish("_a", "i") + "}\n";
  return s;
}

string kernel_source(const ReductionImpl& r, bool f64, const KernelLayout& lay, int R,
                     CudaSumMode sum) {
  const cuda_gen::ReduceCode red = reduce_code(r, f64, sum);
  string s = "// generated by tessel (CUDA)\n#define TESSEL_F64 " + to_string(f64 ? 1 : 0) + "\n";
  s += cuda_prelude();
  s += red.helpers();
  const cuda_gen::RowForms forms = cuda_gen::row_forms(r);
  s += kernel_opening(forms, lay, R, red, kernel_shape(r, f64, lay, R, sum), f64);
  TileFallback alt;
  string body;
  if (forms.factor.valid()) {
    alt = {"!fin_", "", "", tile_body(cuda_gen::unfactored(forms), f64, lay, R, red)};
  } else if (red.optimistic() && !f64) {
    std::vector<string> rows;
    for (int row = 0; row < R; ++row) rows.push_back(row_suffix(row));
    alt = {"", red.redo(rows), red.reset(rows), tile_body(forms, f64, lay, R, red)};
    body = tile_body(forms, f64, lay, R, red, true);
  }
  if (body.empty()) body = tile_body(forms, f64, lay, R, red);
  s += tile_loop(f64, lay, R, red, body, alt);
  s += kernel_closing(R, red);
  s += combine_kernel(red);
  return s;
}

}  // namespace

std::string generate_cuda_kernel(const ReductionImpl& r, bool f64, KernelLayout& lay,
                                 int rows_per_thread, CudaSumMode sum) {
  if (!kernel_layout(r, lay)) return {};
  const int R = rows_per_thread > 0 ? rows_per_thread : pick_rows(r, f64, lay, sum);
  return kernel_source(r, f64, lay, R, sum);
}

int cuda_rows_per_thread(const ReductionImpl& r, bool f64, CudaSumMode sum) {
  KernelLayout lay;
  return kernel_layout(r, lay) ? pick_rows(r, f64, lay, sum) : 1;
}

CudaRangeTable cuda_range_table(const std::vector<CudaRowRange>& ranges, int64_t n_outer,
                                int64_t rows_per_block) {
  CudaRangeTable t;
  std::vector<CudaRowRange> sorted;
  for (const CudaRowRange& r : ranges)
    if (r.end > r.begin) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(),
            [](const CudaRowRange& a, const CudaRowRange& b) { return a.begin < b.begin; });
  auto add = [&](int64_t b, int64_t e, int64_t q0, int64_t q1) {
    for (int64_t r = b; r < e; r += rows_per_block)
      t.blocks.insert(t.blocks.end(), {r, std::min(e, r + rows_per_block), q0, q1});
  };
  int64_t covered = 0;
  for (const CudaRowRange& r : sorted) {
    add(covered, std::min(r.begin, n_outer), 0, 0);  // a gap: rows that reduce over nothing
    const int64_t q0 = static_cast<int64_t>(t.ivs.size() / 2);
    if (r.iv)
      for (size_t k = 0; k + 1 < r.iv->size(); k += 2)
        if ((*r.iv)[k + 1] > (*r.iv)[k]) t.ivs.insert(t.ivs.end(), {(*r.iv)[k], (*r.iv)[k + 1]});
    add(std::max(r.begin, covered), std::min(r.end, n_outer), q0,
        static_cast<int64_t>(t.ivs.size() / 2));
    covered = std::max(covered, std::min(r.end, n_outer));
  }
  add(covered, n_outer, 0, 0);
  return t;
}

CudaKernelPlan plan_cuda_kernel(const ReductionImpl& r, bool f64, int64_t n_outer, int64_t n_inner,
                                const CudaDeviceCaps& caps, const CudaPlanOverrides& force,
                                CudaSumMode sum) {
  CudaKernelPlan plan;
  if (!kernel_layout(r, plan.layout)) return plan;
  plan.rows_per_thread =
      force.rows_per_thread > 0 ? force.rows_per_thread : pick_rows(r, f64, plan.layout, sum);
  plan.source = kernel_source(r, f64, plan.layout, plan.rows_per_thread, sum);

  // Block: 128 threads when each holds several rows (256-512 rows per block), 256 with one row
  // per thread so that a tile's shared loads and barriers still serve 256 rows. Shrunk while a
  // tile of inner rows does not fit in shared memory (wide float64 inner variables).
  const size_t row_bytes = static_cast<size_t>(padded_dim(plan.layout, f64)) * (f64 ? 8 : 4) +
                           total_bytes(r, f64, plan.layout, plan.rows_per_thread, sum);
  plan.block = force.block > 0 ? force.block : plan.rows_per_thread == 1 ? 256 : 128;
  while (force.block <= 0 && plan.block > 32 && plan.block * row_bytes > caps.max_shared_per_block)
    plan.block /= 2;
  if (plan.block * row_bytes > caps.max_shared_per_block)
    detail::fail("evaluate", "the inner variables have ", plan.layout.inner_dim,
                 " components per row: a tile of ", plan.block, " rows needs ",
                 plan.block * row_bytes, " bytes of shared memory, more than the GPU's ",
                 caps.max_shared_per_block);
  plan.shared_bytes = plan.block * row_bytes;

  // Split the inner rows across block rows when the outer rows alone make few blocks. Blocks of
  // one launch take equal time, so a launch of W waves (W = blocks / resident blocks) runs
  // ceil(W) waves: 1.5 waves cost as much as 2. Aim at >= 4 waves even at full residency (2048
  // threads per SM), where the last partial wave costs at most ~20%, whatever the kernel's real
  // occupancy. Limits: chunks of at least kMinTiles tiles (a block's fixed costs, outer loads
  // and the state store, stay small beside its pairs), a workspace of at most kMaxWorkspace
  // (memory the caller did not ask for: K-best lists of many rows stay unsplit), and gridDim.y's
  // 65535.
  constexpr int64_t kMinTiles = 4;
  constexpr int64_t kMaxWorkspace = int64_t{64} << 20;
  const int64_t rows_per_block = int64_t{plan.block} * plan.rows_per_thread;
  const int64_t blocks_x = std::max<int64_t>(1, (n_outer + rows_per_block - 1) / rows_per_block);
  const int64_t want = 4 * std::max(1, caps.sm_count) * std::max(1, 2048 / plan.block);
  const int64_t state_bytes = int64_t{cuda_gen::ReduceCode(r).slots()} * 8;
  int64_t split = 1;
  if (force.split_j > 0) {
    split = force.split_j;
  } else if (blocks_x < want) {
    split = (want + blocks_x - 1) / blocks_x;
    split = std::min(split, n_inner / (kMinTiles * plan.block));
    split = std::min(split, kMaxWorkspace / std::max<int64_t>(1, state_bytes * n_outer));
    split = std::clamp<int64_t>(split, 1, 65535);
  }
  plan.split_j = static_cast<int>(split);
  if (plan.split_j > 1)
    plan.workspace_bytes = static_cast<size_t>(state_bytes) * static_cast<size_t>(plan.split_j) *
                           static_cast<size_t>(n_outer);
  return plan;
}

}  // namespace tessel
