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
