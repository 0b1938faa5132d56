#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite: ctest (C++), pytest, the R and
# Octave bindings' tests, then the documentation site's build and browser check.
#
# Usage: scripts/test.sh [extra ctest options, e.g. -R cli]
# The `standin` label runs again under ASan + UBSan and TSan, and the Python crash-class tests under
# ASan (TESSEL_TEST_STANDIN_SANITIZE=0 skips them; logs in build/standin-asan.log and
# build/standin-tsan.log); the Python CUDA tests run once more on fake CUDA tensors.
# Passed tests are not listed; failures are shown with their output, then ctest's summary.
# The full ctest output is kept in build/ctest.log, and build/ctest-<level>.log for the kernel
# tests rerun at each lower SIMD level (TESSEL_TEST_SIMD_LEVELS="avx2 sse2" picks the levels), and
# build/ctest-aarch64.log for the aarch64 suite under emulation (TESSEL_TEST_AARCH64=0 skips it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
scripts/setup.sh
python=$(scripts/python_env.sh)
echo "test: set-up (Debian packages, the Python venv) took $((SECONDS - start)) s"
start=$SECONDS
scripts/build.sh
echo "test: build took $((SECONDS - start)) s"
# One BLAS thread per process: ctest and pytest already run one job per core, and OpenBLAS's
# threads spin while they wait, which would take the cores from the other job's kernels.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
set +e
# Runs ctest with the given options, logging to $log: failures with their output, then the summary.
run_ctest() {
  ctest --test-dir build --output-on-failure -j2 "$@" 2>&1 | tee "$log" |
    grep -vE '^ *(Start +[0-9]+: |[0-9]+/[0-9]+ Test +#[0-9]+: .*Passed)'
  return "${PIPESTATUS[0]}"
}
log=build/ctest.log
echo "test: running ctest (full log in $log)"
# The `standin` label runs below under ASan + UBSan and TSan; natively only when those are skipped.
label_skip=()
[[ ${TESSEL_TEST_STANDIN_SANITIZE:-1} != 0 ]] && label_skip=(-LE standin)
start=$SECONDS
run_ctest "${label_skip[@]}" "$@"
rc=$?
echo "test: ctest took $((SECONDS - start)) s"
# Then again at each SIMD level below this CPU's (other users' machines run those kernels), the
# tests whose code the level changes (scripts/arch_tests.sh); the Levels/ tests force every level
# themselves. TESSEL_TEST_SIMD_LEVELS="avx2 sse2" picks the levels, =none skips this part.
source scripts/arch_tests.sh
native=$(env -u TESSEL_SIMD TESSEL_CACHE_DIR="$PWD/build/test-cache" build/tessel doctor --quick |
  awk '$1 == "SIMD" { print $2 }')
levels="avx512 avx2 sse2 scalar"
[[ $(uname -m) == aarch64 || $(uname -m) == arm64 ]] && levels="neon scalar"
lower=$(echo $levels | tr ' ' '\n' | sed -n "/^$native\$/,\$p" | tail -n +2)
for level in ${TESSEL_TEST_SIMD_LEVELS:-$lower}; do
  [[ $level == none ]] && break
  log=build/ctest-$level.log
  echo "test: running ctest at TESSEL_SIMD=$level (native: $native; full log in $log)"
  start=$SECONDS
  TESSEL_SIMD=$level run_ctest -R "$ARCH_TESTS" "$@"
  level_rc=$?
  echo "test: TESSEL_SIMD=$level took $((SECONDS - start)) s"
  ((level_rc == 0)) || rc=$level_rc
done
# The C++ suite for aarch64 (NEON kernels, FPCR flush-to-zero), cross-compiled and run under
# qemu-aarch64 with run-time kernels built by the cross compiler (scripts/test_aarch64.sh). From
# an x86-64 Linux host only; TESSEL_TEST_AARCH64=0 skips it.
if [[ ${TESSEL_TEST_AARCH64:-1} != 0 && $(uname -m) == x86_64 && $(uname -s) == Linux ]]; then
  echo "test: running the C++ suite for aarch64 under qemu (full log in build/ctest-aarch64.log)"
  start=$SECONDS
  scripts/test_aarch64.sh 2>&1 | tee build/ctest-aarch64.log |
    grep -vE '^ *(Start +[0-9]+: |[0-9]+/[0-9]+ Test +#[0-9]+: .*Passed)|^\[[0-9]+/[0-9]+\] '
  arm_rc=${PIPESTATUS[0]}
  echo "test: aarch64 (cross build and ctest under qemu) took $((SECONDS - start)) s"
  ((arm_rc == 0)) || rc=$arm_rc
fi
# The `standin` label (the GPU tests on the stand-in CUDA driver, tests/standin) under ASan + UBSan
# and under ThreadSanitizer, each its own build of only what the label needs
# (scripts/sanitize.sh --standin). TESSEL_TEST_STANDIN_SANITIZE=0 skips both (the label then ran
# natively in the ctest run above).
standin_cxx=${TESSEL_CXX:-$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/CMakeCache.txt)}
if [[ ${TESSEL_TEST_STANDIN_SANITIZE:-1} != 0 ]]; then
  # One kernel cache for the stand-in's kernels in every build (keyed by source and flags, the
  # sanitized builds compile the same ones) and the fake-CUDA pass below: each is compiled once.
  # The cache's keys name the compiler: the sanitized builds are told the native build's.
  export TESSEL_TEST_STANDIN_CACHE="$PWD/build/standin-cache"
  for san in asan tsan; do
    echo "test: running the standin label under $san (scripts/sanitize.sh --standin)"
    start=$SECONDS
    TESSEL_CXX=$standin_cxx scripts/sanitize.sh $([[ $san == tsan ]] && echo --tsan) --standin -j2 \
      > "build/standin-$san.log" 2>&1
    san_rc=$?
    grep -E '^[0-9]+% tests passed|^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)' "build/standin-$san.log"
    echo "test: standin under $san (build and run) took $((SECONDS - start)) s (log in build/standin-$san.log)"
    ((san_rc == 0)) || rc=$san_rc
  done
