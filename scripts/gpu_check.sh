#!/usr/bin/env bash
# One command for a bare GPU machine without network: builds tessel, runs the five classes of call
# that crashed on the first GPU under AddressSanitizer and compute-sanitizer, the C++ suite (every
# CUDA test included) and the Python tests with CUDA paths, then bench/gpu_bench.py side by side
# with pykeops 2.3 on the GPU and dense PyTorch, and the other benchmarks' GPU rows. Logs and JSON
# go to one folder.
#
# Usage: scripts/gpu_check.sh OUT_DIR [KIT_DIR]
#   KIT_DIR   what scripts/gpu_prepare.sh packed (default gpu-kit): GoogleTest's sources (built
#             here when the machine has no GoogleTest) and the pykeops/keopscore/geomloss,
#             flash-sinkhorn and GPyTorch/linear_operator/jaxtyping/typeguard wheels
#             (installed into build-gpu/site; without them pykeops is left out of the bench and
#             gp_bench.py's GPyTorch rows hold their import error)
#   PYTHON    the Python that holds PyTorch with CUDA (default python3)
#   GPU_CHECK_PYTEST  pytest arguments (default: the test files with CUDA paths)
#   GPU_CHECK_PYTEST_K  their tests to run, as pytest -k (default "cuda or gpu"; empty: all)
#   GPU_CHECK_BENCH   gpu_bench.py arguments (default: --n 10000 100000 1000000 --host-budget)
#   GPU_CHECK_OT_BENCH  ot_bench.py arguments (default: CUDA, N = 1e4 .. 1e6, D = 3 and 64)
#   GPU_CHECK_PYKEOPS  gpu_bench.py arguments of the pykeops run (default: N = 1e4 .. 1e6)
#   GPU_CHECK_NCU  0: no ncu profiles
#   GPU_CHECK_ASAN  0: no ASan build and run of the crash classes
#   GPU_CHECK_SHAPES_BENCH  shapes_bench.py arguments (default: CUDA, a sphere of 10,242 vertices)
#   GPU_CHECK_SEED  gpu_seed_bench.py arguments (default: N = 1e4 and 1e5, 1000 iterations)
#   GPU_CHECK_DIST_BENCH  distributed_bench.py arguments (default: NCCL, CUDA, --quick)
#   GPU_CHECK_GP_BENCH  gp_bench.py arguments (default: CUDA, n = 1e6, d = 10, one step: GPyTorch
#             with tessel.gp's kernel, beside GPyTorch + KeOps and GPyTorch's dense path)
#   GPU_CHECK_GP_MILLION  gp_million.py arguments (default: CUDA, n = 1e6, d = 3, M = 512, 10
#             L-BFGS iterations: tessel.gp.SparseGP beside GPyTorch's SGPR)
#   GPU_CHECK_DEADLINE  seconds the whole check may take (default 540: one call of a lent machine
#             is 10 minutes at most). Each step after the build gets what is left, in this order
#             of priority: the crash classes under ASan, then under compute-sanitizer, the GPU's
#             C++ tests, the Python CUDA tests, gpu_bench.py, ncu's profiles of three kernels,
#             pykeops's own tests then its bench, gpu_seed_bench.py, the half accuracy table,
#             ot_bench.py, shapes_bench.py, distributed_bench.py, gp_million.py, gp_bench.py; a
#             step with under 30 s left is skipped and named so.
#   GPU_CHECK_CTEST  ctest arguments (default: the tests that need a GPU or NVRTC: the CPU ones
#             run in CI; "-E ^$" runs the whole suite)
# Writes to OUT_DIR: machine.txt, build.log, asan.log, memcheck.log, ctest.log, pytest.log,
# gpu_bench.jsonl, ncu-gauss-sum.log, ncu-gauss-grad.log, ncu-lse.log, pykeops_diag.log,
# backtraces.log, gpu_bench.log, pykeops_bench.jsonl, pykeops_bench.log, seed_bench.jsonl,
# seed_bench.log, half_accuracy.jsonl,
# half_accuracy.log, ot_bench.jsonl, ot_bench.log, shapes_bench.jsonl, shapes_bench.log,
# distributed_bench.jsonl, distributed_bench.log, gp_million.jsonl, gp_million.log,
# gp_bench.jsonl, gp_bench.log, summary.txt (also
# printed last, with a line per gp_bench.py row) and all of them in one gpu_check.tar.gz.
# Exit status: 0 all passed; 1 a step failed;
# 3 no usable GPU: everything before the GPU steps ran, and summary.txt says why it stopped.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=${1:?usage: scripts/gpu_check.sh OUT_DIR [KIT_DIR]}
kit=${2:-gpu-kit}
py=${PYTHON:-python3}
build=build-gpu
jobs=$(nproc 2> /dev/null || echo 4)
mkdir -p "$out" "$build" || exit 1
out=$(cd "$out" && pwd)
summary=$out/summary.txt
: > "$summary"
failed=0
start=$SECONDS

