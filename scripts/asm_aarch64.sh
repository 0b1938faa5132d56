#!/usr/bin/env bash
# The hot loops of the NEON kernels without an ARM machine: cross-builds the tessel command for
# aarch64 (build-aarch64/tools) and runs `tessel bench --asm` under qemu-aarch64, the kernels
# compiled by the cross compiler exactly as an aarch64 machine compiles them. Speed under
# emulation means nothing; the instruction and spill counts are those of the real code.
#
# Usage: scripts/asm_aarch64.sh [bench arguments, default: gauss-sum gauss-grad lse argkmin]
#   e.g. scripts/asm_aarch64.sh gauss-sum lse --dtype float64
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh g++-aarch64-linux-gnu qemu-user >&2
build=build-aarch64/tools
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DTESSEL_BUILD_TESTS=OFF -DTESSEL_BUILD_TOOLS=ON -DTESSEL_BUILD_PYTHON=OFF > /dev/null
if ! cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1; then
  cat "$build/build.log" >&2
  echo "asm_aarch64: the cross build failed (output above)" >&2
  exit 1
fi
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu TESSEL_CXX=aarch64-linux-gnu-g++
(($#)) || set -- gauss-sum gauss-grad lse argkmin
exec qemu-aarch64 "$build/tessel" bench --asm "$@"
