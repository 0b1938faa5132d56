"""
Gaussian process on the Mauna Loa CO2 record
============================================

The atmospheric CO2 concentration measured at Mauna Loa (the weekly series 1958-2001 that
statsmodels ships, read from its CSV file with numpy), as monthly means: ``tessel.gp.ExactGP``
fits its kernel's hyperparameters by maximising the marginal likelihood on 1958-1998, then
extrapolates to 2004 with a 95% band, and the three held-out years 1999-2001 check the band.
The kernel is the one of Rasmussen and Williams (2006, section 5.4.3): a smooth long-term trend,
a yearly cycle whose shape drifts slowly, medium-term irregularities and a learned noise. The
second figure is the cost of one likelihood-plus-gradient step at 10,000 and 30,000 points for
tessel.gp, GPyTorch and scikit-learn, as ``bench/gp_bench.py`` measured it (``bench/results``).

Run: ``PYTHONPATH=build/python python3 examples/python/gp_mauna_loa_co2.py [ITERATIONS]``; the
gallery runs 30 L-BFGS iterations (about 10 s on 2 cores); ``100`` fits further (about 35 s:
the loss falls a little more as the medium-term term grows into a second trend, and the
held-out error stays the same). It needs statsmodels' data files only:
``pip install --no-deps statsmodels``, as scripts/python_env.sh installs them.
"""
import importlib.util
import json
import math
import pathlib
import sys
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from tessel.gp import ExactGP, Periodic, RationalQuadratic, RBF, Scale

max_iter = int(sys.argv[1]) if len(sys.argv) > 1 else 30
try:
    ROOT = pathlib.Path(__file__).resolve().parents[2]
except NameError:  # sphinx-gallery defines no __file__ and runs the script in its folder
    ROOT = pathlib.Path.cwd().parents[1]

# %%
# The data: statsmodels' weekly record (ppm, with gaps), averaged per calendar month. Months
# without a measurement are left out rather than filled in; the GP needs no regular grid.
spec = importlib.util.find_spec("statsmodels")
if spec is None:
    sys.exit("gp_mauna_loa_co2: needs statsmodels' data files: pip install --no-deps statsmodels")
