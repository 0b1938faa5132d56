// The SASS reader of `tessel bench sass` on a committed nvdisasm listing of the Gaussian sum (the
// kernel ncu measured on the H200) and on small cuobjdump-style listings counted by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "sass_reader.hpp"

using namespace tessel::cli;

namespace {

std::string gauss_listing() {
  const std::string path = std::string(TESSEL_SOURCE_DIR) + "/tests/cpp/data/gauss_sum_sm90.sass";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// cuobjdump -sass style (branch targets as addresses, encodings after the semicolons): a loop at
// 0x20..0x90 whose forward branch at 0x40 skips a rare block (0x50..0x70) and reads one LDS.64,
// inside a loop 0x10..0xb0 holding a barrier.
constexpr const char* kCuobjdump = R"SASS(
	code for sm_90
		Function : k
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   MOV R1, c[0x0][0x28] ;            /* 0x00000a0000017a02 */
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;     /* 0x0000000000007b1d */
        /*0020*/                   LDS.64 R2, [R0] ;                 /* 0x0000000000027984 */
        /*0030*/                   FFMA R4, R2, R3, R4 ;             /* 0x0000000302047223 */
        /*0040*/               @!P0 BRA 0x80 ;                       /* 0x0000000000008947 */
        /*0050*/                   MUFU.EX2 R5, R4 ;                 /* 0x0000000400057308 */
        /*0060*/                   STL [R1], R5 ;                    /* 0x0000000501007387 */
        /*0070*/                   DADD R6, R6, R8 ;                 /* 0x0000000806067229 */
        /*0080*/                   IADD3 R0, R0, 0x8, RZ ;           /* 0x0000000800007810 */
        /*0090*/               @P1 BRA 0x20 ;                        /* 0x000000000000194 */
        /*00a0*/                   FSETP.GT.AND P2, PT, R4, RZ, PT ; /* 0x000000ff0400720b */
        /*00b0*/               @P2 BRA 0x10 ;                        /* 0x000000000000294 */
        /*00c0*/                   EXIT ;                            /* 0x000000000000794d */
)SASS";

}  // namespace

TEST(SassReader, ClassesFromOpcodes) {
  EXPECT_EQ(sass_class("FFMA"), SassClass::Ffma);
  EXPECT_EQ(sass_class("FADD.FTZ"), SassClass::Fadd);
  EXPECT_EQ(sass_class("FMUL"), SassClass::Fmul);
  EXPECT_EQ(sass_class("FSETP.NEU.AND"), SassClass::Fp32Other);
  EXPECT_EQ(sass_class("FMNMX"), SassClass::Fp32Other);
  EXPECT_EQ(sass_class("DADD"), SassClass::Fp64);
  EXPECT_EQ(sass_class("F2F.F64.F32"), SassClass::Fp64);
  EXPECT_EQ(sass_class("DEPBAR.LE"), SassClass::Other);
  EXPECT_EQ(sass_class("MUFU.EX2"), SassClass::Mufu);
  EXPECT_EQ(sass_class("LDS.128"), SassClass::Lds);
  EXPECT_EQ(sass_class("LDL.64"), SassClass::Local);
  EXPECT_EQ(sass_class("STL"), SassClass::Local);
  EXPECT_EQ(sass_class("STS"), SassClass::Other);
  EXPECT_EQ(sass_class("IMAD.MOV.U32"), SassClass::Other);
  EXPECT_STREQ(sass_class_name(SassClass::Fp32Other), "fp32_other");
}

// The calibration: this listing's hot loop is 87 instructions for 2 inner rows x 4 outer rows,
// 10.9 per pair (3 FADD, 1 FMUL + 2 FFMA for the distance, 2 FMUL for -g log2(e), MUFU.EX2, one
// FFMA into the sum; per 8 pairs 2 LDS.128 and 5 of loop counter, address and branch); ncu
// counted 11.1 per pair over the whole kernel on the H200.
TEST(SassReader, GaussianSumHotLoop) {
  const std::vector<SassFunction> fs = parse_sass(gauss_listing());
  const SassFunction& f = sass_function(fs, "tessel_kernel");
  EXPECT_EQ(f.insns.front().address, 0);
  const SassHotLoop h = find_sass_hot_loop(f);
  EXPECT_EQ(f.insns[h.loop.head].address, 0x0d30);
  EXPECT_EQ(f.insns[h.loop.back].address, 0x1290);
  EXPECT_EQ(h.loop.all.total(), 87);
  EXPECT_EQ(h.loop.path.total(), 87);  // straight-line: no forward branch inside
  EXPECT_EQ(h.lds_per_iter, 2);
  EXPECT_EQ(h.loop.path.mufu_ex2, 8);
  EXPECT_EQ(h.loop.path[SassClass::Ffma], 24);
  EXPECT_EQ(h.loop.path[SassClass::Fadd], 24);
  EXPECT_EQ(h.loop.path[SassClass::Fmul], 24);
  EXPECT_EQ(h.loop.path[SassClass::Local], 0);
  EXPECT_EQ(h.loop.path[SassClass::Other], 5);
  // The tile loop: a barrier pair, the copy into shared memory (one STS per iteration), the four
  // block sums in double; the unrolled loop's remainder (one LDS.128) is left out.
  ASSERT_TRUE(h.has_tile);
  EXPECT_EQ(h.copy_sts, 1);
  EXPECT_EQ(h.tile[SassClass::Lds], 0);
  EXPECT_EQ(h.tile[SassClass::Mufu], 0);
  EXPECT_EQ(h.tile[SassClass::Fp64], 8);  // 4 F2F + 4 DADD
  EXPECT_GT(h.tile.total(), 30);
  EXPECT_LT(h.tile.total(), 120);
}