deadline=${GPU_CHECK_DEADLINE:-540}
note() { echo "gpu_check: $*" | tee -a "$summary"; }
left() { echo $((deadline - (SECONDS - start))); }
# has_time NAME: whether a step may start (30 s or more left); notes the skip otherwise.
has_time() {
  if (($(left) >= 30)); then return 0; fi
  note "$1: SKIPPED (out of time: $(left) s of GPU_CHECK_DEADLINE=$deadline left)"
  failed=1
  return 1
}
finish() {
  note "done in $((SECONDS - start)) s, exit $1"
  tar czf "$out/gpu_check.tar.gz" -C "$out" --exclude gpu_check.tar.gz . 2> /dev/null
  echo "----- summary -----"
  cat "$summary"
  exit "$1"
}
# run_step NAME LOG COMMAND...: runs COMMAND with its output appended to LOG; notes the outcome.
run_step() {
  local name=$1 log=$2 t0=$SECONDS
  shift 2
  echo "=== $name: $*" >> "$log"
  if "$@" >> "$log" 2>&1; then
    note "$name: ok ($((SECONDS - t0)) s)"
    return 0
  fi
  note "$name: FAILED ($((SECONDS - t0)) s; see $(basename "$log"))"
  failed=1
  return 1
}

{
  date -u
  uname -a
  command -v nvidia-smi > /dev/null && nvidia-smi
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "available", torch.cuda.is_available())'
  cmake --version | head -1
  ninja --version
  command -v nvcc > /dev/null && nvcc --version | tail -2
} > "$out/machine.txt" 2>&1

for tool in cmake ninja "$py"; do
  command -v "$tool" > /dev/null || { note "missing tool: $tool"; finish 1; }
done
py_path=$(command -v "$py")
py=$(cd "$(dirname "$py_path")" && pwd)/$(basename "$py_path")  # absolute, links kept (a venv)
if ! "$py" -c 'import torch, nanobind, pytest' 2> /dev/null; then
  note "$py lacks torch, nanobind or pytest"
  finish 1
fi

# GoogleTest: the kit's sources when carried (the machine has none), else the system's.
prefix=()
if [[ -f $kit/googletest/CMakeLists.txt ]]; then
  gt=$PWD/$build/gtest-install
  run_step "googletest build" "$out/build.log" bash -c "
    cmake -S '$kit/googletest' -B '$build/gtest' -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX='$gt' &&
    cmake --build '$build/gtest' -j $jobs && cmake --install '$build/gtest'" || finish 1
  prefix=(-DCMAKE_PREFIX_PATH="$gt")
else
  note "no $kit/googletest: using the system's GoogleTest (scripts/gpu_prepare.sh packs it)"
fi

