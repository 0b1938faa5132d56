#!/usr/bin/env bash
# Checks that no test of the given GoogleTest binaries matches scripts/arch_tests.sh's regex: those
# tests run again at each SIMD level and under qemu-aarch64, whose cross build compiles only the
# tessel_arch_tests binary (tests/cpp/CMakeLists.txt), so a matching test elsewhere would silently
# not run on aarch64.
#
# Usage: scripts/check_arch_tests.sh <test binary>...
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/arch_tests.sh"
status=0
for binary in "$@"; do
  # --gtest_list_tests prints "Suite." then "  name  # GetParam() = ..." lines.
  names=$("$binary" --gtest_list_tests | awk '/^[^ ]/ { suite = $1; next } { print suite $1 }')
  if [[ -z $names ]]; then
    echo "check_arch_tests: $binary listed no tests" >&2
    status=1
    continue
  fi
  misplaced=$(grep -E "$ARCH_TESTS_ALL" <<< "$names" || true)
  if [[ -n $misplaced ]]; then
    echo "check_arch_tests: these tests of $binary match ARCH_TESTS (scripts/arch_tests.sh) but" \
      "their file is not in TESSEL_ARCH_TEST_SOURCES (tests/cpp/CMakeLists.txt), so the aarch64" \
      "build would not compile them:" >&2
    head -20 <<< "$misplaced" >&2
    status=1
  fi
done
((status == 0)) && echo "check_arch_tests: no test outside the arch binary matches ARCH_TESTS"
exit "$status"
