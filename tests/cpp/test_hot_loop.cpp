// The hot-loop reader of `tessel bench --asm` on fixed assembly whose counts are known by hand.
#include <gtest/gtest.h>

#include <stdexcept>

#include "hot_loop.hpp"

using namespace tessel::cli;

namespace {

// g++ -S style, AT&T syntax. k1 sets up rbp as its frame pointer; its inner loop .L3 is the hot
// loop. The range .L7 ... jne .L7 in k2 is larger but entered in its middle (jmp .L9), so it is
// no natural loop; k2's loop .L12 uses rbp as an ordinary register.
constexpr const char* kX86 = R"(	.file	"k.cpp"
	.text
	.globl	k1
	.type	k1, @function
k1:
.LFB0:
	.cfi_startproc
	pushq	%rbp
	movq	%rsp, %rbp
	xorl	%eax, %eax
.L2:
	movl	$0, %ecx
.L3:
	.loc 1 316 26
	vmovups	(%rdi,%rcx,4), %ymm1
	vmovaps	-48(%rbp), %ymm2
	vfmadd231ps	%ymm1, %ymm2, %ymm0
	vmulps	32(%rsp), %ymm1, %ymm3	# a comment, $ and all
	vaddss	%xmm4, %xmm5, %xmm5
	vmovaps	%ymm3, 64(%rsp)
	leaq	8(%rsp), %rdx
	addq	$1, %rcx
	cmpq	%rcx, %rsi
	jne	.L3
	addl	$1, %eax
	cmpl	%eax, %edx
	.loc 1 314 3
	jne	.L2
	popq	%rbp
	ret
	.cfi_endproc
	.globl	k2
	.type	k2, @function
k2:
.LFB1:
	.cfi_startproc
	jmp	.L9
.L7:
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
	vaddps	%ymm0, %ymm1, %ymm1
.L9:
	vaddps	%ymm0, %ymm1, %ymm1
	subl	$1, %esi
	jne	.L7
.L12:
	vmovaps	(%rbp), %ymm0
	vmovaps	%ymm0, 16(%rsp)
	subq	$1, %rdx
	jne	.L12
	ret
	.cfi_endproc
)";

// g++ -S style for aarch64: x29 is the frame pointer; bsl is a NEON select, not a branch.
constexpr const char* kAArch64 = R"(	.arch armv8-a
	.text
	.global	k
	.type	k, %function
k:
.LFB0:
	.cfi_startproc
	stp	x29, x30, [sp, -64]!
	mov	x29, sp
	mov	x2, 0
.L3:
	.loc 1 42 5
	ldr	q1, [x0, x2]
	ldr	q2, [sp, 32]
	fmla	v0.4s, v1.4s, v2.4s
	fmul	v3.4s, v1.4s, v1.4s
	fadd	s4, s4, s5
	bsl	v5.16b, v6.16b, v7.16b
	str	q3, [x29, 48]
	add	x2, x2, 16
	cmp	x2, x1
	.loc 1 40 20
	bne	.L3
	ldp	x29, x30, [sp], 64
	ret
	.cfi_endproc
)";

// The counts a loop must have, field by field.
struct Counts {
  int instructions, fp_vector, fp_scalar, fma, stack_loads, stack_stores, source_line;
};
void expect_counts(const HotLoop& h, const Counts& c) {
  EXPECT_EQ(h.instructions, c.instructions);
  EXPECT_EQ(h.fp_vector, c.fp_vector);
  EXPECT_EQ(h.fp_scalar, c.fp_scalar);
  EXPECT_EQ(h.fma, c.fma);
  EXPECT_EQ(h.stack_loads, c.stack_loads);
  EXPECT_EQ(h.stack_stores, c.stack_stores);
  EXPECT_EQ(h.source_line, c.source_line);
}

TEST(HotLoop, X86InnerLoopCountsInstructionsFpAndSpills) {
  ASSERT_EQ(guess_asm_arch(kX86), AsmArch::X86_64);
  const HotLoop h = find_hot_loop(kX86, AsmArch::X86_64);
  // Stack loads: -48(%rbp) and 32(%rsp) (leaq reads no memory); the store goes to 64(%rsp).
  expect_counts(h, {10, 2, 1, 1, 2, 1, 316});
  EXPECT_EQ(h.mul_vector, 2);  // vfmadd231ps and vmulps; the scalar vaddss is no multiply
  EXPECT_EQ(h.mul_scalar, 0);
  EXPECT_EQ(h.spills(), 3);
  EXPECT_EQ(h.first_line, 15);
  EXPECT_EQ(h.last_line, 24);
}

TEST(HotLoop, X86SkipsRangesEnteredInTheMiddleAndRbpWithoutFramePointer) {
  const std::vector<HotLoop> loops = innermost_loops(kX86, AsmArch::X86_64);
  ASSERT_EQ(loops.size(), 2u);  // .L3 (k1) and .L12 (k2); not .L7, not the outer .L2
  const HotLoop& k2 = loops[1];
  EXPECT_EQ(k2.instructions, 4);
  EXPECT_EQ(k2.stack_loads, 0);  // (%rbp) is data here: k2 has no frame pointer
  EXPECT_EQ(k2.stack_stores, 1);
  EXPECT_EQ(k2.source_line, 0);  // k2 has no .loc: k1's last one does not carry over
}