fi
# One pytest worker per core (pytest-xdist): most of the suite's time is compiling kernels, one
# process per core halves it on two cores. The workers share the kernel cache, whose builds are
# locked per kernel.
echo "test: running pytest on tests/python"
start=$SECONDS
TESSEL_CACHE_DIR="$PWD/build/test-cache" PYTHONPATH="$PWD/build/python" \
  "$python" -m pytest -q -p no:cacheprovider -n "$(nproc 2> /dev/null || echo 2)" \
  --durations=10 --durations-min=1 tests/python
py_rc=$?
echo "test: pytest took $((SECONDS - start)) s"
# The Python tests with CUDA paths once more, on CUDA tensors faked over the stand-in driver
# (tests/python/fake_cuda.py): the torch front end's CUDA path, tessel.ot's GPU branch and the
# launches' sizes (the stand-in's launch log), with the kernels in the stand-in's CPU emulator.
echo "test: running the Python CUDA tests on the stand-in CUDA driver (TESSEL_FAKE_CUDA=1)"
start=$SECONDS
TESSEL_FAKE_CUDA=1 TESSEL_CXX=$standin_cxx \
  TESSEL_LIBCUDA="$PWD/build/tests/standin/libtessel_standin_cuda.so" \
  TESSEL_NVRTC="$PWD/build/tests/standin/libtessel_standin_nvrtc.so" \
  TESSEL_CACHE_DIR="$PWD/build/standin-cache" PYTHONPATH="$PWD/build/python" \
  "$python" -m pytest -q -p no:cacheprovider -n "$(nproc 2> /dev/null || echo 2)" \
  tests/python/test_cuda_crash_classes.py tests/python/test_cuda_device.py \
  tests/python/test_cuda_fill.py tests/python/test_block_sparse.py \
  tests/python/test_genred_torch.py tests/python/test_half.py tests/python/test_kernel_solve.py \
  tests/python/test_ot_cuda.py tests/python/test_gp_cuda.py -k "cuda or gpu"
fake_rc=$?
echo "test: Python CUDA tests on the stand-in took $((SECONDS - start)) s"
((fake_rc == 0)) || rc=$fake_rc
# The R package and the Octave MEX gateway on the same library and kernel cache, each with its own
# runner summary (testthat; the Octave runner's passed / failed count), and the documentation site:
# Sphinx with warnings as errors, the gallery's examples run, then every link and page checked in
# headless Chromium (scripts/docs.sh; TESSEL_TEST_DOCS=0 skips it). The bindings' tests and the
# site's build are each mostly one thread: they run side by side, the bindings' output shown after
# the site's. What they install (Debian packages, the site's PyPI packages) is installed first, so
# that no two installs run at once and no test imports a package while pip replaces it.
bindings=()
for binding in r octave; do
  [[ -x scripts/test_$binding.sh ]] && bindings+=("$binding")
done
scripts/setup.sh $([[ " ${bindings[*]} " == *" r "* ]] && echo r-base-core r-cran-rcpp r-cran-testthat) \
  $([[ " ${bindings[*]} " == *" octave "* ]] && echo octave liboctave-dev)
if [[ ${TESSEL_TEST_DOCS:-1} != 0 ]]; then
  mapfile -t docs_reqs < <(grep -vE '^\s*(#|$)' docs/requirements.txt)
  scripts/python_env.sh "${docs_reqs[@]}" > /dev/null
fi
(
  binding_rc=0
  for binding in "${bindings[@]}"; do
    scripts/test_$binding.sh || binding_rc=$?
  done
  exit "$binding_rc"
) > build/bindings.log 2>&1 &
bindings_pid=$!
if [[ ${TESSEL_TEST_DOCS:-1} != 0 ]]; then
  echo "test: building and checking the documentation site (scripts/docs.sh), beside the R and Octave tests"
  start=$SECONDS
  scripts/docs.sh
  docs_rc=$?
  echo "test: documentation site took $((SECONDS - start)) s"
  ((docs_rc == 0)) || rc=$docs_rc
fi
wait "$bindings_pid"
binding_rc=$?
echo "test: the R and Octave tests (log in build/bindings.log)"
cat build/bindings.log
((binding_rc == 0)) || rc=$binding_rc
# The ten slowest C++ tests over every ctest run above (pytest listed its own), so that a test
# that grows slow is seen when it does.
echo "test: the ten slowest C++ tests (seconds, run)"
for log in build/ctest*.log; do
  run=${log#build/ctest}
  run=${run%.log}
  sed -nE "s/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec\$/\2 \1 ${run:--native}/p" "$log"
done | sort -rn | head -10 | awk '{ printf "  %8.1f  %s (%s)\n", $1, $2, substr($3, 2) }'
set -e
((rc == 0)) || exit "$rc"
exit "$py_rc"
