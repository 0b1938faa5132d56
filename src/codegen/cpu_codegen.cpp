// Reduction spec -> C++ kernel source: straight-line SIMD code for R outer rows × W inner lanes.
//
// The loop nest is fixed: for each block of R outer rows (values broadcast into registers), walk
// the packed inner tiles (W lanes each, SoA so a component is one vector load), evaluate the
// formula for every row with the tile's vectors, and fold it into per-lane accumulators. The
// formula itself comes from each op's apply<Expr>, the same definition the interpreter runs.
#include "codegen/cpu_codegen.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <unordered_map>

#include "codegen/cpu_gen.hpp"
#include "codegen/emitter.hpp"
#include "codegen/hoist.hpp"
#include "ops/op.hpp"
#include "reduction/fold_rules.hpp"
#include "reduction/reduction_info.hpp"

namespace tessel {

namespace {

using std::string;
using std::to_string;

// The stack the block states saved between inner chunks may take (see generate_cpu_kernel).
constexpr int64_t kStateBytes = 32 << 10;

const char* kKernelSupport = R"SUPPORT(
struct KernelArgs {
  const void* outer;
  const void* inner;
  const void* params;
  long long o_begin, o_end, n_inner;
  void* out[2];
  const long long* iv;  // intervals [iv[2q], iv[2q+1]) of inner indices to reduce over
  long long n_iv;
  long long chunk;  // inner indices per chunk, a multiple of W * BLK; 0: one chunk
  long long j_lo, j_hi;  // the inner indices reduced over: [j_lo, j_hi) within the intervals
  void* state_out;       // non-null: each block's final state goes there, not to the outputs
};
)SUPPORT";

}  // namespace

bool kernel_layout(const ReductionImpl& r, KernelLayout& lay) {
  const ReductionInfo& info = reduction_info(r.op);
  if (info.is_indexed() || !r.slot_vars.empty() || kselect_too_large(r)) return false;
  std::set<int> used;
  for (const Formula& f : {r.f, r.weight})
    if (f.valid())
      for (const Formula& v : variables(f)) used.insert(v.node().var_index());
  lay = KernelLayout{};
  for (const VarSlot& v : r.vars) {
    if (!used.count(v.index)) continue;
    if (v.kind == DType::Int64) return false;
    const Category kc = v.cat == Category::Param ? Category::Param
                        : v.cat == r.outer()     ? Category::I
                                                 : Category::J;
    int& off = kc == Category::I   ? lay.outer_dim
               : kc == Category::J ? lay.inner_dim
                                   : lay.param_dim;
    lay.vars.push_back({v.index, kc, v.dim, off});
    off += v.dim;
  }
  return true;
}

