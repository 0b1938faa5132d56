"""The benchmark scripts run (on the CPU, at tiny sizes) and print well-formed JSON lines."""
import json
import os
import pathlib
import subprocess
import sys

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
