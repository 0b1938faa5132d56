# Sourced by the test scripts: which C++ tests run again at each SIMD level below the machine's
# and under qemu-aarch64. Those whose code the instruction set changes: every op compiled and
# checked against the interpreter, reductions against brute force (tiles, lanes, remainders),
# elementary functions and their singular points, half precision, index outputs, block-sparse and
# edge-sized problems, the CPU code generator's layouts. Front ends, options, errors, algorithms
# (Sinkhorn, CG, checkpointing), caches, tools and the parser run once, natively: they call the
# same kernels, which the tests above cover at every level.
# ctest -R regex:
ARCH_TESTS='^(EveryOp/|All/ReductionBrute|Backends/SingularPoints|OpValues|OpsLinear|DerivativeOps|Dtypes/CompiledTrig|Half/|HalfConversion|KMinLargeK|BlockSparse|ReductionEdge|Compiled(Math|Layout|Indices|WithClang)|WideOutputCodegen|ContractionCodegen|Hoist)'
# With the per-level kernel and sum-accuracy tests, which force each level themselves: what runs
# under qemu-aarch64, and what the tessel_arch_tests binary must hold (scripts/check_arch_tests.sh).
ARCH_TESTS_ALL="$ARCH_TESTS|^Levels/(CompiledSimdLevel|SumAccuracyAtLevel)"
