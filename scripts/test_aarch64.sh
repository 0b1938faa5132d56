#!/usr/bin/env bash
# The C++ suite for aarch64 Linux on an x86-64 machine: cross-compiled with Debian's
# g++-aarch64-linux-gnu and run under qemu-aarch64. Run-time kernels are compiled by the cross
# compiler (TESSEL_CXX) and loaded by the emulated process, so the NEON code path, the aarch64
# prelude (flush-to-zero through FPCR) and the compiled backend really run; speed under
# emulation means nothing.
#
# Usage: scripts/test_aarch64.sh [ctest options, e.g. -R CompiledOp]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh g++-aarch64-linux-gnu qemu-user googletest >&2

build=build-aarch64
jobs=$(nproc)
gt=$PWD/$build/gtest-install
if [[ ! -f $gt/lib/cmake/GTest/GTestConfig.cmake ]]; then
  echo "test_aarch64: building GoogleTest for aarch64" >&2
  cmake -S /usr/src/googletest -B "$build/gtest" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DBUILD_GMOCK=OFF \
    -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$gt" > /dev/null
  cmake --build "$build/gtest" -j "$jobs" > /dev/null
  cmake --install "$build/gtest" > /dev/null
fi

echo "test_aarch64: cross-compiling tessel and its tests whose code the architecture changes" >&2
cmake -S . -B "$build/tessel" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DGTest_DIR="$gt/lib/cmake/GTest" \
  -DTESSEL_BUILD_TESTS=ON -DTESSEL_BUILD_TOOLS=OFF -DTESSEL_BUILD_PYTHON=OFF > /dev/null
# Only the tessel_arch_tests binary: the tests it holds are the ones run here (below); the rest of
# the suite is the same on every architecture and would only lengthen the build. The compiler's
# output goes to a log, shown only when the build fails.
if ! cmake --build "$build/tessel" -j "$jobs" --target tessel_arch_tests > "$build/build.log" 2>&1; then
  cat "$build/build.log" >&2
  echo "test_aarch64: the cross build failed (output above)" >&2
  exit 1
fi

export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
export TESSEL_CXX=aarch64-linux-gnu-g++
export TESSEL_CACHE_DIR=$PWD/$build/test-cache
# The tests whose code the instruction set changes (scripts/arch_tests.sh), and the per-level
# kernel and sum-accuracy tests (NEON and scalar forced in turn); the rest of the suite, the
# chunking of wide outputs included (the same loops at every level, checked natively at each x86
# level), is the same on every architecture and runs natively. TESSEL_AARCH64_TESTS, a ctest -R regex, replaces the list.
source scripts/arch_tests.sh
start=$SECONDS
if (($#)); then
  ctest --test-dir "$build/tessel" -j "$jobs" --output-on-failure "$@"
else
  ctest --test-dir "$build/tessel" -j "$jobs" --output-on-failure \
    -R "${TESSEL_AARCH64_TESTS:-$ARCH_TESTS_ALL}"
fi
echo "test_aarch64: ctest under qemu-aarch64 took $((SECONDS - start)) s" >&2