# pykeops, keopscore, geomloss from the kit's wheels, into a folder of their own.
site=$PWD/$build/site
if compgen -G "$kit/wheels/*.whl" > /dev/null; then
  run_step "baseline wheels" "$out/build.log" "$py" -m pip install -q --no-index --no-deps \
    --no-compile --upgrade --target "$site" "$kit"/wheels/*.whl
else
  note "no wheels in $kit/wheels: pykeops is left out of the bench, GPyTorch out of gp_bench"
fi
export PYTHONPATH=$PWD/$build/python:$site${PYTHONPATH:+:$PYTHONPATH}
export TESSEL_CACHE_DIR=$PWD/$build/test-cache

run_step "tessel build" "$out/build.log" bash -c "
  cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_BUILD_TOOLS=ON \
    -DTESSEL_BUILD_TESTS=ON -DTESSEL_BUILD_PYTHON=ON -DPython_EXECUTABLE='$py' \
    ${prefix[*]} && cmake --build '$build' -j $jobs" || finish 1

# NVRTC: the loader's path first; else the CUDA toolkit's or the pip wheel's copy, named.
if [[ -z ${TESSEL_NVRTC:-} ]] && ! ldconfig -p 2> /dev/null | grep -q 'libnvrtc\.so'; then
  for lib in /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda-*/lib64/libnvrtc.so* \
    $("$py" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2> /dev/null \
      )/nvidia/cu*/lib/libnvrtc.so* \
    $("$py" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2> /dev/null \
      )/nvidia/cuda_nvrtc/lib/libnvrtc.so*; do
    if [[ -f $lib && $lib != *builtins* && $lib != *alt* ]]; then
      export TESSEL_NVRTC=$lib
      note "NVRTC not on the loader's path: TESSEL_NVRTC=$lib"
      break
    fi
  done
fi

# The gate: past this point every step needs a GPU that tessel itself can drive.
status=$("$py" -c 'from tessel import _core; print(_core.cuda_status())' 2>&1)
usable=$("$py" -c 'from tessel import _core; print(int(_core.cuda_available()))' 2>&1)
torch_cuda=$("$py" -c 'import torch; print(int(torch.cuda.is_available()))' 2>&1)
note "tessel's CUDA status: $status"
if [[ $usable != 1 || $torch_cuda != 1 ]]; then
  note "STOPPED before the GPU steps: no usable GPU (tessel: $usable, torch.cuda: $torch_cuda)." \
    "The build above is what a GPU machine runs first; the C++ tests, the Python CUDA tests" \
    "and gpu_bench.py need an NVIDIA GPU and its driver."
  finish 3
fi

# The five classes of call that crashed the process on the first GPU, first and alone, so that a
# crash cannot hide behind other failures: under AddressSanitizer + UBSan (a second build,
# instrumented, its Python module preloaded with the ASan runtime; the real driver maps memory
# where ASan's shadow gap would be, hence protect_shadow_gap=0) and under compute-sanitizer's
# memcheck (device accesses, on the release build).
crash_tests=tests/python/test_cuda_crash_classes.py
asan_flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined"
if [[ ${GPU_CHECK_ASAN:-1} != 0 ]] && has_time "crash classes under ASan" &&
  run_step "ASan build" "$out/build.log" timeout "$(left)" bash -c "
    cmake -S . -B '$build-asan' -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS='$asan_flags' -DCMAKE_SHARED_LINKER_FLAGS='-fsanitize=address,undefined' \
      -DTESSEL_BUILD_TOOLS=OFF -DTESSEL_BUILD_TESTS=OFF -DTESSEL_BUILD_PYTHON=ON \
      -DPython_EXECUTABLE='$py' && cmake --build '$build-asan' -j $jobs"; then
  run_step "crash classes under ASan" "$out/asan.log" timeout "$(left)" env \
    LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \
    PYTHONPATH="$PWD/$build-asan/python:$site" \
    ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:halt_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TESSEL_CACHE_DIR="$PWD/$build-asan/cache" \
    "$py" -X faulthandler -m pytest -q -p no:cacheprovider -rfEs "$crash_tests"
