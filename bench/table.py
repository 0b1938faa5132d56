"""Markdown tables from `tessel bench` JSON lines: one table per SIMD level, pykeops side by side.

Run: build/tessel bench --simd avx512,avx2 ... > bench.jsonl; python3 bench/table.py bench.jsonl
Lines that are not JSON (notes) are skipped. pykeops lines (backend "pykeops-cpu") are matched to
tessel's by case, n and dtype: pykeops's CPU code does not depend on tessel's SIMD level.
"""
import json
import sys


def read(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def fmt_s(v):
    return "—" if v is None else (f"{v:.3g} s" if v >= 0.01 else f"{v * 1e3:.3g} ms")


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def tables(rows):
    keops = {(r["case"], r["n"], r.get("dtype")): r for r in rows
             if r.get("backend") == "pykeops-cpu"}
    peaks = {r["simd"]: r["peak_fp_slots_per_s"] for r in rows if r.get("case") == "peak-fma-best"}
    levels = []
    for r in rows:
        if r.get("backend") == "tessel-cpu" and r.get("simd") not in levels:
            levels.append(r.get("simd"))
    out = []
    for level in levels:
        peak = peaks.get(level)
        out.append(f"### SIMD level `{level}`" +
                   (f" (peak {peak:.3g} FP lane operations/s, all threads)" if peak else ""))
        out.append("")
        out.append("| case | n | tessel median | pairs/s | FP ops/pair | fraction of bound | "
                   "pykeops median | speed-up |")
        out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            if r.get("backend") != "tessel-cpu" or r.get("simd") != level:
                continue
            k = keops.get((r["case"], r["n"], r.get("dtype")))
            km = k["median_s"] if k else None
            speed = f"{km / r['median_s']:.1f}x" if km else "—"
            out.append(f"| {r['case']} | {r['n']:,} | {fmt_s(r['median_s'])} | "
                       f"{fmt(r.get('pairs_per_s'), '.3g')} | {fmt(r.get('fp_ops_per_pair'), 'g')} | "
                       f"{fmt(r.get('fraction_of_bound'), '.2f')} | {fmt_s(km)} | {speed} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python3 bench/table.py BENCH.jsonl [...]")
    print(tables(read(sys.argv[1:])))
