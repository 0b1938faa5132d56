"""The Python examples run as scripts (the variants the documentation build does not run) and
pass their own checks; every example has a gallery page (docs/auto_examples)."""
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


# The documentation build (scripts/docs.sh, in the test command) runs every script but the
# distributed one at its default size and fails on an error; these are the variants it does not
# run: dense checks, other dtypes, snapshot levels, written figures, spawned processes.
@pytest.mark.parametrize("script, args", [
    ("sinkhorn_until_convergence.py", ["--n", "300", "--dtype", "float64", "--check",
                                       "--levels"]),
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


def test_every_example_has_a_gallery_title():
    """sphinx-gallery needs an RST title first in each script's docstring, and runs every script
    but the distributed one (docs/conf.py), so each script is run by the tests or the docs."""
    for path in sorted(EXAMPLES.glob("*.py")):
        lines = path.read_text(encoding="utf-8").split("\n")
        assert lines[0] == '"""' and lines[1] and set(lines[2]) == {"="}, path.name
        assert len(lines[2]) == len(lines[1]), f"{path.name}: title underline length"
