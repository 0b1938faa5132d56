#!/usr/bin/env bash
# Installs Octave where missing, builds the library if needed, builds the MEX gateway into
# build/octave and runs the Octave tests (bindings/octave/tests, "N passed, M failed").
#
# Usage: scripts/test_octave.sh
# Exits non-zero when a test fails. Kernels are cached in build/test-cache, shared with the other
# suites; a first run compiles each distinct formula once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
scripts/setup.sh octave liboctave-dev
if [[ ! -f build/libtessel.so ]]; then
  echo "test_octave: building the tessel library"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build --target tessel
fi
mkdir -p build/octave build/test-cache
echo "test_octave: building the MEX gateway into build/octave"
if ! bindings/octave/build.sh build/octave > build/octave/build.log 2>&1; then
  cat build/octave/build.log >&2
  echo "test_octave: the MEX build failed (output above, also in build/octave/build.log)" >&2
  exit 1
fi
echo "test_octave: running bindings/octave/tests"
# Octave 7 prints "ignoring const execution_exception& while preparing to exit" at every exit
# on some systems, whatever ran: that line alone is dropped.
set +e
TESSEL_CACHE_DIR="$PWD/build/test-cache" octave-cli --no-gui --norc -q --eval \
  "addpath('$PWD/bindings/octave/tests'); run_tests('$PWD/build/octave')" 2>&1 |
  grep -v '^error: ignoring const execution_exception& while preparing to exit$'
rc=${PIPESTATUS[0]}
set -e
echo "test_octave: took $((SECONDS - start)) s"
exit "$rc"