TEST(HotLoop, AllLoopsCountNestingAndCalls) {
  const std::vector<HotLoop> loops = all_loops(kX86, AsmArch::X86_64);
  ASSERT_EQ(loops.size(), 3u);  // .L2 (holding .L3), .L3, .L12
  EXPECT_EQ(loops[0].nested, 1);
  EXPECT_EQ(loops[0].instructions, 14);  // movl, the 10 of .L3, addl, cmpl, jne
  EXPECT_EQ(loops[0].source_line, 314);
  EXPECT_EQ(loops[1].nested, 0);
  EXPECT_EQ(loops[1].calls, 0);
}

TEST(HotLoop, AArch64LoopCountsNeonAndStackThroughSpAndX29) {
  ASSERT_EQ(guess_asm_arch(kAArch64), AsmArch::AArch64);
  // ldr from [sp, 32], str to [x29, 48]; the back edge's line is 40.
  const HotLoop h = find_hot_loop(kAArch64, AsmArch::AArch64);
  expect_counts(h, {10, 2, 1, 1, 1, 1, 40});
  EXPECT_EQ(h.mul_vector, 2);  // fmla and fmul on v-registers; fadd s4 is a scalar add
  EXPECT_EQ(h.mul_scalar, 0);
}

// g++'s float64 kernels on aarch64: the full-tile loop (source line 538) laid out in pieces. The
// head .L34 jumps back to .L31, whose rare path (a tiny exp result) falls through to the next
// iteration and whose usual path jumps on to .L32, which closes the loop. No contiguous range is
// entered only through its header; beq .L83 on the loop's line leaves it.
constexpr const char* kAArch64Pieces = R"(k3:
	.cfi_startproc
	mov	x5, 0
	b	.L34
.L31:
	.loc 1 120 3
	fmla	v1.2d, v2.2d, v3.2d
	ldr	q4, [sp, 32]
	fmul	v1.2d, v1.2d, v4.2d
	cbz	x19, .L32
	fmul	v5.2d, v1.2d, v6.2d
	fmul	v5.2d, v5.2d, v7.2d
	fadd	v20.2d, v20.2d, v5.2d
	.loc 1 538 26
	cmp	x5, x25
	beq	.L83
.L34:
	.loc 1 540 5
	ldr	q0, [x0, x5]
	fsub	v1.2d, v0.2d, v8.2d
	fmul	v1.2d, v1.2d, v1.2d
	b	.L31
.L32:
	.loc 1 569 13
	fadd	v20.2d, v20.2d, v1.2d
	add	x5, x5, 64
	.loc 1 538 26
	cmp	x5, x25
	bne	.L34
.L83:
	ret
	.cfi_endproc
)";

// One iteration of the usual path: .L34 (4), .L31 up to cbz (4), .L32 (4); the rare path's three
// FP instructions are not in it.
TEST(HotLoop, AArch64LoopInPiecesCountsItsUsualPath) {
  EXPECT_TRUE(all_loops(kAArch64Pieces, AsmArch::AArch64).empty());
  const std::vector<HotLoop> cycles = branch_cycles(kAArch64Pieces, AsmArch::AArch64, {538});
  ASSERT_EQ(cycles.size(), 1u);  // bne .L34; beq .L83 goes forward, out of the loop
  const HotLoop& h = cycles[0];
  EXPECT_EQ(h.instructions, 12);
  EXPECT_EQ(h.fp_vector, 5);
  EXPECT_EQ(h.fma, 1);
  EXPECT_EQ(h.stack_loads, 1);
  EXPECT_EQ(h.source_line, 538);
  EXPECT_TRUE(branch_cycles(kAArch64Pieces, AsmArch::AArch64, {120}).empty());
}

// The bound takes the slower of the two limits. Figures of a core with FMA and separate add pipes:
// FMA chains reach 100 lane slots per second, FMA and add chains together 150.
TEST(HotLoop, BoundIsTheTighterOfTheFpAndMultiplyLimits) {
  // 21 FP operations of which 14 multiply: the multiply pipes (14 / 100) bind, not 21 / 150.
  EXPECT_DOUBLE_EQ(bound_pairs_per_s(21, 14, 100, 150, true), 100.0 / 14);
  // Mostly adds: every FP slot binds (30 / 150 > 5 / 100).
  EXPECT_DOUBLE_EQ(bound_pairs_per_s(30, 5, 100, 150, true), 150.0 / 30);
  // Without FMA the probe's multiplies and adds are already two slots each: one limit only.
  EXPECT_DOUBLE_EQ(bound_pairs_per_s(30, 20, 100, 80, false), 100.0 / 30);
  // The old model (every FP operation in an FMA slot) is the bound only where adds get no pipes
  // of their own (fp_peak == fma_peak); otherwise it was too low, and a kernel could pass it.
  EXPECT_DOUBLE_EQ(bound_pairs_per_s(21, 14, 100, 100, true), 100.0 / 21);
  EXPECT_GT(bound_pairs_per_s(21, 14, 100, 150, true), 100.0 / 21);
}

TEST(HotLoop, TextWithoutLoopsIsAnError) {
  EXPECT_THROW(find_hot_loop("f:\n\tret\n", AsmArch::X86_64), std::runtime_error);
}

}  // namespace
