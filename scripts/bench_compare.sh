#!/usr/bin/env bash
# Same-run before/after comparison: builds another revision beside this tree and alternates the two
# on the C++ call overhead, the Python call overhead and gauss-sum at n = 30000.
#
# Usage: scripts/bench_compare.sh BASE_REV [ROUNDS]   (default ROUNDS = 3)
# Prints one JSON line per measurement (with "rev": "base" or "head"), then the medians and the
# head/base ratio of each figure. Absolute times on a shared machine are noisy: read the ratios.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
base_rev=${1:?usage: scripts/bench_compare.sh BASE_REV [ROUNDS]}
rounds=${2:-3}

scripts/setup.sh >&2
scripts/python_env.sh >&2
scripts/build.sh >&2

base_dir=build/bench-base
if [[ ! -d $base_dir ]] || [[ "$(git -C "$base_dir" rev-parse HEAD)" != "$(git rev-parse "$base_rev")" ]]; then
  rm -rf "$base_dir"
  git worktree prune
  git worktree add --detach "$base_dir" "$base_rev" >&2
fi
[[ -e $base_dir/.venv ]] || ln -s "$PWD/.venv" "$base_dir/.venv"
(cd "$base_dir" && scripts/build.sh >&2)

py=$PWD/.venv/bin/python
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for side in base head; do
    dir=$PWD
    [[ $side == base ]] && dir=$PWD/$base_dir
    tag() { sed -u "s/^{/{\"rev\": \"$side\", /"; }
    (cd "$dir" && build/tessel bench call-overhead --keep-cache 2> /dev/null | tag)
    (cd "$dir" && build/tessel bench gauss-sum --n 30000 --keep-cache --no-pykeops 2> /dev/null | tag)
    (cd "$dir" && TESSEL_CACHE_DIR=$dir/build/test-cache PYTHONPATH=$dir/build/python \
      "$py" bench/python_bench.py --n 2> /dev/null | tag)
  done
done | tee "$out"

"$py" - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
figures = {"call-overhead": ["overhead_s"], "gauss-sum": ["median_s"],
           "python-call-overhead": ["core_call_s", "genred_call_s", "genred_requires_grad_s"]}
for case, keys in figures.items():
    for k in keys:
        m = {}
        for side in ("base", "head"):
            v = [r[k] for r in rows if r.get("case") == case and r["rev"] == side and k in r]
            m[side] = statistics.median(v) if v else float("nan")
        print(json.dumps({"summary": f"{case}.{k}", "base_median": m["base"],
                          "head_median": m["head"], "head_over_base": m["head"] / m["base"]}))
EOF
