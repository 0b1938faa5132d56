// Reads NVIDIA SASS listings (nvdisasm or cuobjdump -sass) and ptxas -v reports: the hot loop of
// a generated CUDA kernel, its instructions by class, registers, spills and occupancy on sm_90.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessel::cli {

// What an instruction costs where: FP32 pipes (FFMA, FADD, FMUL and the other FP32 operations:
// compares, min/max, selects), FP64 and conversions, the MUFU unit (EX2, LG2, RCP...), shared
// loads, local memory (spills), and the rest (integer, moves, branches, barriers, global memory).
enum class SassClass : uint8_t { Ffma, Fadd, Fmul, Fp32Other, Fp64, Mufu, Lds, Local, Other };
constexpr size_t kSassClasses = 9;
const char* sass_class_name(SassClass c);         // "ffma", "fadd", ..., "other"
SassClass sass_class(const std::string& opcode);  // from the opcode with its modifiers

struct SassCounts {
  std::array<int, kSassClasses> by_class{};
  int mufu_ex2 = 0;  // MUFU.EX2 among Mufu: one per exp of the formula
  int total() const;
  int operator[](SassClass c) const { return by_class[static_cast<size_t>(c)]; }
  void add(const SassCounts& o);
};

struct SassInsn {
  int64_t address = 0;
  std::string predicate;  // "@P0", "@!P1" or ""
  std::string opcode;     // with modifiers: "MUFU.EX2", "LDS.128", "BRA"
  std::string operands;
  int64_t target = -1;  // a branch's target address; -1 when not a direct branch
};

// One function of a listing: nvdisasm's `.text.NAME` sections or cuobjdump's `Function : NAME`.
struct SassFunction {
  std::string name;
  std::vector<SassInsn> insns;  // in address order
};
std::vector<SassFunction> parse_sass(const std::string& text);
// The function named `name`; throws std::runtime_error naming the ones there are otherwise.
const SassFunction& sass_function(const std::vector<SassFunction>& fs, const std::string& name);

// A loop: a backward branch and the instructions from its target to it, in layout order.
struct SassLoop {
  int head = 0, back = 0;  // indices of the first instruction and of the backward branch
  int nested = 0;          // loops strictly inside this one
  SassCounts all;          // every instruction of the range once
  // The instructions of one iteration that skips the blocks behind its forward branches (taken
  // every time): a K-best insertion or a rare fix-up is left out, as at large M, where it almost
  // never runs. Equal to `all` for a straight-line body.
  SassCounts path;
  int size() const { return back - head + 1; }
};
std::vector<SassLoop> sass_loops(const SassFunction& f);

// The inner loop over the rows of a shared-memory tile and what surrounds it.
struct SassHotLoop {
  SassLoop loop;
  int lds_per_iter = 0;  // LDS instructions on its path: vectors_per_j of them per inner row
  // The enclosing loop (one tile): its own instructions outside every loop inside it and outside
  // the remainder blocks of the unrolled inner loop, and the loops that copy the tile into shared
  // memory (STS), counted once per iteration with their STS.
  SassCounts tile;
  SassCounts copy;
  int copy_sts = 0;  // STS per iteration of the copy loops
  bool has_tile = false;
};
// The innermost loop that reads shared memory (LDS) without a barrier in it, the one with the
// most LDS on its path; throws std::runtime_error when there is none.
SassHotLoop find_sass_hot_loop(const SassFunction& f);

// ptxas -v about one function.
struct PtxasInfo {
  int registers = -1;
  int64_t stack_frame = 0, spill_stores = 0, spill_loads = 0;  // bytes
};
// Throws std::runtime_error when the report has no `Used N registers` line for `function`.
PtxasInfo parse_ptxas_info(const std::string& report, const std::string& function);

// Theoretical occupancy on sm_90 (resident warps / 64) of a kernel of `registers` registers per
// thread, `threads` per block and `shared_bytes` of shared memory per block: 65536 registers per
// SM allocated per warp in units of 256, 2048 threads, 32 blocks, 228 KiB of shared memory per
// SM with 1 KiB reserved per block.
double sm90_occupancy(int registers, int threads, int64_t shared_bytes);

}  // namespace tessel::cli