namespace {

using cpugen::Gen;

// Vector registers the target has: 32 with AVX-512 and on aarch64 (NEON), else 16. The kernel is
// compiled for the machine that runs it, so the host's architecture decides.
int vector_registers(const CpuKernelSpec& spec) {
#if defined(__aarch64__)
  (void)spec;
  return 32;
#else
  return spec.vbytes == 64 ? 32 : 16;
#endif
}

// Registers a formula's polynomial constants hold for the whole loop. aarch64's FMLA takes no
// memory operand, so each coefficient of an exp or a trigonometric polynomial (clamps, log2(e),
// the rounding shift, ln2's two halves, the polynomial: 13 in float32, 19 in float64) lives in a
// register; x86 reads them as memory operands. `tessel bench --asm` on aarch64, spills and
// instructions per pair at 4 / 2 / 1 rows: float32 gauss-sum 10, 8.75 / 0, 8.5 / 0, 9.9; its
// gradient 41, 13.1 / 7, 10.8 / 0, 9.75; LogSumExp 5, 3.19 / 0, 3.25 / 0, 3.88; float64 gauss-sum
// at 2 / 1 rows 5, 31.75 / 0, 29.5, LogSumExp 0, 6.5 / 0, 8.25. Without these registers the model
// chose the spilling 4, 2, 4 and 2 rows. (A softmax's own exp runs in its second pass: its main
// loop keeps fewer constants.)
int constant_registers(const Gen& g) {
#if defined(__aarch64__)
  static const std::set<OpCode> kPolynomialOps{
      OpCode::Exp,          OpCode::Log,         OpCode::XLogX,    OpCode::Powf,
      OpCode::Sin,          OpCode::Cos,         OpCode::Asin,     OpCode::Acos,
      OpCode::Atan,         OpCode::Atan2,       OpCode::SinXDivX, OpCode::ComplexExp,
      OpCode::ComplexExp1j, OpCode::ComplexAngle};
  for (const Formula* f : {&g.r.f, &g.r.weight}) {
    if (!f->valid()) continue;
    for (const NodePtr& n : topo_order(f->ptr()))
      if (kPolynomialOps.count(n->op)) return g.spec.f64 ? 19 : 13;
  }
  return g.fam == ReductionFamily::SoftMax ? 13 : 0;
#else
  (void)g;
  return 0;
#endif
}

// Rows per block, from the register file. A block keeps per row its outer coordinates and its
// accumulators in registers, and per tile the inner coordinates; the formula's own temporaries
// take about `temps` more. More rows give more independent work per tile load, but past the
// register file the compiler spills accumulators and reloads coordinates inside the hot loop
// (measured with `tessel bench --asm`), so take the most rows that still fit: 4, 2 or 1.
int rows_per_block(const CpuKernelSpec& spec, const Gen& g, ReductionFamily fam) {
  if (fam == ReductionFamily::KSelect) return 1;
  // AVX2's 16 registers: a second row's coordinates and accumulators push the formula's constants
  // (an exp's dozen) to the stack, reloaded in the hot loop. One row with two tiles in flight has
  // fewer instructions and spills per pair where the model chose two (`tessel bench --asm --simd
  // avx2`: gauss-sum 3.69 -> 3.31, 7 -> 2 spills; sin-sum 3.44 -> 1.88, 30 -> 15). SSE2, also 16
  // registers but without FMA, keeps the model.
  if (spec.vbytes == 32) return 1;
  const int temps = 4 + constant_registers(g);
  const int acc_regs =
      fam == ReductionFamily::Sum
          ? g.D * (spec.scheme == SumScheme::Kahan ? 2 : 1) * (spec.acc_f64 ? 2 : 1)
      : fam == ReductionFamily::Select ? 2 * g.D
                                       : 2 + std::max(g.WD, 1);
  const int regs = vector_registers(spec);
  const int per_row = g.lay.outer_dim + acc_regs;
  for (int rows : {4, 2})
    if (rows * per_row + g.lay.inner_dim + temps <= regs) return rows;
  // A high-dimensional formula: the coordinates alone outnumber the registers, so they come from
  // L1 as operands, one load per use, whatever the rows. Then more rows share each inner load;
  // a row keeps its accumulators and the partial sums of its dot products (ops/vector.cpp's
  // sum_terms: 4) in registers. (A formula that misses by a few registers keeps one row: its
  // coordinates mostly stay in registers, which measured better than two rows spilling.)
  constexpr int kPartials = 4;
  if (g.lay.outer_dim + g.lay.inner_dim > regs)
    for (int rows : {4, 2})
      if (rows * (acc_regs + kPartials) + temps <= regs) return rows;
  return 1;
}

Gen make_gen(const CpuKernelSpec& spec, KernelLayout& lay) {
  const ReductionImpl& r = *spec.r;
  const ReductionInfo& info = reduction_info(r.op);
  Gen g{spec, r,           info,      info.family,
        lay,  lanes(spec), r.f.dim(), r.weight.valid() ? r.weight.dim() : 0,
        1,    {}};
  for (const auto& e : lay.vars) g.by_index[e.index] = &e;
  g.R = rows_per_block(spec, g, info.family);
  return g;
}

}  // namespace

size_t estimate_cpu_kernel_bytes(const CpuKernelSpec& spec) {
  KernelLayout lay;
  if (!kernel_layout(*spec.r, lay)) return 0;
  // What generate_cpu_kernel writes per component (measured): an outer coordinate's broadcast
  // (a line per row, ~40 bytes), an inner coordinate's load (a line in each of the three tile
  // bodies), an op's statements (~25 bytes per row and tile body, for each component of its
  // arguments or of its result, whichever is more: SqDist of two 6000-vectors writes 3 * 6000),
  // and an output component's accumulators (folded in each tile body, declared, saved, restored,
  // merged and finished: ~1 KB per row; a wide output's loops, only its values gathered into an
  // array in each tile body).
  constexpr size_t kOuter = 40, kInner = 3 * 30, kTemp = 3 * 25, kOutput = 1000, kWideOutput = 30;
  const Gen g = make_gen(spec, lay);
  const size_t rows = static_cast<size_t>(g.R);
  size_t bytes = size_t(lay.outer_dim) * kOuter * rows + size_t(lay.inner_dim) * kInner +
                 size_t(lay.param_dim) * kOuter +
                 size_t(spec.r->f.dim()) * (g.wide_out() ? kWideOutput : kOutput) * rows;
  std::set<const Node*> seen;
  for (const Formula& f : {spec.r->f, spec.r->weight}) {
    if (!f.valid()) continue;
    for (const NodePtr& n : topo_order(f.ptr())) {
      if (!seen.insert(n.get()).second || n->args.empty()) continue;
      size_t in = 0;
      for (const NodePtr& a : n->args) in += size_t(a->dim);
      bytes += std::max(size_t(n->dim), in) * kTemp * rows;
    }
  }
  return bytes;
}

