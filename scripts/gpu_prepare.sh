#!/usr/bin/env bash
# Prepares the folder a bare, offline GPU machine needs for scripts/gpu_check.sh: GoogleTest's
# sources and wheels of pykeops 2.3, keopscore 2.3, geomloss, flash-sinkhorn, and GPyTorch with
# linear_operator, jaxtyping and typeguard at scripts/python_env.sh's pins (the side-by-side
# baselines).
#
# Usage: scripts/gpu_prepare.sh [KIT_DIR]   (default gpu-kit, git-ignored; a few MB)
# Run it where Debian's packages and PyPI are reachable, then take KIT_DIR along with the
# checkout (inside it, or next to it and named as gpu_check.sh's second argument).
# These are pure Python: their wheels install on any Python 3 there (flash-sinkhorn's Triton
# comes with PyTorch's CUDA wheels).
# What a GPU machine of that kind already has (CMake, ninja, nanobind, scikit-build-core, pytest,
# PyTorch with CUDA, NumPy, SciPy, pybind11) is not packed, nor scikit-learn: GPyTorch lists it
# but imports it only for kernels and models that bench/gp_bench.py does not use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

kit=${1:-gpu-kit}
gtest_src=/usr/src/googletest

scripts/setup.sh >&2  # Debian's googletest package ships the sources under /usr/src/googletest
if [[ ! -f $gtest_src/CMakeLists.txt ]]; then
  echo "gpu_prepare: no GoogleTest sources in $gtest_src (Debian package 'googletest')" >&2
  exit 1
fi

py=python3
[[ -x .venv/bin/python ]] && py=.venv/bin/python
if ! "$py" -m pip --version > /dev/null 2>&1; then
  echo "gpu_prepare: $py has no pip; run scripts/python_env.sh first" >&2
  exit 1
fi

rm -rf "$kit"
mkdir -p "$kit/wheels"
cp -r "$gtest_src" "$kit/googletest"
# GPyTorch and the dependencies it is installed with, at the versions scripts/python_env.sh pins
# (read from there, so that the GPU rows run the GPyTorch the CPU rows ran).
mapfile -t gpytorch_pins < <(grep -oE '\b(gpytorch|linear-operator|jaxtyping|typeguard)==[0-9.]+' \
  scripts/python_env.sh)
if ((${#gpytorch_pins[@]} != 4)); then
  echo "gpu_prepare: expected 4 GPyTorch pins in scripts/python_env.sh, found" \
    "'${gpytorch_pins[*]}'" >&2
  exit 1
fi
"$py" -m pip wheel -q --no-deps -w "$kit/wheels" pykeops==2.3 keopscore==2.3 geomloss \
  flash-sinkhorn "${gpytorch_pins[@]}"
count=$(find "$kit/wheels" -name '*.whl' | wc -l)
if ((count != 8)); then
  echo "gpu_prepare: expected 8 wheels in $kit/wheels, found $count" >&2
  exit 1
fi
cat > "$kit/README" << EOF
Made by scripts/gpu_prepare.sh on $(date -u +%Y-%m-%d): GoogleTest sources (from Debian's
googletest package) and wheels of pykeops 2.3, keopscore 2.3, geomloss, flash-sinkhorn and
${gpytorch_pins[*]} for scripts/gpu_check.sh on a GPU machine without network.
EOF
echo "gpu_prepare: $kit ready ($(du -sh "$kit" | cut -f1)): googletest sources and" \
  "$(cd "$kit/wheels" && echo *.whl)"
