#!/usr/bin/env bash
# Builds tessel and runs `tessel bench`, comparing with pykeops 2.3 installed in .venv.
#
# Usage: scripts/bench.sh [CASE...] [--n N] ...   (all options: build/tessel bench --help)
# JSON lines go to stdout; TESSEL_BENCH_PYKEOPS=0 or --no-pykeops skips the pykeops side.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

want_pykeops=1
[[ "${TESSEL_BENCH_PYKEOPS:-1}" == 0 ]] && want_pykeops=0
for arg in "$@"; do
  [[ "$arg" == --no-pykeops ]] && want_pykeops=0
done

# pykeops compiles its kernels with the Python headers at run time: python3-dev is needed then.
if ((want_pykeops)); then
  scripts/setup.sh python3-dev >&2
else
  scripts/setup.sh >&2
fi
scripts/build.sh >&2

if ((want_pykeops)); then
  # The venv sees the system numpy; only pykeops (and what it pulls in) lands in .venv.
  if [[ ! -x .venv/bin/python ]]; then
    echo "bench: creating .venv" >&2
    /usr/bin/python3 -m venv --system-site-packages .venv
  fi
  if ! .venv/bin/python -c "import pykeops" > /dev/null 2>&1; then
    echo "bench: installing pykeops 2.3 into .venv" >&2
    .venv/bin/pip install -q pykeops==2.3 >&2
  fi
  export PATH="$PWD/.venv/bin:$PATH"
  export TESSEL_BENCH_PYTHON="$PWD/.venv/bin/python"
fi

exec build/tessel bench "$@"
