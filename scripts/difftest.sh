#!/usr/bin/env bash
# Runs the differential test against pykeops with more examples and a random (printed) seed.
#
# Usage: scripts/difftest.sh [--examples N] [--seed S]
# pykeops compiles one kernel per distinct formula (seconds each, cached under build/), so N = 100
# takes tens of minutes on a cold cache. Replay a failure with the seed it printed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

examples=100
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
while (($#)); do
  case "$1" in
    --examples) examples=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "difftest: unknown argument '$1'; expected --examples N or --seed S" >&2; exit 2 ;;
  esac
done
[[ -d build/python/tessel ]] || scripts/build.sh
echo "difftest: $examples examples, seed $seed (replay: scripts/difftest.sh --examples $examples --seed $seed)"
TESSEL_DIFFTEST_EXAMPLES=$examples TESSEL_DIFFTEST_SEED=$seed \
  TESSEL_CACHE_DIR="${TESSEL_CACHE_DIR:-$PWD/build/test-cache}" PYTHONPATH="$PWD/build/python" \
  .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/python/test_differential.py
