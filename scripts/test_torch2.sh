#!/usr/bin/env bash
# Runs the Python test suite against a current PyTorch 2.x from PyPI, in a venv of its own.
#
# Usage: scripts/test_torch2.sh [pytest arguments, default: tests/python]
#   TESSEL_TORCH2_SPEC  the pip requirement for torch (default "torch>=2"), e.g. "torch==2.4.*"
#
# The test command (scripts/test.sh) uses Debian's PyTorch 1.13; users mostly run 2.x, whose
# autograd graph, torch-function modes and dispatch differ. Everything lives in build-torch2/: the
# venv (build-torch2/venv, not seeing the system site-packages, so Debian's torch stays out of it),
# and a build of the Python module alone for that venv's python. The module does not link to
# PyTorch (it takes tensors as raw pointers), so only the Python side differs. PyPI's Linux torch
# wheel pulls in its CUDA libraries (about 3 GB, installed once); they are not used here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

torch_spec=${TESSEL_TORCH2_SPEC:-torch>=2}
dir=build-torch2
venv=$dir/venv
py=$venv/bin/python
start=$SECONDS

scripts/setup.sh python3-dev python3-venv >&2
if [[ ! -x $py ]]; then
  echo "torch2: creating $venv"
  mkdir -p "$dir"
  /usr/bin/python3 -m venv "$venv"
fi
# pykeops, geomloss and torchdiffeq are compared against; the suite skips what needs them when
# they are absent.
# numpydoc checks the docstrings, websocket-client drives Chromium in the site checker's test.
want=("$torch_spec" numpy pytest pytest-xdist hypothesis nanobind scikit-build-core numpydoc==1.11.0
  websocket-client==1.8.0)
optional=(pykeops==2.3 geomloss torchdiffeq==0.2.5 meshio nibabel matplotlib scikit-learn gpytorch)
if ! "$py" -m pip install -q "${want[@]}"; then
  echo "torch2: could not install ${want[*]}" >&2
  exit 1
fi
"$py" -m pip install -q "${optional[@]}" ||
  echo "torch2: ${optional[*]} did not install; the tests that compare with them will skip" >&2
# nilearn for the fsaverage5 surfaces it ships only (as scripts/python_env.sh installs it).
"$py" -m pip install -q --no-deps nilearn==0.14.1 ||
  echo "torch2: nilearn did not install; the fsaverage5 tests will fail" >&2
"$py" - <<'PY'
import sys, numpy, torch
if int(torch.__version__.split(".")[0]) < 2:
    sys.exit(f"torch2: the venv holds torch {torch.__version__}, not 2.x")
print(f"torch2: torch {torch.__version__}, numpy {numpy.__version__}, "
      f"python {sys.version.split()[0]}")
PY

echo "torch2: building the Python module in $dir"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_BUILD_TOOLS=OFF \
  -DTESSEL_BUILD_TESTS=OFF -DTESSEL_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/$py" > /dev/null
cmake --build "$dir" --target _core tessel_python_files > /dev/null
echo "torch2: ready after $((SECONDS - start)) s; running pytest"

(($#)) || set -- tests/python
set +e
TESSEL_CACHE_DIR="$PWD/$dir/test-cache" PYTHONPATH="$PWD/$dir/python" \
  "$py" -m pytest -q -p no:cacheprovider -rfEs "$@"
rc=$?
set -e
echo "torch2: done in $((SECONDS - start)) s (pytest exit $rc)"
exit "$rc"