fi
if command -v compute-sanitizer > /dev/null && has_time "crash classes under memcheck"; then
  run_step "crash classes under compute-sanitizer memcheck" "$out/memcheck.log" \
    timeout "$(left)" compute-sanitizer --tool memcheck --error-exitcode 1 \
    --target-processes all "$py" -X faulthandler -m pytest -q -p no:cacheprovider -rfEs \
    "$crash_tests"
fi

# The tests that need a GPU (or NVRTC) first: the CPU ones run in CI on every submission.
# (and those whose path changes when a GPU is usable: backend choice, half, KernelSolve, ...)
gpu_tests='Cuda|Gpu|PtxCache|SinkhornDevice|Half|Backend|KernelSolve|StreamPlan|SingularPoints'
ctest_args=${GPU_CHECK_CTEST:--R $gpu_tests|ReductionTable|BadInputLimits}
if has_time "ctest"; then
  # shellcheck disable=SC2086
  run_step "ctest ($ctest_args)" "$out/ctest.log" timeout "$(left)" \
    ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 300 $ctest_args
  grep -E "tests passed|tests failed" "$out/ctest.log" | tail -1 |
    sed 's/^/gpu_check: ctest: /' | tee -a "$summary"
  sed -n '/The following tests FAILED/,$p' "$out/ctest.log" | grep -E "^\s*[0-9]+ - " | head -30 |
    sed 's/^ */gpu_check: ctest failure: /' | tee -a "$summary"
fi

# The Python tests with CUDA paths (their CPU tests run in CI): those files, the tests whose
# names match GPU_CHECK_PYTEST_K (empty: all of them).
pytest_args=${GPU_CHECK_PYTEST:-tests/python/test_cuda_crash_classes.py
  tests/python/test_cuda_device.py tests/python/test_genred_torch.py tests/python/test_ot_cuda.py
  tests/python/test_ot_multiscale.py tests/python/test_compat_pykeops.py
  tests/python/test_block_sparse.py tests/python/test_kernel_solve.py tests/python/test_half.py
  tests/python/test_errors.py}
pytest_k=${GPU_CHECK_PYTEST_K-cuda or gpu}
# Workers of pytest-xdist where it is installed: a test that crashes the process (a segfault on
# first contact) is then one failure, not the end of the run.
workers=()
"$py" -c 'import xdist' 2> /dev/null && workers=(-n "$((jobs < 8 ? jobs : 8))")
if has_time "pytest"; then
  # shellcheck disable=SC2086  # the arguments are words on purpose
  run_step "pytest" "$out/pytest.log" timeout "$(left)" \
    "$py" -m pytest -q -p no:cacheprovider -rfEs "${workers[@]}" $pytest_args \
    ${pytest_k:+-k "$pytest_k"}
  tail -1 "$out/pytest.log" | sed 's/^/gpu_check: pytest: /' | tee -a "$summary"
  # A test that crashed its worker: its backtrace, where cuda-gdb is (the first three).
  if command -v cuda-gdb > /dev/null; then
    grep -o "crashed while running '[^']*'" "$out/pytest.log" | cut -d"'" -f2 | head -3 |
      while read -r t; do
        (($(left) >= 90)) || break
        echo "=== $t" >> "$out/backtraces.log"
        timeout 60 cuda-gdb -batch -ex run -ex bt --args "$py" -m pytest -q -p no:cacheprovider \
          "$t" 2>&1 | grep -E '^#[0-9]+ ' | grep -v '_PyEval\|PyObject_\|_PyObject\| in ?? ()' |
          head -30 >> "$out/backtraces.log"
      done
    [[ -s $out/backtraces.log ]] && note "pytest: backtraces of crashed tests in backtraces.log"
  fi
fi

