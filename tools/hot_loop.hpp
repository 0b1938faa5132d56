// Finds the hot loop in compiler assembly (g++/clang++ -S, x86-64 AT&T or aarch64) and counts
// what one iteration executes: instructions, FP arithmetic, and loads/stores that hit the stack.
#pragma once

#include <string>
#include <vector>

namespace tessel::cli {

enum class AsmArch { X86_64, AArch64 };

// x86-64 when the text names %-registers (AT&T syntax), else aarch64.
AsmArch guess_asm_arch(const std::string& text);

struct HotLoop {
  int instructions = 0;  // one iteration, the back-edge branch included
  int fp_vector = 0;     // vector (packed) FP arithmetic: add, sub, mul, div, FMA, min, max, ...
  int fp_scalar = 0;     // scalar FP arithmetic (one lane)
  int fma = 0;           // fused multiply-adds among the two above
  int mul_vector = 0;    // vector multiplies and FMAs (only a core's multiply/FMA pipes run them)
  int mul_scalar = 0;    // scalar ones
  int stack_loads = 0;   // instructions reading a stack slot (spill reloads)
  int stack_stores = 0;  // instructions writing one (spill stores)
  int first_line = 0;    // 1-based line of the loop's first instruction in the text
  int last_line = 0;     // 1-based line of its back-edge branch
  int source_line = 0;   // the source line of that branch (from `.loc 1 LINE`; 0 without -g)
  int nested = 0;        // loops inside this one: their instructions are counted once, as written
  int calls = 0;         // call instructions (e.g. libm per lane where a level lacks the vector op)
  int spills() const { return stack_loads + stack_stores; }
  int fp() const { return fp_vector + fp_scalar; }
};

// Every loop laid out as one contiguous range entered only through its header label (the
// compiler's natural loops), in text order.
std::vector<HotLoop> all_loops(const std::string& text, AsmArch arch);
// Those of them with no loop inside (nested == 0).
std::vector<HotLoop> innermost_loops(const std::string& text, AsmArch arch);

// Loops the compiler laid out in pieces (rotated, with a rare path inline and the usual path
// jumping around it, so that no contiguous range is entered only through its header): for each
// backward branch of one of `source_lines`, the fewest instructions that run from its target back
// to it, i.e. one iteration of the usual path (a rare path does more work), in text order.
std::vector<HotLoop> branch_cycles(const std::string& text, AsmArch arch,
                                   const std::vector<int>& source_lines);

// The hot loop: a loop laid out as one contiguous range entered only through its header label
// (the compiler's natural loops), innermost (no such loop inside it), with the most instructions.
// For a generated kernel that is the full-tile loop: its body is straight-line SIMD code, while
// the masked head/tail tiles run once per interval. Stack slots are addressed through rsp (x86-64)
// or sp (aarch64), and through rbp / x29 when the function sets it up as its frame pointer (both
// are ordinary registers otherwise). Throws std::runtime_error when the text holds no loop.
HotLoop find_hot_loop(const std::string& text, AsmArch arch);

// The FP-slot bound of a kernel: the most (i, j) pairs per second its hot loops' FP instructions
// allow at the probed peaks. Every FP instruction takes one FP pipe slot (at most `fp_peak` lane
// slots per second, the larger of the two probes), and with an FMA instruction at the level the
// multiplies and FMAs take the multiply/FMA pipes' slots (at most `fma_peak`). Loads, integer
// work and shuffles are left out, so it bounds from above.
double bound_pairs_per_s(double fp_ops_per_pair, double mul_ops_per_pair, double fma_peak,
                         double fp_peak, bool has_fma);

}  // namespace tessel::cli
