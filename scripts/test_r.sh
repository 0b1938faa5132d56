#!/usr/bin/env bash
# Installs R where missing, builds the library if needed, installs the R package into
# build/r-lib and runs its testthat suite (bindings/r/tests/testthat).
#
# Usage: scripts/test_r.sh
# Exits non-zero when a test fails. Kernels are cached in build/test-cache, shared with the other
# suites; a first run compiles each distinct formula once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
scripts/setup.sh r-base-core r-cran-rcpp r-cran-testthat
if [[ ! -f build/libtessel.so ]]; then
  echo "test_r: building the tessel library"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build --target tessel
fi
mkdir -p build/r-lib build/test-cache
echo "test_r: installing the R package into build/r-lib"
# --preclean: objects linked against another build folder are not reused.
if ! R CMD INSTALL --preclean -l build/r-lib bindings/r > build/r-install.log 2>&1
then
  cat build/r-install.log >&2
  echo "test_r: R CMD INSTALL failed (output above, also in build/r-install.log)" >&2
  exit 1
fi
echo "test_r: running testthat on bindings/r/tests/testthat"
# The GP test compares against tessel.gp's Python API when the Python package is built.
if [[ -x .venv/bin/python && -d build/python/tessel ]]; then
  export TESSEL_PYTHON="$PWD/.venv/bin/python" TESSEL_PYTHONPATH="$PWD/build/python"
fi
TESSEL_CACHE_DIR="$PWD/build/test-cache" R_LIBS="$PWD/build/r-lib" Rscript -e '
  suppressMessages(library(tessel))
  res <- as.data.frame(testthat::test_dir("bindings/r/tests/testthat", reporter = "summary",
                                          stop_on_failure = FALSE))
  cat(sprintf("test_r: %d expectations in %d tests, %d failed, %d skipped, %.1f s\n",
              sum(res$nb), nrow(res), sum(res$failed + res$error), sum(res$skipped),
              sum(res$real)))
  quit(status = if (any(res$failed > 0 | res$error)) 1 else 0)
'
echo "test_r: took $((SECONDS - start)) s"
