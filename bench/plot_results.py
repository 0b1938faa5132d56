#!/usr/bin/env python3
"""Plots the benchmark results kept in bench/results: time and pairs/s against N, side by side.

Reads every `*.jsonl` under bench/results (or --results), whose lines are the JSON that the
benchmarks print: `tessel bench` / bench/pykeops_case.py lines (`case`, `backend`, `n`, `m`,
`median_s`, `pairs_per_s`) and bench/ot_bench.py lines (`impl`, `n`, `d`, `seconds` or
`skipped`). Each folder's `machine.json` says where and when the run was made. Writes PNG files
and `summary.md` (the ratios at the largest N both sides ran, for the docs to include) into --out.
bench/gp_bench.py's lines (`bench` = "gp_step") are checked here and drawn by the gallery's GP
example (examples/python/gp_mauna_loa_co2.py), beside the fit they are about.

    python3 bench/plot_results.py --out docs/_generated/perf
"""
import argparse
import collections
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNEL_KEYS = ("case", "backend", "n", "median_s", "pairs_per_s")
OT_KEYS = ("impl", "n", "d")
GP_KEYS = ("library", "n")
NAMES = {"tessel-cpu": "tessel", "pykeops-cpu": "pykeops 2.3", "tessel": "tessel.ot",
         "tessel-multiscale": "tessel.ot multiscale", "geomloss-online": "GeomLoss online (pykeops)",
         "geomloss-multiscale": "GeomLoss multiscale (pykeops)",
         "geomloss-tensorized": "GeomLoss tensorized (dense torch)"}
CASES = {"gauss-sum": "Gaussian kernel sum", "gauss-grad": "its gradient in x",
         "lse": "LogSumExp", "argkmin": "ArgKMin, K = 10"}


class ResultError(ValueError):
    """A results file that cannot be read: the message names the file and the line."""


def read(results):
    """([kernel row], [OT row], {folder: machine}) from every .jsonl under `results`."""
    kernels, ot, machines = [], [], {}
    files = sorted(pathlib.Path(results).rglob("*.jsonl"))
    if not files:
        raise ResultError(f"plot_results: no .jsonl file under {results}")
    for path in files:
        folder = path.parent.name
        meta = path.parent / "machine.json"
        if folder not in machines:
            try:
                machines[folder] = json.loads(meta.read_text()) if meta.exists() else {}
            except json.JSONDecodeError as e:
                raise ResultError(f"plot_results: {meta}: not JSON ({e})") from None
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ResultError(f"plot_results: {path}:{k}: not a JSON line ({e})") from None
            if not isinstance(row, dict):
                raise ResultError(f"plot_results: {path}:{k}: expected a JSON object")
            row["_folder"] = folder
            # The FMA-peak probes and the speed-up lines `tessel bench` derives from the others.
            if str(row.get("case", "")).startswith("peak-") or "speedup_vs_pykeops" in row:
                continue
            if row.get("bench") == "gp_step":
                _require(row, GP_KEYS, path, k)
                if not any(key in row for key in ("seconds", "error", "skipped")):
                    raise ResultError(f"plot_results: {path}:{k}: a gp_step line needs seconds, "
                                      "error or skipped")
            elif str(row.get("bench", "")).startswith("gp_"):
                continue  # the other GP benches' lines: tabulated in RESULTS.md, not drawn here
            elif "case" in row:
                _require(row, KERNEL_KEYS, path, k)
                kernels.append(row)
            elif "impl" in row:
                _require(row, OT_KEYS, path, k)
                if "skipped" not in row:
                    _require(row, ("seconds",), path, k)
                    ot.append(row)
            else:
                raise ResultError(f"plot_results: {path}:{k}: neither a kernel line (case), "
                                  "an OT line (impl) nor a GP line (bench)")
    return kernels, ot, machines


def _require(row, keys, path, k):
    missing = [key for key in keys if key not in row]
    if missing:
        raise ResultError(f"plot_results: {path}:{k}: missing {', '.join(missing)}")


def _label(machine):
    cpu = machine.get("cpu", "unknown CPU")
    return f"{cpu}, {machine.get('threads', '?')} threads, {machine.get('date', 'undated')}"


