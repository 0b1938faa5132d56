#!/usr/bin/env bash
# Builds the C++ library, tools and tests with AddressSanitizer + UBSan in build-asan/ and runs ctest.
#
# Usage: scripts/sanitize.sh [ctest args, e.g. -R 'Parser|BadInput' -j2]
#
# g++ is used (its libasan/libubsan come with it on Debian) so the distribution's GoogleTest links.
# Any report fails the test: UBSan does not recover, ASan aborts on the first error.
# Not covered: kernels compiled at run time are separate shared objects built by TESSEL_CXX with
# their own flags and dlopen-ed by the tests; they run uninstrumented inside the instrumented
# process (ASan still sees the host code's buffers they are handed). The Python module is left out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh

flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=g++ \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DTESSEL_BUILD_TESTS=ON -DTESSEL_BUILD_TOOLS=ON -DTESSEL_BUILD_PYTHON=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER="${TESSEL_CCACHE:-}" > /dev/null
cmake --build build-asan

# halt_on_error/abort: a finding ends the test with a failure, never a warning in a passing log.
# detect_leaks stays on (LeakSanitizer needs ptrace-free /proc access; it is off where unsupported).
# The kernel cache is build-asan/test-cache (set per test by ctest), never the user's own.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# The install test builds examples/cpp against the installed (instrumented) library in a fresh
# CMake tree, which reads its first flags from these: without them its programs start without the
# ASan runtime and abort ("ASan runtime does not come first").
export CXXFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined"
# The libFuzzer run has its own clang sanitizer build (scripts/fuzz.sh); it is not repeated here.
ctest --test-dir build-asan --output-on-failure -E '^fuzz_parser_bounded$' "$@"