TEST(SassReader, CuobjdumpAddressesAndForwardBranches) {
  const std::vector<SassFunction> fs = parse_sass(kCuobjdump);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].name, "k");
  ASSERT_EQ(fs[0].insns.size(), 13u);
  EXPECT_EQ(fs[0].insns[4].predicate, "@!P0");
  EXPECT_EQ(fs[0].insns[4].target, 0x80);
  const std::vector<SassLoop> loops = sass_loops(fs[0]);
  ASSERT_EQ(loops.size(), 2u);
  EXPECT_EQ(loops[0].nested, 0);
  EXPECT_EQ(loops[1].nested, 1);
  const SassHotLoop h = find_sass_hot_loop(fs[0]);  // the outer loop holds a barrier
  EXPECT_EQ(h.loop.all.total(), 8);
  EXPECT_EQ(h.loop.path.total(), 5);  // LDS, FFMA, BRA, IADD3, BRA
  EXPECT_EQ(h.loop.all[SassClass::Local], 1);
  EXPECT_EQ(h.loop.path[SassClass::Local], 0);
  EXPECT_EQ(h.loop.all.mufu_ex2, 1);
  EXPECT_EQ(h.loop.path.mufu_ex2, 0);
  ASSERT_TRUE(h.has_tile);
  EXPECT_EQ(h.tile.total(), 3);  // BAR, FSETP, BRA
}

TEST(SassReader, MissingPiecesAreNamed) {
  const std::vector<SassFunction> fs = parse_sass(kCuobjdump);
  try {
    sass_function(fs, "tessel_kernel");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no function tessel_kernel (it has: k)"),
              std::string::npos);
  }
  const std::vector<SassFunction> plain = parse_sass(
      "        /*0000*/                   IADD3 R0, R0, 0x1, RZ ;\n"
      "        /*0010*/               @P0 BRA 0x0 ;\n");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_THROW(find_sass_hot_loop(plain[0]), std::runtime_error);  // a loop, but no LDS
}

TEST(SassReader, PtxasReport) {
  const std::string report =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'tessel_combine' for 'sm_90'\n"
      "ptxas info    : Function properties for tessel_combine\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 31 registers, used 0 barriers\n"
      "ptxas info    : Compiling entry function 'tessel_kernel' for 'sm_90'\n"
      "ptxas info    : Function properties for tessel_kernel\n"
      "    24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers\n";
  const PtxasInfo k = parse_ptxas_info(report, "tessel_kernel");
  EXPECT_EQ(k.registers, 255);
  EXPECT_EQ(k.stack_frame, 24);
  EXPECT_EQ(k.spill_stores, 16);
  EXPECT_EQ(k.spill_loads, 8);
  EXPECT_EQ(parse_ptxas_info(report, "tessel_combine").registers, 31);
  EXPECT_THROW(parse_ptxas_info(report, "other"), std::runtime_error);
}

// Values of NVIDIA's occupancy calculator for compute capability 9.0.
TEST(SassReader, Sm90Occupancy) {
  EXPECT_DOUBLE_EQ(sm90_occupancy(40, 128, 2048), 0.75);  // ncu on the H200: 75 %
  EXPECT_DOUBLE_EQ(sm90_occupancy(32, 256, 0), 1.0);
  EXPECT_DOUBLE_EQ(sm90_occupancy(62, 128, 2048), 0.5);  // 64 registers a thread, rounded
  EXPECT_DOUBLE_EQ(sm90_occupancy(80, 128, 2048), 0.375);
  EXPECT_DOUBLE_EQ(sm90_occupancy(62, 256, 4096), 0.5);
  EXPECT_DOUBLE_EQ(sm90_occupancy(255, 32, 0), 0.125);  // 8 warps of 8192 registers: 8 blocks
  EXPECT_DOUBLE_EQ(sm90_occupancy(16, 64, 0), 1.0);     // 32 blocks of 2 warps
  EXPECT_DOUBLE_EQ(sm90_occupancy(16, 32, 0), 0.5);     // the 32-block limit
  EXPECT_DOUBLE_EQ(sm90_occupancy(32, 128, 100 * 1024), 0.125);  // two blocks' shared memory
  EXPECT_DOUBLE_EQ(sm90_occupancy(0, 128, 0), 0.0);
}