def _save(fig, path, plt):
    """Writes the figure as a PNG and frees it; returns the file's name."""
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def _grouped(rows, key, member):
    """{key(row): {row[member]: [rows]}}, sorted by key: one figure per key, a line per member."""
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        groups[key(r)][r[member]].append(r)
    return sorted(groups.items())


def plot_kernels(rows, machines, out, plt):
    """One figure per case: median time and pairs/s against N, one line per backend."""
    written, summary = [], []
    for (case, folder), backends in _grouped(rows, lambda r: (r["case"], r["_folder"]),
                                             "backend"):
        fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(10, 3.8))
        for backend, rs in sorted(backends.items()):
            rs = sorted(rs, key=lambda r: r["n"])
            ns = [r["n"] for r in rs]
            label = NAMES.get(backend, backend)
            ax_t.loglog(ns, [r["median_s"] for r in rs], "o-", label=label)
            ax_p.semilogx(ns, [r["pairs_per_s"] for r in rs], "o-", label=label)
        ax_t.set(xlabel="N = M", ylabel="median time (s)")
        ax_p.set(xlabel="N = M", ylabel="pairs (i, j) per second")
        ax_t.legend()
        fig.suptitle(f"{CASES.get(case, case)}, D = 3, float32 — {_label(machines[folder])}",
                     fontsize=9)
        written.append(_save(fig, out / f"kernels-{case}.png", plt))
        summary.append(_ratio_line(CASES.get(case, case), backends, "tessel-cpu", "pykeops-cpu",
                                   "median_s"))
    return written, summary


def plot_ot(rows, machines, out, plt):
    """One figure per (folder, D): value + gradient time against N, one line per solver."""
    written, summary = [], []
    for (folder, d), impls in _grouped(rows, lambda r: (r["_folder"], r["d"]), "impl"):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for impl, rs in sorted(impls.items()):
            rs = sorted(rs, key=lambda r: r["n"])
            ax.loglog([r["n"] for r in rs], [r["seconds"] for r in rs], "o-",
                      label=NAMES.get(impl, impl))
        ax.set(xlabel="N = M", ylabel="value + gradient, median (s)")
        ax.legend(fontsize=8)
        ax.set_title(f"Sinkhorn divergence, D = {d}, float32\n{_label(machines[folder])}",
                     fontsize=9)
        written.append(_save(fig, out / f"ot-d{d}.png", plt))
        for ours, other in (("tessel", "geomloss-online"), ("tessel", "geomloss-tensorized"),
                            ("tessel-multiscale", "geomloss-multiscale")):
            if ours in impls and other in impls:
                summary.append(_ratio_line(f"Sinkhorn divergence + gradient, D = {d}: "
                                           f"{NAMES[ours]} vs {NAMES[other]}", impls, ours,
                                           other, "seconds"))
    return written, summary


def _ratio_line(title, groups, ours, theirs, key):
    """`title`: the speed-up of `ours` over `theirs` at the largest N both ran."""
    mine = {r["n"]: r[key] for r in groups.get(ours, [])}
    other = {r["n"]: r[key] for r in groups.get(theirs, [])}
    common = sorted(set(mine) & set(other))
    if not common:
        return f"| {title} | — | only one side ran |"
    n = common[-1]
    return (f"| {title} | {n:,} | {other[n] / mine[n]:.1f}x ({mine[n]:.3g} s against "
            f"{other[n]:.3g} s) |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--out", required=True, help="folder for the PNG files and summary.md")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        kernels, ot, machines = read(args.results)
    except ResultError as e:
        print(e, file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written, summary = plot_kernels(kernels, machines, out, plt)
    more, more_summary = plot_ot(ot, machines, out, plt)
    written += more
    lines = ["| case | N | tessel's speed-up |", "| --- | ---: | --- |"] + summary + more_summary
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    if not written:
        print(f"plot_results: nothing to plot in {args.results}", file=sys.stderr)
        return 1
    print(f"plot_results: {len(written)} figures ({', '.join(written)}) and summary.md in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