# bench_step NAME OUT_BASE COMMAND...: a benchmark with what is left of the deadline; its JSON
# lines so far are kept when it runs out of time.
bench_step() {
  local name=$1 base=$2
  shift 2
  has_time "$name" || return 0
  if PYTHONUNBUFFERED=1 timeout "$(left)" "$@" > "$out/$base.jsonl" 2> "$out/$base.log"; then
    note "$name: ok ($(grep -c '^{' "$out/$base.jsonl") JSON lines)"
  else
    note "$name: FAILED or out of time (see $base.log; the lines so far are in $base.jsonl)"
    failed=1
  fi
}
bench_args=${GPU_CHECK_BENCH:---n 10000 100000 1000000 --host-budget}
# shellcheck disable=SC2086
bench_step gpu_bench gpu_bench "$py" bench/gpu_bench.py --libs tessel dense $bench_args
# Registers, occupancy and achieved rates of three kernels at N = 1e6 (the Gaussian sum, its
# gradient, LogSumExp), where ncu runs: each case's second launch of tessel_kernel.
if [[ ${GPU_CHECK_NCU:-1} != 0 ]] && command -v ncu > /dev/null; then
  for case in gauss-sum gauss-grad lse; do
    has_time "ncu $case" || break
    PYTHONUNBUFFERED=1 timeout "$(left)" ncu --clock-control none --kernel-name tessel_kernel \
      --launch-skip 1 --launch-count 1 --section LaunchStats --section Occupancy \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
      "$py" bench/gpu_bench.py --n 1000000 --cases "$case" --libs tessel --reps 1 \
      > "$out/ncu-$case.log" 2>&1 && note "ncu $case: ok (ncu-$case.log)" ||
      note "ncu $case: FAILED (see ncu-$case.log)"
  done
