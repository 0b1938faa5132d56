"""The benchmark scripts run (on the CPU, at tiny sizes) and print well-formed JSON lines."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def test_gpu_bench_smoke_on_cpu():
    out = subprocess.run([sys.executable, str(BENCH / "gpu_bench.py"), "--device", "cpu", "--n",
                          "300", "--reps", "1", "--libs", "tessel", "dense"],
                         capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    timed = [r for r in rows if r.get("status") == "ok"]
    assert {r["case"] for r in timed} == {"gauss-sum", "gauss-grad", "lse", "argkmin"}
    assert all(r["median_s"] > 0 for r in timed)
    assert any(r.get("ratio") == "dense/tessel" for r in rows)


def test_gpu_scripts_parse_and_gpu_check_names_its_usage(tmp_path):
    """scripts/gpu_check.sh runs on a GPU machine only (its CPU part, up to the GPU gate, was
    run by hand: exit 3 with the reason); here: both scripts parse, and a call without the output
    folder fails with the usage line instead of writing somewhere."""
    scripts = BENCH.parent / "scripts"
    for name in ("gpu_check.sh", "gpu_prepare.sh"):
        r = subprocess.run(["bash", "-n", str(scripts / name)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    r = subprocess.run(["bash", str(scripts / "gpu_check.sh")], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and "usage: scripts/gpu_check.sh OUT_DIR" in r.stderr


def test_bench_table_groups_levels_and_matches_pykeops(tmp_path):
    lines = [
        {"case": "peak-fma-best", "simd": "avx2", "peak_fp_slots_per_s": 5e10},
        {"case": "gauss-sum", "n": 30000, "dtype": "float32", "backend": "tessel-cpu",
         "simd": "avx512", "median_s": 0.15, "pairs_per_s": 6e9, "fp_ops_per_pair": 21,
         "fraction_of_bound": 0.7},
        {"case": "gauss-sum", "n": 30000, "dtype": "float32", "backend": "tessel-cpu",
         "simd": "avx2", "median_s": 0.3, "pairs_per_s": 3e9, "fp_ops_per_pair": 21,
         "fraction_of_bound": 0.8},
        {"case": "gauss-sum", "n": 30000, "dtype": "float32", "backend": "pykeops-cpu",
         "median_s": 3.0},
    ]
    path = tmp_path / "b.jsonl"
    path.write_text("a note line\n" + "\n".join(json.dumps(r) for r in lines) + "\n")
    out = subprocess.run([sys.executable, str(BENCH / "table.py"), str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.index("`avx512`") < text.index("`avx2`")
    assert "(peak 5e+10" in text
    assert "| gauss-sum | 30,000 | 0.15 s | 6e+09 | 21 | 0.70 | 3 s | 20.0x |" in text
    assert "| gauss-sum | 30,000 | 0.3 s | 3e+09 | 21 | 0.80 | 3 s | 10.0x |" in text


def test_ot_bench_smoke_and_table(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / "ot_bench.py"), "--n", "200", "--d", "3",
                          "--repeats", "1", "--impls", "tessel", "tessel-multiscale",
                          "geomloss-tensorized", "flash-sinkhorn"], capture_output=True, text=True,
                         env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    by = {r["impl"]: r for r in rows}
    assert by["tessel"]["seconds"] > 0 and by["tessel"]["grad_norm"] > 0
    assert "skipped" in by["flash-sinkhorn"]  # CUDA only
    ms = by["tessel-multiscale"]
    assert ms["seconds"] > 0 and 0 < ms["kept_blocks"] <= 1 and ms["dropped_mass"] >= 0
    if "seconds" in by["geomloss-tensorized"]:  # geomloss installed: the same value
        assert abs(by["geomloss-tensorized"]["value"] - by["tessel"]["value"]) <= 1e-5 * abs(
            by["tessel"]["value"])
    path = tmp_path / "ot.jsonl"
    path.write_text(out.stdout)
    t = subprocess.run([sys.executable, str(BENCH / "ot_bench.py"), "--table", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr
    assert "| 200 | 3 | tessel |" in t.stdout and "1.0x" in t.stdout



def test_ot_hvp_bench_agrees_with_dense_autograd_and_tabulates(tmp_path):
    # The implicit mode's Hessian-vector product against dense autograd through the iterations
    # to convergence: the bench's own accuracy column must show agreement, balanced and not.
    rows = []
    for reach in ([], ["--reach", "0.5"]):
        out = subprocess.run([sys.executable, str(BENCH / "ot_hvp_bench.py"), "--n", "30",
                              "--blur", "0.3", *reach], capture_output=True, text=True,
                             env=dict(os.environ), timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        rows += [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["impl"] for r in rows] == ["tessel-implicit", "dense"] * 2
    for r in rows[1::2]:
        assert r["iterations"] > 1 and r["hvp_rel_diff"] < 1e-9 and r["value_rel_diff"] < 1e-12
    assert all(r["hvp_s"] > 0 and r["hvp_norm"] > 0 for r in rows)
    path = tmp_path / "hvp.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    t = subprocess.run([sys.executable, str(BENCH / "ot_hvp_bench.py"), "--table", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr
    assert "| 30 | 45 | 0.5 | tessel-implicit |" in t.stdout and "reference" in t.stdout

def test_half_accuracy_smoke_and_table(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / "half_accuracy.py"), "--n", "300"],
                         capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if '"case"' in line]
    assert {(r["case"], r["dtype"]) for r in rows} == {
        (c, d) for c in ("gauss-sum", "lse", "gauss-grad")
        for d in ("float32", "float16", "bfloat16")}
    for r in rows:
        # Half dtypes: the float32 reduction's error (~1e-7) is far below the output's rounding,
        # at most half an eps. float32: the reduction's own error, a few eps (exp's and the
        # blocked sum's rounding).
        bound = 0.6 if r["dtype"] != "float32" else 8
        assert 0 < r["compute_max"] <= bound * r["eps"], r
    path = tmp_path / "half.jsonl"
    path.write_text(out.stdout)
    t = subprocess.run([sys.executable, str(BENCH / "half_accuracy.py"), "--table", str(path)],
                       capture_output=True, text=True, env=dict(os.environ), timeout=60)
    assert t.returncode == 0, t.stderr
    assert "| lse | bfloat16 |" in t.stdout


def test_block_sparse_bench_smoke():
    out = subprocess.run([sys.executable, str(BENCH / "block_sparse_bench.py"), "--n", "512",
                          "--sizes", "32", "--reps", "1"], capture_output=True, text=True,
                         env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (row,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert row["cluster"] == 32 and row["n"] == 512 and row["ratio"] > 0


def test_shapes_bench_smoke_and_table():
    # tessel's side only (pykeops's first compilation takes minutes): one fresh-process run.
    out = subprocess.run([sys.executable, str(BENCH / "shapes_bench.py"), "--n", "42",
                          "--iters", "1", "--variants", "tessel", "--dtype", "float64",
                          "--table"], capture_output=True, text=True, check=True, timeout=600)
    row = json.loads(out.stdout.splitlines()[0])
    assert row["variant"] == "tessel" and row["n"] == 42 and row["seconds_per_iter"] > 0
    assert row["loss"] > 0 and row["grad_norm"] > 0
    assert "| sphere | 42 | float64 | tessel |" in out.stdout


def test_distributed_bench_smoke_and_table(tmp_path):
    """Two gloo processes at a tiny size: JSON lines with the machine, each rank's split of its
    time, the ring's result equal to one process's, and the Markdown tables."""
    out = subprocess.run([sys.executable, str(BENCH / "distributed_bench.py"), "--n", "400",
                          "--n-per-rank", "200", "--repeats", "1", "--strong", "2", "--weak",
                          "2"], capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert rows[0]["kind"] == "machine" and rows[0]["cpu"] and "load_after" in rows[-1]
    timed = [r for r in rows if "seconds" in r]
    assert len(timed) == 8 and all(r["seconds"] > 0 and r["efficiency"] > 0 for r in timed)
    ring = [r for r in timed if r["impl"] == "tessel.distributed" and r["scaling"] == "strong"]
    one = [r for r in timed if r["impl"] == "tessel.torch"][0]
    assert abs(ring[0]["checksum"] - one["checksum"]) <= 1e-5 * abs(one["checksum"])
    assert [q["rank"] for q in ring[0]["per_rank"]] == [0, 1]
    assert all(q["wait_s"] >= 0 and q["compute_s"] > 0 for q in ring[0]["per_rank"])
    path = tmp_path / "dist.jsonl"
    path.write_text(out.stdout)
    t = subprocess.run([sys.executable, str(BENCH / "distributed_bench.py"), "--table",
                        str(path)], capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr
    assert "strong scaling" in t.stdout and "| tessel.distributed | 400 | 2 x 1 |" in t.stdout


def test_plot_results_draws_the_committed_runs_and_rejects_a_bad_line(tmp_path):
    """bench/plot_results.py: real PNGs and a summary from bench/results; a malformed line or a
    line without its keys is an error naming the file and the line."""
    out = subprocess.run([sys.executable, str(BENCH / "plot_results.py"), "--out",
                          str(tmp_path / "perf")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    pngs = sorted((tmp_path / "perf").glob("*.png"))
    assert {p.name for p in pngs} >= {"kernels-gauss-sum.png", "kernels-lse.png"}
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    summary = (tmp_path / "perf" / "summary.md").read_text()
    assert "| Gaussian kernel sum |" in summary and "x (" in summary
    bad = tmp_path / "bad" / "run"
    bad.mkdir(parents=True)
    (bad / "k.jsonl").write_text('{"case": "gauss-sum", "backend": "tessel-cpu", "n": 10}\n')
    out = subprocess.run([sys.executable, str(BENCH / "plot_results.py"), "--results",
                          str(tmp_path / "bad"), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "k.jsonl:1: missing median_s, pairs_per_s" in out.stderr
    (bad / "k.jsonl").write_text("{not json\n")
    out = subprocess.run([sys.executable, str(BENCH / "plot_results.py"), "--results",
                          str(tmp_path / "bad"), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "k.jsonl:1: not a JSON line" in out.stderr


def _bench_lines(script, *args):
    out = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True,
                         text=True, env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_odeint_stiff_bench_stops_reversible_heun_early():
    (row,) = _bench_lines("odeint_stiff.py", "--cases", "decay100", "--methods",
                          "reversible_heun")
    assert "looks stiff for reversible Heun" in row["outcome"]
    assert row["steps"] + row["rejected"] < 5000


def test_ot_derivative_check_bench_reads_finite_differences():
    rows = _bench_lines("ot_derivative_check.py", "--blurs", "1e3", "--modes", "implicit")
    assert [r["diameter"] for r in rows] == [None, 2.0]
    # At blur 1e3 the fixed point is smooth in x: both derivatives within the differences' error.
    assert all(r["first"] < 1e-7 and r["second"] < 1e-7 for r in rows)


def test_gp_bench_smoke_and_table():
    # tessel and scikit-learn at a tiny size, each in its fresh process: the same exact-ish
    # log likelihood (BBMM's estimate against the dense one) and a table with the ratio.
    out = subprocess.run([sys.executable, str(BENCH / "gp_bench.py"), "--n", "300", "--d", "3",
                          "--libraries", "tessel-f64", "tessel-exact", "sklearn", "--repeats",
                          "1", "--tol", "1e-6", "--rank", "40", "--table"],
                         capture_output=True, text=True, check=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["library"] for r in rows] == ["tessel-f64", "tessel-exact", "sklearn"]
    assert rows[0]["rank"] == 40 and rows[0]["tol"] == 1e-6 and "rank" not in rows[1]
    assert all(r["seconds"] > 0 and r["n"] == 300 for r in rows)
    ours, exact, theirs = (r["log_likelihood"] for r in rows)
    assert abs(ours - theirs) < 0.05 * abs(theirs) + 5, (ours, theirs)
    assert exact == pytest.approx(theirs, rel=1e-7), (exact, theirs)
    # The estimate's standard error from its 10 probes (0.25 here, off by 0.19); none for the
    # exact values.
    se = rows[0]["log_likelihood_se"]
    assert 0 < se < 2 and abs(ours - exact) < 3 * se, (ours, exact, se)
    assert rows[1]["log_likelihood_se"] is None and rows[2]["log_likelihood_se"] is None
    assert f"| {ours:.6g} ± {se:.2g} |" in out.stdout
    assert "| 300 | sklearn |" in out.stdout


def test_gp_bench_fit_rows_climb_and_name_what_has_no_fit():
    # Five Adam steps from the bench's start raise tessel's log p(y) (by about 50 at this size);
    # scikit-learn's row says why it has no such fit.
    out = subprocess.run([sys.executable, str(BENCH / "gp_bench.py"), "--n", "300", "--d", "3",
                          "--libraries", "tessel-f64", "sklearn", "--fit", "5", "--table"],
                         capture_output=True, text=True, check=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    ours, theirs = rows
    assert ours["bench"] == "gp_fit" and ours["iterations"] == 5 and ours["seconds"] > 0
    assert ours["log_likelihood"] > ours["log_likelihood_start"] + 10, ours
    assert "seconds" not in theirs
    assert "scikit-learn's step gives the gradient" in theirs["skipped"]
    assert "| seconds per fit |" in out.stdout


def test_gp_bench_cuda_rows_name_what_cannot_run_there():
    # Decided before any case's process starts, so no GPU is needed: scikit-learn has no CUDA
    # path, GPyTorch's dense matrices exceed the memory given.
    out = subprocess.run([sys.executable, str(BENCH / "gp_bench.py"), "--device", "cuda", "--n",
                          "100000", "--libraries", "gpytorch", "sklearn",
                          "--sklearn-max", "1000000", "--dense-gib", "100"],
                         capture_output=True, text=True, check=True, timeout=120)
    rows = {r["library"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert list(rows) == ["gpytorch", "sklearn"]
    assert all(r["device"] == "cuda" and "seconds" not in r for r in rows.values())
    assert "over --dense-gib 100" in rows["gpytorch"]["skipped"]
    assert "CPU only" in rows["sklearn"]["skipped"]


def test_gp_bench_tessel_kernel_in_gpytorch_matches_its_dense_step():
    # Below GPyTorch's max_cholesky_size both take its Cholesky path: the same log p(y) whether
    # the kernel is GPyTorch's Matérn or tessel.gp's, here after a warm-up on fewer points.
    pytest.importorskip("gpytorch", reason="scripts/python_env.sh installs GPyTorch 1.11")
    out = subprocess.run([sys.executable, str(BENCH / "gp_bench.py"), "--n", "300", "--d", "3",
                          "--libraries", "gpytorch", "tessel-gpytorch", "--repeats", "1",
                          "--warmup-n", "200"],
                         capture_output=True, text=True, check=True, timeout=600)
    dense, ours = map(json.loads, out.stdout.splitlines())
    assert ours["library"] == "tessel-gpytorch" and ours["warmup_n"] == 200
    ref = dense["log_likelihood"]
    assert abs(ours["log_likelihood"] - ref) < 1e-3 * abs(ref) + 1e-3, (ours, dense)


def test_gp_million_rows_and_the_same_prediction_as_gpytorch_s_sgpr_from_the_same_start():
    # With no iteration both sparse models predict from the same inducing points and
    # hyperparameters: Titsias's posterior on both sides, so the same test RMSE and NLL.
    pytest.importorskip("gpytorch", reason="scripts/python_env.sh installs GPyTorch 1.11")
    out = subprocess.run([sys.executable, str(BENCH / "gp_million.py"), "--n", "3000",
                          "--n-test", "300", "--inducing", "24", "--subset", "200", "--iters",
                          "0", "--libraries", "tessel-sparse", "gpytorch-sgpr", "exact-subset",
                          "--table"],
                         capture_output=True, text=True, check=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    ours, theirs, subset = rows
    assert [r["library"] for r in rows] == ["tessel-sparse", "gpytorch-sgpr", "exact-subset"]
    assert ours["rmse"] == pytest.approx(theirs["rmse"], rel=1e-6)
    assert ours["nll"] == pytest.approx(theirs["nll"], rel=1e-6)
    assert subset["subset"] == 200 and 0 < subset["rmse"] < 10
    assert all(r["peak_rss_mb"] > 0 and r["n"] == 3000 for r in rows)
    assert "| tessel-sparse | 3000 | 24 |" in out.stdout