namespace {

// Tiles per block: the float run length of block sums and softmax sums, at every width.
constexpr int kBlockTiles = kSumBlockLaneTerms;

// The kernel's preamble: its reduction and settings, the prelude, the fold rules and the state
// struct a block of rows saves between inner chunks.
string kernel_preamble(const CpuKernelSpec& spec, const Gen& g) {
  string s =
      "// generated by tessel: " +
      Reduction(std::shared_ptr<const ReductionImpl>(spec.r, [](const ReductionImpl*) {})).str() +
      "\n";
  s += "#define TESSEL_F64 " + to_string(spec.f64 ? 1 : 0) + "\n";
  s += "#define TESSEL_VBYTES " + to_string(spec.vbytes) + "\n";
  s += "#define BLK " + to_string(kBlockTiles) + "\n";
  s += cpu_prelude();
  s += kKernelSupport;
  s += "#define FOLD_QUAL static inline\n#define FOLD_INF __builtin_inf()\n"
       "#define FOLD_EXP __builtin_exp\n";
  s += fold_rules_source();
  s += g.state_struct();
  s += "extern \"C\" long long tessel_state_bytes(void) { return sizeof(BlockState); }\n";
  return s;
}

// tessel_kernel's opening: its arguments and parameters, the loops over runs of row blocks,
// inner chunks and row blocks, the block's outer rows in registers and its restored state.
string kernel_opening(const ReductionImpl& r, const KernelLayout& lay, const Gen& g) {
  string s = "extern \"C\" void tessel_kernel(const struct KernelArgs* a) {\n";
  s += "  TESSEL_FTZ_ENTER\n";
  s += "  const T* X = (const T*)a->outer; const T* Y = (const T*)a->inner; const T* P = (const "
       "T*)a->params;\n";
  s += "  T* out0 = (T*)a->out[0]; i64* outi = (i64*)a->out[" +
       to_string(r.num_outputs() == 2 ? 1 : 0) +
       "];\n  (void)X; (void)Y; (void)P; (void)out0; (void)outi;\n";
  s += "  VI lane_ = {}; for (int l = 0; l < W; ++l) lane_[l] = (TI)l;\n";
  for (const auto& e : lay.vars)
    if (e.cat == Category::Param)
      s += g.declare(
          e, 0, "  ", [&](int c) { return "bc(P[" + to_string(e.offset + c) + "])"; },
          [&](const string& c) { return "bc(P[" + to_string(e.offset) + " + " + c + "])"; });
  // Inner chunks. Past a few hundred KiB the packed inner tiles no longer stay in L2 while a
  // block of rows walks them, and every block would stream them again from memory. So the inner
  // range is cut into chunks (KernelArgs::chunk, chosen by the launcher), and a run of row blocks
  // (whose states fit in sb_, on the stack) goes through one chunk before the next: each block
  // saves its state at the end of a chunk and restores it at the start of the next. One chunk
  // (small inputs) runs as if there were none. Chunks are whole tile blocks: no masked tiles.
  s += "  const i64 JC = a->chunk, jl = a->j_lo, jh = a->j_hi;\n";
  s += "  const i64 n_chunks = JC > 0 && jh - jl > JC ? (jh - jl + JC - 1) / JC : 1;\n";
  s += "  enum { SB = sizeof(BlockState) < " + to_string(kStateBytes) + " ? " +
       to_string(kStateBytes) + " / sizeof(BlockState) : 1 };\n";
  s += "  BlockState sb_[SB];\n";
  s +=
      "  const i64 IC = n_chunks > 1 ? (i64)SB * " + to_string(g.R) + " : a->o_end - a->o_begin;\n";
  s += "  for (i64 ib = a->o_begin; ib < a->o_end; ib += IC) {\n";
  s += "  const i64 ie = ib + IC < a->o_end ? ib + IC : a->o_end;\n";
  s += "  for (i64 ch = 0; ch < n_chunks; ++ch) {\n";
  s += "  const i64 cs = jl + ch * JC, ce = ch + 1 < n_chunks ? cs + JC : jh;\n";
  s += "  for (i64 i0 = ib; i0 < ie; i0 += " + to_string(g.R) + ") {\n";
  s += "    BlockState& st = sb_[n_chunks > 1 ? (i0 - ib) / " + to_string(g.R) +
       " : 0]; (void)st;\n";
  for (int row = 0; row < g.R; ++row) {
    s += "    const i64 ir" + to_string(row) + " = i0 + " + to_string(row) + " < a->o_end ? i0 + " +
         to_string(row) + " : a->o_end - 1;\n";
    for (const auto& e : lay.vars)
      if (e.cat == Category::I)
        s += g.declare(
            e, row, "    ",
            [&](int c) {
              return "bc(X[ir" + to_string(row) + " * " + to_string(lay.outer_dim) + " + " +
                     to_string(e.offset + c) + "])";
            },
            [&](const string& c) {
              return "bc(X[ir" + to_string(row) + " * " + to_string(lay.outer_dim) + " + " +
                     to_string(e.offset) + " + " + c + "])";
            });
  }
  s += g.declarations();
  s += "    if (ch > 0) {\n" + g.state_copy(false) + "    }\n";
  return s;
}

// What ends a block of tiles: a SoftMax rescale and the float block sums folded into their
// float64 accumulators.
string block_end(const Gen& g, bool softmax) {
  string end_block;
  if (softmax) {
    end_block += g.block_end();
    for (int row = 0; row < g.R; ++row)
      end_block += "      bm_" + to_string(row) + " = " + g.acc("mv", row, 0) + ";\n";
  }
  if (g.block_sum())
    for (int row = 0; row < g.R; ++row)
      end_block += g.per_component([&](const string& c) {
        return "      " + g.oacc("acc", row, c) + " += __builtin_convertvector(" +
               g.oacc("blk", row, c) + ", VD); " + g.oacc("blk", row, c) + " = (V){};\n";
      });
  end_block += "      nq_ = 0;\n";
  return end_block;
}

// The walk of the block's inner intervals within the chunk: each interval [js, je) of inner
// indices as a masked head tile, full tiles, a masked tail tile.
string interval_walk(const KernelLayout& lay, const Gen& g, ReductionFamily fam) {
  const string tile_setup = "    const T* yt = Y + t * " + to_string(lay.inner_dim * g.W) +
                            "; (void)yt;\n    const VI tv = (VI){} + (TI)t; (void)tv;\n";
  // A block holds up to kBlockTiles tiles of one row group, whatever intervals they come from, so
  // that short block-sparse intervals do not pay a block's end (a rescale, a float64 flush)
  // each: nq_ counts the tiles in the open block. SoftMax masked tiles are applied at once, so
  // the buffered tiles go first.
  const bool softmax = fam == ReductionFamily::SoftMax;
  const string end_block = block_end(g, softmax);
  const string flush_before_masked = softmax ? "    if (nq_) {\n" + end_block + "    }\n" : "";
  const string count_masked =
      g.block_sum() ? "    if (++nq_ == " + to_string(kBlockTiles) + ") {\n" + end_block + "    }\n"
                    : "";
  string s = "    i64 nq_ = 0; (void)nq_;\n";
  if (softmax)
    for (int row = 0; row < g.R; ++row)
      s += "    bm_" + to_string(row) + " = " + g.acc("mv", row, 0) + ";\n";
  s += "    for (i64 q = 0; q < a->n_iv; ++q) {\n";
  s += "    const i64 js = a->iv[2 * q] > cs ? a->iv[2 * q] : cs;\n";
  s += "    const i64 je = a->iv[2 * q + 1] < ce ? a->iv[2 * q + 1] : ce;\n    if (js >= je) "
       "continue;\n";
  s += "    i64 ts = js / W; const i64 tl = (je - 1) / W, tf = je / W;\n";
  s += "    if (js % W || (ts == tl && je % W)) {\n" + flush_before_masked +
       "    const i64 t = ts;\n";
  s += "    const VI valid = (lane_ >= (TI)(js - t * W)) & (lane_ < (TI)(je - t * W));\n";
  s += tile_setup + g.tile_body(true) + count_masked + "    ++ts;\n    }\n";
  s += "    for (i64 tb = ts; tb < tf;) {\n";
  s += "      const i64 q0_ = nq_, te = tb + (" + to_string(kBlockTiles) + " - q0_) < tf ? tb + (" +
       to_string(kBlockTiles) + " - q0_) : tf; (void)q0_;\n";
  // One row's tile is a long dependent chain (the exp alone is ~10 deep): with a single row, two
  // tiles per iteration give the core two independent chains, as two rows would (measured equal).
  if (g.R == 1) s += "#pragma GCC unroll 2\n";
  s += "      for (i64 t = tb; t < te; ++t) {\n" + tile_setup;
  s += g.tile_body(false);
  s += "      }\n";
  s += "      nq_ += te - tb; tb = te;\n";
  s += "      if (nq_ == " + to_string(kBlockTiles) + ") {\n" + end_block + "      }\n";
  s += "    }\n";
  s += "    if (je % W && tf >= ts) {\n" + flush_before_masked + "    const i64 t = tf;\n";
  s += "    const VI valid = lane_ < (TI)(je - t * W);\n";
  s += tile_setup + g.tile_body(true) + count_masked;
  s += "    }\n    }\n";
  s += "    if (nq_) {\n" + end_block + "    }\n";
  return s;
}

// tessel_kernel's closing: the block's state saved for the next chunk or for tessel_merge, or
// its outputs finished.
string kernel_closing(const Gen& g) {
  string s = "    if (ch + 1 < n_chunks) {\n" + g.state_copy(true) + "      continue;\n    }\n";
  s += "    if (a->state_out) {\n      BlockState& so = ((BlockState*)a->state_out)[(i0 - "
       "a->o_begin) / " +
       to_string(g.R) + "];\n" + g.state_copy(true, "so") + "      continue;\n    }\n";
  for (int row = 0; row < g.R; ++row) s += g.finish(row);
  s += "  }\n  }\n  }\n  TESSEL_FTZ_LEAVE\n}\n";
  return s;
}

// The rows' states from n_parts kernels run over consecutive inner ranges (state_out), folded
// in order and finished into the outputs.
string merge_function(const ReductionImpl& r, const Gen& g) {
  string s =
      "extern \"C\" void tessel_merge(const struct KernelArgs* a, const void* const* parts, "
      "int n_parts) {\n  TESSEL_FTZ_ENTER\n";
  s += "  T* out0 = (T*)a->out[0]; i64* outi = (i64*)a->out[" +
       to_string(r.num_outputs() == 2 ? 1 : 0) + "];\n  (void)out0; (void)outi;\n";
  s += "  for (i64 i0 = a->o_begin; i0 < a->o_end; i0 += " + to_string(g.R) + ") {\n";
  s += "    const i64 b_ = (i0 - a->o_begin) / " + to_string(g.R) + ";\n";
  s += g.declarations();
  s += "    { const BlockState& st = ((const BlockState*)parts[0])[b_];\n" + g.state_copy(false) +
       "    }\n";
  s += "    for (int p_ = 1; p_ < n_parts; ++p_) {\n      const BlockState& o_ = ((const "
       "BlockState*)parts[p_])[b_];\n";
  for (int row = 0; row < g.R; ++row) s += g.merge_state(row);
  s += "    }\n";
  for (int row = 0; row < g.R; ++row) s += g.finish(row);
  s += "  }\n  TESSEL_FTZ_LEAVE\n}\n";
  return s;
}

}  // namespace

std::string generate_cpu_kernel(const CpuKernelSpec& spec, KernelLayout& lay) {
  const ReductionImpl& r = *spec.r;
  if (!kernel_layout(r, lay)) return {};
  Gen g = make_gen(spec, lay);
  g.f = hoist_invariant_factors(r.f, r.inner());
  g.w = hoist_invariant_factors(r.weight, r.inner());
  {
    Emitter probe;
    std::vector<Expr> fv, wv;
    g.emit_formulas(0, fv, wv);
    g.loops = probe.code().find("    for (int q") != string::npos;
  }
  return kernel_preamble(spec, g) + kernel_opening(r, lay, g) +
         interval_walk(lay, g, reduction_info(r.op).family) + kernel_closing(g) +
         merge_function(r, g);
}

}  // namespace tessel
