#!/usr/bin/env bash
# Builds the documentation site into build/docs/html and checks it: Sphinx with warnings as
# errors (the guides, every example of examples/python run by sphinx-gallery, the API reference
# from the docstrings and, through Doxygen, from the public C++ headers), then every internal link
# and every page in headless Chromium (scripts/check_site.py).
#
# Usage: scripts/docs.sh [--no-gallery] [--no-check]
# --no-gallery: the example pages without running the examples (minutes saved while writing).
# Installs what is missing (Doxygen and Chromium from Debian, Sphinx and its extensions from PyPI,
# versions pinned in docs/requirements.txt) and builds the library first if needed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

gallery=True
check=1
for arg in "$@"; do
  case $arg in
    --no-gallery) gallery=False ;;
    --no-check) check=0 ;;
    *) echo "docs: unknown option '$arg' (expected --no-gallery or --no-check)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh doxygen chromium
mapfile -t reqs < <(grep -vE '^\s*(#|$)' docs/requirements.txt)
python=$(scripts/python_env.sh "${reqs[@]}")
compgen -G "build/python/tessel/_core*.so" > /dev/null || scripts/build.sh

out=build/docs
mkdir -p "$out/doxygen"
start=$SECONDS
echo "docs: doxygen on include/tessel"
(cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out/doxygen"; echo "WARN_AS_ERROR = YES") | doxygen -
if [[ -f bench/plot_results.py ]]; then
  echo "docs: performance plots from bench/results"
  "$python" bench/plot_results.py --out docs/_generated/perf
fi
echo "docs: sphinx (gallery: $gallery; warnings are errors)"
rm -rf "$out/html" docs/auto_examples docs/sg_execution_times.rst
# The gallery's kernels go to the test suite's cache: the test command compiles them once.
TESSEL_CACHE_DIR=${TESSEL_CACHE_DIR:-$PWD/build/test-cache} PYTHONPATH="$PWD/build/python" \
  TESSEL_DOCS_GALLERY=$gallery MPLBACKEND=Agg \
  "$python" -m sphinx -b html -W --keep-going -q -j 1 docs "$out/html"
echo "docs: built $out/html/index.html in $((SECONDS - start)) s"
if ((check)); then
  "$python" scripts/check_site.py "$out/html"
fi