fi
# pykeops in processes of its own: on first contact it crashed its process (see RESULTS.md).
# Diagnosis first: a clean cache of its own, CUDA_PATH naming the toolkit whose NVRTC it loads,
# its NumPy binding's own test before the torch one, Python's and gdb's backtraces on a crash.
pykeops_diagnose() {
  local log=$out/pykeops_diag.log nvrtc=${TESSEL_NVRTC:-}
  export KEOPS_CACHE_FOLDER=$PWD/$build/pykeops-cache
  rm -rf "$KEOPS_CACHE_FOLDER"
  if [[ -z ${CUDA_PATH:-} && $nvrtc == */lib64/* ]]; then export CUDA_PATH=${nvrtc%/lib64/*}; fi
  echo "CUDA_PATH=${CUDA_PATH:-unset} TESSEL_NVRTC=${nvrtc:-unset}" >> "$log"
  for binding in numpy torch; do
    has_time "pykeops $binding test" || return 1
    local code="import pykeops; pykeops.set_verbose(True); pykeops.test_${binding}_bindings()"
    if ! run_step "pykeops $binding bindings" "$log" timeout "$(left)" "$py" -X faulthandler \
      -c "$code"; then
      if command -v gdb > /dev/null && (($(left) >= 90)); then
        echo "=== gdb backtrace: $binding" >> "$log"
        timeout 80 gdb -batch -ex run -ex bt --args "$py" -c "$code" 2>&1 | grep -E '^#[0-9]+ ' |
          head -40 >> "$log"
      fi
      return 1
    fi
  done
}
if [[ -d $site/pykeops ]] && pykeops_diagnose; then
  pykeops_args=${GPU_CHECK_PYKEOPS:---n 10000 100000 1000000}
  # shellcheck disable=SC2086
  bench_step pykeops_bench pykeops_bench "$py" bench/gpu_bench.py --libs pykeops $pykeops_args
fi
# The first user story's Sinkhorn (N = 1e5, 1000 iterations and the gradient) against dense
# PyTorch and GeomLoss: time and peak device memory.
seed_args=${GPU_CHECK_SEED:---n 10000 100000 --iters 1000}
# shellcheck disable=SC2086
bench_step seed_bench seed_bench "$py" bench/gpu_seed_bench.py $seed_args
# Half precision against float64 on the GPU (the table bench/RESULTS.md has for the CPU).
bench_step half_accuracy half_accuracy "$py" bench/half_accuracy.py --n 100000 --device cuda
# Sinkhorn divergences: tessel.ot against GeomLoss (pykeops GPU) and flash-sinkhorn, one run.
ot_args=${GPU_CHECK_OT_BENCH:---device cuda --n 10000 100000 1000000 --d 3 64 --repeats 1
  --max-pykeops 1000000}
# shellcheck disable=SC2086
bench_step ot_bench ot_bench "$py" bench/ot_bench.py $ot_args
# LDDMM surface registration, tessel.shapes against the same pipeline in pykeops (a sphere of
# 10,242 vertices: the fsaverage5 size, without nilearn's data on the machine).
shapes_args=${GPU_CHECK_SHAPES_BENCH:---device cuda --surface sphere --n 10242 --iters 3}
# shellcheck disable=SC2086
bench_step shapes_bench shapes_bench "$py" bench/shapes_bench.py $shapes_args
# tessel.distributed over NCCL on CUDA tensors: one rank per GPU (NCCL refuses two ranks on one
# device), so on one GPU the one-process rows: the ring's CUDA path and NCCL's collectives.
dist_args=${GPU_CHECK_DIST_BENCH:---backend nccl --device cuda --quick}
# shellcheck disable=SC2086
bench_step distributed_bench distributed_bench "$py" bench/distributed_bench.py $dist_args
# A GP fit to a million points in d = 3 on the device: tessel.gp.SparseGP (its (n, M) block made
# in chunks) beside GPyTorch's SGPR (which keeps it), each in a process of its own.
million_args=${GPU_CHECK_GP_MILLION:---device cuda --n 1000000 --inducing 512 --iters 10
  --libraries tessel-sparse gpytorch-sgpr}
# shellcheck disable=SC2086
bench_step gp_million gp_million "$py" bench/gp_million.py $million_args
# Exact GP regression at n = 1e6, d = 10: one log p(y)-plus-gradient step: tessel.gp's own BBMM
# on the device (PyTorch with tessel's reductions), and GPyTorch's step with tessel.gp's kernel
# (tessel-gpytorch). It runs last: GPyTorch + KeOps before it gives its row quickly
# (GPyTorch 1.11 stops it at the preconditioner), and GPyTorch's dense path is skipped where its
# n x n matrices exceed the GPU. The warm-up step on 4000 points (above GPyTorch's
# preconditioning size: the same path) compiles the kernels without doubling a case's time; a
# case stopped at its --timeout still gives a row. GPyTorch + KeOps without its preconditioner
# (the way its KeOps kernels run in 1.11) goes last: its unpreconditioned CG may take the time
# left. Old rows go first: a skipped step leaves none.
rm -f "$out/gp_bench.jsonl" "$out/gp_bench.log"
gp_args=${GPU_CHECK_GP_BENCH:---device cuda --n 1000000 --d 10 --repeats 1 --warmup-n 4000
  --libraries tessel gpytorch gpytorch-keops tessel-gpytorch gpytorch-keops-noprec
  --timeout $(($(left) - 10))}
# shellcheck disable=SC2086
bench_step gp_bench gp_bench "$py" bench/gp_bench.py $gp_args
if [[ -s $out/gp_bench.jsonl ]]; then
  "$py" - "$out/gp_bench.jsonl" << 'PY' | tee -a "$summary"
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    head = f"gpu_check: gp_bench: {r['library']} n={r['n']}:"
    if "seconds" in r:
        print(head, f"{r['seconds']:.3g} s, log p(y) {r['log_likelihood']:.6g},",
              f"peak {r['peak_mb']} MB")
    else:
        print(head, ("skipped: " + r["skipped"]) if "skipped" in r else "error: " + r["error"])
PY
fi
finish "$failed"