csv = pathlib.Path(spec.submodule_search_locations[0]) / "datasets" / "co2" / "co2.csv"
raw = np.genfromtxt(csv, delimiter=",", skip_header=1)
day, ppm = raw[:, 0].astype(np.int64), raw[:, 1]
month = (day // 10000) * 12 + (day // 100) % 100 - 1  # months since year 0
seen = np.isfinite(ppm)
months, which = np.unique(month[seen], return_inverse=True)
co2 = np.bincount(which, ppm[seen]) / np.bincount(which)
year = months / 12 + 1 / 24  # the middle of each month
train = year < 1999
first, last = (f"{m // 12}-{m % 12 + 1:02d}" for m in (months[0], months[-1]))
print(f"{len(ppm)} weekly values ({seen.sum()} measured) -> {len(co2)} monthly means "
      f"{first} to {last}; {train.sum()} to fit on, {(~train).sum()} held out")

# Years since 1958 and standardised targets: the hyperparameters' starting values below are
# then in units that do not depend on the record's level.
x = torch.tensor(year[train] - 1958, dtype=torch.float64)[:, None]
level, spread = co2[train].mean(), co2[train].std()
y = torch.tensor((co2[train] - level) / spread)

# %%
# The kernel, each term with its own output scale: a long-term trend (RBF, decades), the
# seasonal cycle (periodic with a period of one year, times an RBF that lets its shape drift),
# and medium-term irregularities (rational quadratic, about a year). Starting values are rough
# guesses in standardised units. In 30 iterations the fit moves the amplitudes, the period and
# the short lengthscales; the likelihood is nearly flat in the two lengthscales of decades,
# which move little and stay longer than the 41 years of the record. Monthly means are
# precise: their noise variance in standardised units is near 2e-4, so the noise's floor (1e-4
# by default) is lowered.
trend = Scale(RBF(lengthscale=50.0), outputscale=1.0)
seasonal = Scale(Periodic(lengthscale=1.0, period=1.0) * RBF(lengthscale=50.0), outputscale=0.02)
medium = Scale(RationalQuadratic(lengthscale=1.0, alpha=1.0), outputscale=0.002)
gp = ExactGP(x, y, trend + seasonal + medium, noise=1e-3, noise_min=1e-6)
start = time.perf_counter()
history = gp.fit(max_iter=max_iter, mode="exact", progress=False)
elapsed = time.perf_counter() - start
print(f"exact fit, n = {len(y)}: {len(history) - 1} L-BFGS iterations in {elapsed:.1f} s, "
      f"-log p(y) / n {history[0]['loss']:.4f} -> {history[-1]['loss']:.4f}")


def ppm_of(scale):
    """An output scale in standardised units as an amplitude (standard deviation) in ppm."""
    return math.sqrt(float(scale.outputscale)) * spread


period = float(seasonal.base.a.period)
print("fitted hyperparameters (amplitudes in ppm, lengthscales in years):")
print(f"  long-term trend   amplitude {ppm_of(trend):6.2f}, lengthscale "
      f"{float(trend.base.lengthscale):.1f}")
print(f"  seasonal cycle    amplitude {ppm_of(seasonal):6.2f}, period {period:.4f}, "
      f"periodic lengthscale {float(seasonal.base.a.lengthscale):.2f}, decay "
      f"{float(seasonal.base.b.lengthscale):.1f}")
print(f"  medium term       amplitude {ppm_of(medium):6.2f}, lengthscale "
      f"{float(medium.base.lengthscale):.2f}, alpha {float(medium.base.alpha):.2f}")
print(f"  noise             sd {math.sqrt(float(gp.noise)) * spread:.3f}; mean "
      f"{level + spread * float(gp.mean_constant):.1f} ppm")

# %%
# Predictions, back in ppm: the band is for a monthly mean (the noise included), so that the
# held-out months can be checked against it.
grid = np.arange(1958.0, 2004.0, 1 / 24)


def posterior(t):
    mean, var = gp.predict(torch.tensor(t - 1958)[:, None], mode="exact", include_noise=True)
    return level + spread * mean.numpy(), spread * var.sqrt().numpy()


mean, sd = posterior(grid)
held_mean, held_sd = posterior(year[~train])
inside = float(np.mean(np.abs(co2[~train] - held_mean) <= 1.96 * held_sd))
rmse = float(np.sqrt(np.mean((co2[~train] - held_mean) ** 2)))
print(f"held-out 1999-2001: RMSE {rmse:.2f} ppm, {inside:.0%} of the months inside the 95% "
      f"band; band half-width {1.96 * sd[-1]:.2f} ppm at {grid[-1]:.1f}")
assert history[-1]["loss"] < history[0]["loss"]
assert abs(period - 1) < 0.005, period  # learned, and the data hold it at one year
assert inside >= 0.9 and rmse < 1.0, (inside, rmse)

# %%
# The record, the posterior mean and its band; the right panel zooms on the last years, where
# the band widens past the data.
fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.6, 1]})
for a in (ax, zoom):
    a.fill_between(grid, mean - 1.96 * sd, mean + 1.96 * sd, color="tab:blue", alpha=0.25,
                   lw=0, label="95% band")
    a.plot(grid, mean, color="tab:blue", lw=1, label="posterior mean")
    a.plot(year[train], co2[train], ".", color="k", ms=2, label="monthly means (fitted)")
    a.plot(year[~train], co2[~train], ".", color="tab:red", ms=4, label="held out")
    a.axvline(1999, color="0.5", lw=0.6, ls=":")
    a.set_xlabel("year")
ax.set_ylabel("CO2 (ppm)")
ax.set_title(f"Mauna Loa CO2, ExactGP fitted on {train.sum()} months")
ax.legend(fontsize=8, loc="upper left")
near = grid >= 1994
zoom.set_xlim(1994, grid[-1])
zoom.set_ylim((mean - 2.5 * sd)[near].min(), (mean + 2.5 * sd)[near].max())
zoom.set_title("1994-2004: held-out years and extrapolation")
fig.tight_layout()
plt.show()

# %%
# The cost of one likelihood-plus-gradient step against n (an ARD Matérn 5/2 in 8 dimensions,
# from ``bench/gp_bench.py``): the measured lines under ``bench/results``, not a new run. The
# committed run is one of 2026-12-05 on a 2-core AMD EPYC CPU (AVX-512) with PyTorch 1.13; each
# panel's title reads its CPU from the run's ``machine.json``. A library that failed or was
# killed at some n has no time there: it gets a cross at that n in the strip above the panel,
# and what each run said is printed.
NAMES = {"tessel": "tessel (float32)", "tessel-f64": "tessel (float64)",
         "gpytorch": "GPyTorch (dense, float32)", "gpytorch-keops": "GPyTorch + KeOps",
         "gpytorch-keops-noprec": "GPyTorch + KeOps, no preconditioner",
         "tessel-gpytorch": "GPyTorch + tessel kernel", "sklearn": "scikit-learn"}
