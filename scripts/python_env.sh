#!/usr/bin/env bash
# Creates .venv on Debian's python3 (which brings numpy and PyTorch) and installs the Python tools.
#
# Usage: scripts/python_env.sh [extra pip packages...]; prints the venv's python on stdout.
# The venv sees the system site-packages; numpy and torch are pinned to the system's versions
# because Debian's torch is built against Debian's numpy.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# libopenblas0-pthread: Debian's PyTorch and NumPy call the system's BLAS and LAPACK, and without
# it that is the reference implementation, far slower on the dense float64 products of
# tessel.gp's SparseGP and exact mode (and of scikit-learn), which PyPI's wheels run on MKL.
scripts/setup.sh python3-dev python3-venv python3-numpy python3-torch python3-pytest \
  libopenblas0-pthread >&2
if [[ ! -x .venv/bin/python ]]; then
  echo "python: creating .venv" >&2
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
py=.venv/bin/python
constraints=.venv/constraints.txt
/usr/bin/python3 - > "$constraints" <<'PY'
import numpy, torch
print(f"numpy=={numpy.__version__}")
print(f"torch=={torch.__version__.split('+')[0]}")
PY
# A numpy that an earlier pip run put into the venv would shadow the system one torch needs.
if [[ -d .venv/lib/python3*/site-packages/numpy ]] 2> /dev/null ||
   compgen -G ".venv/lib/python3*/site-packages/numpy" > /dev/null; then
  "$py" -m pip uninstall -q -y numpy >&2 || true
fi
# tessel.shapes.io: meshio (mesh files), nibabel (GIfTI, FreeSurfer), matplotlib (figures); pip
# picks the releases that work with the pinned numpy (Debian's matplotlib pulls ~40 packages).
# scikit-learn: tessel.gp's exact mode is tested against its GaussianProcessRegressor.
want=(nanobind scikit-build-core pykeops==2.3 geomloss hypothesis torchdiffeq==0.2.5 pytest-xdist
  meshio nibabel matplotlib numpydoc==1.11.0 websocket-client==1.8.0 scikit-learn==1.5.2 "$@")
# The installed distributions' normalized names, listed once: a `pip show` per package costs
# half a second each.
installed=$("$py" - <<'PY'
import importlib.metadata as md, re
print("\n".join(sorted({re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower()
                         for d in md.distributions()})))
PY
)
missing=()
for pkg in "${want[@]}"; do
  name=${pkg%%[=<>]*}
  name=$(tr '_.A-Z' '--a-z' <<< "$name")
  grep -qx -- "$name" <<< "$installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "python: installing ${missing[*]} into .venv" >&2
  "$py" -m pip install -q -c "$constraints" "${missing[@]}" >&2
fi
# nilearn only for the fsaverage5 surfaces it ships: without its dependencies (pandas, ...),
# which tessel never imports.
if ! grep -qx nilearn <<< "$installed"; then
  echo "python: installing nilearn (data files only, --no-deps) into .venv" >&2
  "$py" -m pip install -q --no-deps nilearn==0.14.1 >&2
fi
# statsmodels only for the Mauna Loa CO2 series it ships (the gallery's GP example reads the CSV
# with numpy), likewise without its dependencies: pandas would also widen what scikit-learn's
# estimator checks of tessel.gp run.
if ! grep -qx statsmodels <<< "$installed"; then
  echo "python: installing statsmodels (data files only, --no-deps) into .venv" >&2
  "$py" -m pip install -q --no-deps statsmodels==0.14.6 >&2
fi
# GPyTorch, for tessel.gp's comparisons and its KeOps kernels on tessel.compat: 1.11 is the newest
# release whose requirements allow PyTorch 1.13 (later ones pull torch 2 from PyPI), so it and
# its own dependencies are pinned and installed without pip's resolver.
if ! grep -qx gpytorch <<< "$installed"; then
  echo "python: installing gpytorch 1.11 (for PyTorch 1.13, --no-deps) into .venv" >&2
  "$py" -m pip install -q --no-deps gpytorch==1.11 linear-operator==0.5.2 jaxtyping==0.2.25 \
    typeguard==2.13.3 >&2
fi
echo "$PWD/$py"
