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
    ("ot_seed.py", ["--n", "400", "--check"]),
    ("ot_seed.py", ["--n", "300", "--dtype", "float64", "--tol", "1e-9", "--check"]),
    ("ot_registration.py", ["--n", "600", "--steps", "25", "--png", "{tmp}/flow.png"]),
    # The real cortex at a reduced size (8 mm cells: about 1,400 vertices), a few iterations.
    ("register_fsaverage.py", ["--cell", "8", "--iters", "6", "--min-drop", "0.85", "--png",
                               "{tmp}/fsaverage.png"]),
    # Two gloo processes spawned by the example itself (no torchrun), checked against one.
    ("distributed_torchrun.py", ["--nproc", "2", "--points", "2000"]),
])
def test_example_runs(script, args, tmp_path):
    args = [args] if isinstance(args, str) else [a.format(tmp=tmp_path) for a in args]
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True,
                         text=True, env=dict(os.environ), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip(), "the example printed nothing"
    assert "nanobind: leaked" not in out.stderr, out.stderr  # leak reporting stays on
    for png in tmp_path.glob("*.png"):  # a figure the example wrote is a real PNG image
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