runs = {}
for path in sorted((ROOT / "bench" / "results").rglob("*.jsonl")):
    rows = [json.loads(line) for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    rows = [r for r in rows if r.get("bench") == "gp_step"]
    if rows:
        meta = path.parent / "machine.json"
        machine = json.loads(meta.read_text()) if meta.exists() else {}
        for r in rows:
            r["run"] = path.stem  # one file, one run: times from different days stay apart
            runs.setdefault((path.parent.name, r.get("device", "cpu")), (machine, []))[1].append(r)
assert runs, "no bench/gp_bench.py results under bench/results"


def outcome(r):
    if "seconds" in r:
        return f"{r['seconds']:.3g} s, peak {r['peak_mb']:,} MiB"
    return f"failed: {r['error']}" if "error" in r else r["skipped"]


def draw_run(strip, panel, machine, device, rows):
    """Time against n per library on `panel`, failures as crosses on `strip` above it."""
    order = list(NAMES)
    # tessel's rows at a preconditioner rank other than GPyTorch's 15 are a line of their own,
    # and so are one library's rows from different runs (files), named by the file.
    key = lambda r: (r["library"], r.get("rank") if r.get("rank", 15) != 15 else None,  # noqa
                     r["run"])
    libraries = sorted({key(r) for r in rows},
                       key=lambda lr: (order.index(lr[0]) if lr[0] in order else len(order),
                                       lr[0], lr[1] or 0, lr[2]))
    runs_of = {}
    for library, rank, run in libraries:
        runs_of.setdefault((library, rank), []).append(run)
    failing = []
    for k, (library, rank, run) in enumerate(libraries):
        mine = sorted((r for r in rows if key(r) == (library, rank, run)), key=lambda r: r["n"])
        name = NAMES.get(library, library) + (f", rank {rank}" if rank else "") + \
            (f" ({run})" if len(runs_of[(library, rank)]) > 1 else "")
        for r in mine:
            print(f"  n = {r['n']:>6,}  {name:<26} {outcome(r)}")
        ran = [r for r in mine if "seconds" in r]
        failed = [r for r in mine if "error" in r]
        if ran:
            panel.plot([r["n"] for r in ran], [r["seconds"] for r in ran], "o-", color=f"C{k}",
                       label=name)
        if failed:
            row = len(failing)
            failing.append(name)
            strip.plot([r["n"] for r in failed], [row] * len(failed), "x", color=f"C{k}", ms=8,
                       mew=2)
            for r in failed:
                kind = "killed" if "exit -9" in r["error"] else "failed"
                strip.annotate(kind, (r["n"], row), xytext=(7, 0), textcoords="offset points",
                               va="center", fontsize=7, color=f"C{k}")
    ns = sorted({r["n"] for r in rows})
    seconds = [r["seconds"] for r in rows if "seconds" in r]
    low, high = min(seconds) / 2, max(seconds) * 2
    ticks = [t for t in (m * 10.0 ** e for e in range(-4, 5) for m in (1, 2, 5))
             if low <= t <= high]
    for a in (strip, panel):
        a.set_xscale("log")
        a.xaxis.set_minor_locator(plt.NullLocator())
        a.set_xticks(ns, [f"{n:,}" for n in ns])
        a.set_xlim(ns[0] / 1.6, ns[-1] * 1.6)
    panel.set_yscale("log")
    panel.yaxis.set_minor_locator(plt.NullLocator())
    panel.set_yticks(ticks, [f"{t:g}" for t in ticks])
    panel.set_ylim(low, high)
    panel.set_xlabel("n (training points)")
    panel.set_ylabel("seconds per step (median)")
    panel.legend(fontsize=7, loc="lower right")
    strip.set_yticks(range(len(failing)), failing, fontsize=7)
    strip.set_ylim(-0.6, max(len(failing), 1) - 0.4)
    strip.tick_params(axis="x", labelbottom=False)
    strip.set_title(f"one log p(y) + gradient step, Matérn 5/2, d = 8, on {device}\n"
                    f"{machine.get('cpu', '')}, {machine.get('date', '')}; top: runs that failed",
                    fontsize=9)


fig, axes = plt.subplots(2, len(runs), figsize=(6.5 * len(runs), 5), squeeze=False,
                         gridspec_kw={"height_ratios": [1, 4]})
for k, ((folder, device), (machine, rows)) in enumerate(sorted(runs.items())):
    print(f"{folder} ({machine.get('cpu', 'unknown CPU')}, {machine.get('date', 'undated')}, "
          f"{device}): {machine.get('command', '')}")
    draw_run(axes[0, k], axes[1, k], machine, device, rows)
fig.tight_layout()
plt.show()
