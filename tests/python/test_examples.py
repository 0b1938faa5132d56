"""The Python examples run as scripts (at small sizes here) and pass their own checks."""
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.mark.parametrize("script, args", [
    ("gaussian_kernel.py", "3000"), ("hamiltonian.py", "3000"), ("lddmm_shooting.py", "300"),
    ("knn_classifier.py", "5000"),
    ("sinkhorn_seed.py", ["--n", "400", "--iters", "30", "--variant", "all"]),
    ("sinkhorn_until_convergence.py", ["--n", "300", "--dtype", "float64", "--check",
                                       "--levels"]),
    ("unrolled_reconstruction.py", ["--n", "32", "--iters", "2"]),
    ("invertible_network.py", ["--n", "8", "--iters", "6"]),
    ("lddmm_reversible.py", ["--n", "300", "--iters", "8"]),
])
def test_example_runs(script, args):
    args = [args] if isinstance(args, str) else list(args)
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True,
                         text=True, env=dict(os.environ), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip(), "the example printed nothing"
    assert "nanobind: leaked" not in out.stderr, out.stderr  # leak reporting stays on
