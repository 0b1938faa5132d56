#!/usr/bin/env bash
# One command for a bare GPU machine without network: builds tessel, runs the C++ suite (every
# CUDA test included) and the Python tests with CUDA paths, then bench/gpu_bench.py side by side
# with pykeops 2.3 on the GPU and dense PyTorch. Logs and JSON go to one folder.
#
# Usage: scripts/gpu_check.sh OUT_DIR [KIT_DIR]
#   KIT_DIR   what scripts/gpu_prepare.sh packed (default gpu-kit): GoogleTest's sources (built
#             here when the machine has no GoogleTest) and the pykeops/keopscore/geomloss and
#             flash-sinkhorn wheels
#             (installed into build-gpu/site; without them pykeops is left out of the bench)
#   PYTHON    the Python that holds PyTorch with CUDA (default python3)
#   GPU_CHECK_PYTEST  pytest arguments (default: the test files with CUDA paths)
#   GPU_CHECK_BENCH   gpu_bench.py arguments (default: --n 10000 100000 1000000 --host-budget)
#   GPU_CHECK_OT_BENCH  ot_bench.py arguments (default: CUDA, N = 1e4 .. 1e6, D = 3 and 64)
# Writes to OUT_DIR: machine.txt, build.log, ctest.log, pytest.log, gpu_bench.jsonl,
# gpu_bench.log, ot_bench.jsonl, ot_bench.log, summary.txt (also printed last). Exit status: 0 all passed; 1 a step failed;
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

note() { echo "gpu_check: $*" | tee -a "$summary"; }
finish() {
  note "done in $((SECONDS - start)) s, exit $1"
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
  note "no wheels in $kit/wheels: pykeops is left out of the bench"
fi
export PYTHONPATH=$PWD/$build/python:$site${PYTHONPATH:+:$PYTHONPATH}
export TESSEL_CACHE_DIR=$PWD/$build/test-cache

run_step "tessel build" "$out/build.log" bash -c "
  cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_BUILD_TOOLS=ON \
    -DTESSEL_BUILD_TESTS=ON -DTESSEL_BUILD_PYTHON=ON -DPython_EXECUTABLE='$py' \
    ${prefix[*]} && cmake --build '$build' -j $jobs" || finish 1

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

run_step "ctest (whole C++ suite, CUDA tests included)" "$out/ctest.log" \
  ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 300
grep -E "tests passed|tests failed" "$out/ctest.log" | tail -1 | sed 's/^/gpu_check: ctest: /' |
  tee -a "$summary"
sed -n '/The following tests FAILED/,$p' "$out/ctest.log" | grep -E "^\s*[0-9]+ - " | head -30 |
  sed 's/^ */gpu_check: ctest failure: /' | tee -a "$summary"

pytest_args=${GPU_CHECK_PYTEST:-tests/python/test_genred_torch.py tests/python/test_genred_numpy.py
  tests/python/test_genred_options.py tests/python/test_errors.py
  tests/python/test_compat_pykeops.py tests/python/test_torch_func.py tests/python/test_ot_cuda.py
  tests/python/test_block_sparse.py tests/python/test_kernel_solve.py tests/python/test_half.py}
# shellcheck disable=SC2086  # the arguments are words on purpose
run_step "pytest" "$out/pytest.log" "$py" -m pytest -q -p no:cacheprovider -rfEs $pytest_args
tail -1 "$out/pytest.log" | sed 's/^/gpu_check: pytest: /' | tee -a "$summary"

bench_args=${GPU_CHECK_BENCH:---n 10000 100000 1000000 --host-budget}
# shellcheck disable=SC2086
if PYTHONUNBUFFERED=1 "$py" bench/gpu_bench.py $bench_args > "$out/gpu_bench.jsonl" \
  2> "$out/gpu_bench.log"; then
  note "gpu_bench: ok ($(wc -l < "$out/gpu_bench.jsonl") JSON lines)"
else
  note "gpu_bench: FAILED (see gpu_bench.log)"
  failed=1
fi
# Half precision against float64 on the GPU (the table bench/RESULTS.md has for the CPU).
if PYTHONUNBUFFERED=1 "$py" bench/half_accuracy.py --n 100000 --device cuda \
  > "$out/half_accuracy.jsonl" 2> "$out/half_accuracy.log"; then
  note "half_accuracy: ok"
else
  note "half_accuracy: FAILED (see half_accuracy.log)"
  failed=1
fi
# Sinkhorn divergences: tessel.ot against GeomLoss (pykeops GPU) and flash-sinkhorn, one run.
ot_args=${GPU_CHECK_OT_BENCH:---device cuda --n 10000 100000 1000000 --d 3 64 --repeats 1
  --max-pykeops 1000000}
# shellcheck disable=SC2086
if PYTHONUNBUFFERED=1 timeout 900 "$py" bench/ot_bench.py $ot_args > "$out/ot_bench.jsonl" \
  2> "$out/ot_bench.log"; then
  note "ot_bench: ok ($(grep -c '^{' "$out/ot_bench.jsonl") rows)"
else
  note "ot_bench: FAILED or timed out (see ot_bench.log; the rows so far are in ot_bench.jsonl)"
  failed=1
fi
finish "$failed"
