#!/usr/bin/env bash
# Builds the Octave MEX gateway (tessel_mex.mex) against build/libtessel.so, into build/octave/.
#
# Usage: bindings/octave/build.sh [output folder, default build/octave]
# The .m functions stay in bindings/octave: add both folders to the path. MATLAB users: see
# docs/octave.md for the `mex` command line (or run make.m in MATLAB).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$root/build/octave}"
mkdir -p "$out"
lib="$root/build"
[[ -e $lib/libtessel.so ]] || { echo "build.sh: $lib/libtessel.so is missing; build the" \
  "cmake target tessel first" >&2; exit 1; }
# The rpath lets Octave load the MEX without LD_LIBRARY_PATH.
CXXFLAGS="-std=c++20 -O2 -fPIC" mkoctfile --mex -o "$out/tessel_mex.mex" \
  -I"$root/include" "$root/bindings/octave/tessel_mex.cpp" \
  -L"$lib" -ltessel -Wl,-rpath,"$lib"
echo "build.sh: built $out/tessel_mex.mex"
