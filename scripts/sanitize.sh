#!/usr/bin/env bash
# Builds the C++ library, tools and tests with AddressSanitizer + UBSan in build-asan/ and runs ctest;
# or ThreadSanitizer in build-tsan/ (--tsan).
#
# Usage: scripts/sanitize.sh [--tsan] [--standin] [ctest args, e.g. -R 'Parser|BadInput' -j2]
#   --standin  builds only what ctest's `standin` label runs (the library, the test binary and the
#              stand-in CUDA driver and NVRTC of tests/standin) and runs that label: the CUDA
#              backend's host code on the stand-ins, with kernels on the CPU emulator.
#   --tsan     ThreadSanitizer instead (build-tsan/); meant with --standin, where the stand-in's
#              stream threads race with tessel's host code if its ordering is wrong.
# TESSEL_TEST_STANDIN_CACHE names the stand-in runs' kernel cache (default <build dir>/standin-cache).
#
# g++ is used (its libasan/libubsan/libtsan come with it on Debian) so the distribution's
# GoogleTest links. Any report fails the test: UBSan does not recover, ASan and TSan stop at the
# first error. Not covered: kernels compiled at run time are separate shared objects built by
# TESSEL_CXX with their own flags and dlopen-ed by the tests; they run uninstrumented inside the
# instrumented process (ASan still sees the host code's buffers they are handed). The Python
# module is built and run only with --standin under ASan.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tsan=0 standin=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --tsan) tsan=1 ;;
    --standin) standin=1 ;;
    *) break ;;
  esac
  shift
done

scripts/setup.sh

# -Og under ASan: that stage is mostly its build, which -Og halves (-O2 took twice the compile time
# for 15 % less test time); under TSan the tests take most of the stage: -O1.
if ((tsan)); then
  dir=build-tsan san=thread
  flags="-O1 -g1 -fno-omit-frame-pointer -fsanitize=thread"
else
  dir=build-asan san=address,undefined
  flags="-Og -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
fi
# With --standin under ASan, the Python module too (instrumented like the library it calls; the
# interpreter is not, so the ASan runtime is preloaded when it runs).
python_opts=(-DTESSEL_BUILD_PYTHON=OFF)
targets=(tessel_gpu_tests tessel_standin_cuda tessel_standin_nvrtc)
if ((standin && !tsan)); then
  python=$(scripts/python_env.sh)
  python_opts=(-DTESSEL_BUILD_PYTHON=ON -DPython_EXECUTABLE="$python")
  targets+=(_core tessel_python_files)
fi
# The build type's own flags (RelWithDebInfo: -O2 -g, placed after CMAKE_CXX_FLAGS) would override
# the ones above: only its NDEBUG is kept.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=g++ \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-DNDEBUG \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$san" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=$san" \
  -DTESSEL_BUILD_TESTS=ON -DTESSEL_BUILD_TOOLS=$((standin ? 0 : 1)) "${python_opts[@]}" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="${TESSEL_CCACHE:-}" > /dev/null
if ((standin)); then
  cmake --build "$dir" --target "${targets[@]}"
else
  cmake --build "$dir"
fi

# halt_on_error/abort: a finding ends the test with a failure, never a warning in a passing log.
# detect_leaks stays on (LeakSanitizer needs ptrace-free /proc access; it is off where unsupported).
# The kernel cache is $dir/test-cache (set per test by ctest), never the user's own.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# second_deadlock_stack: both stacks of a lock-order report. The stand-in's emulated kernels run
# thousands of short-lived threads: history_size keeps older accesses' stacks for the reports.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
# The install test builds examples/cpp against the installed (instrumented) library in a fresh
# CMake tree, which reads its first flags from these: without them its programs start without the
# ASan runtime and abort ("ASan runtime does not come first").
export CXXFLAGS="$flags" LDFLAGS="-fsanitize=$san"
if ((standin)); then
  rc=0
  # TSan maps its shadow at fixed addresses, which a randomized layout can occupy ("failed to
  # allocate"): without address randomization where setarch can turn it off.
  no_aslr=()
  if ((tsan)) && setarch "$(uname -m)" -R true 2> /dev/null; then
    no_aslr=(setarch "$(uname -m)" -R)
  fi
  # Under TSan the tests whose threads meet (the stand-in's streams, copies, budgets, CG's device
  # vectors); every reduction's kernel, compute alone, runs natively and under ASan. The threads
  # of the budget's streaming and CG's device vectors meet the same way in float32 and float64:
  # TSan runs their float32 variants (the float64 ones took 75 and 36 s under it, the emulator's
  # kernels instrumented); ASan runs both.
  skip=()
  ((tsan)) && skip=(-E 'EveryReductionMatchesTheInterpreter|(MemoryBudgetStreamsBlocks|KernelSolveKeepsItsVectorsOnTheDevice)/f64')
  "${no_aslr[@]}" ctest --test-dir "$dir" --output-on-failure -L standin "${skip[@]}" "$@" ||
    rc=$?
  if ((!tsan)); then
    # The classes of call that crashed on the first GPU, from Python on CUDA tensors faked over
    # the stand-in (tests/python/fake_cuda.py), and tessel.gp's device path: the torch front end's
    # CUDA path, the bindings and the backend under ASan + UBSan. Leaks are not checked (the
    # interpreter keeps its own).
    # libstdc++ is preloaded too: ASan's __cxa_throw interceptor needs it loaded at start-up.
    env -u CXXFLAGS -u LDFLAGS \
      LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \
      ASAN_OPTIONS=halt_on_error=1:detect_leaks=0 TESSEL_FAKE_CUDA=1 \
      TESSEL_LIBCUDA="$PWD/$dir/tests/standin/libtessel_standin_cuda.so" \
      TESSEL_NVRTC="$PWD/$dir/tests/standin/libtessel_standin_nvrtc.so" \
      TESSEL_CACHE_DIR="${TESSEL_TEST_STANDIN_CACHE:-$PWD/$dir/standin-cache}" \
      PYTHONPATH="$PWD/$dir/python" \
      "$python" -m pytest -q -p no:cacheprovider -n "$(nproc 2> /dev/null || echo 2)" \
      tests/python/test_cuda_crash_classes.py tests/python/test_gp_cuda.py || rc=$?
  fi
  exit "$rc"
else
  # The libFuzzer run has its own clang sanitizer build (scripts/fuzz.sh); it is not repeated here.
  ctest --test-dir "$dir" --output-on-failure -E '^fuzz_parser_bounded$' "$@"
fi
