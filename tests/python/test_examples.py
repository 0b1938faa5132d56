"""The Python examples run as scripts (the variants the documentation build does not run) and
pass their own checks; every example has a gallery page (docs/auto_examples) with a figure."""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
DOCS = ROOT / "docs"
# _common.py holds the checked examples' shared ending; it is no example (no gallery page).
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


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
    ("distributed_torchrun.py", ["--nproc", "2", "--points", "2000", "--png",
                                 "{tmp}/sharded.png"]),
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
    for path in SCRIPTS:
        lines = path.read_text(encoding="utf-8").split("\n")
        assert lines[0] == '"""' and lines[1] and set(lines[2]) == {"="}, path.name
        assert len(lines[2]) == len(lines[1]), f"{path.name}: title underline length"


def _gallery_pattern():
    """docs/conf.py's default filename_pattern: the scripts sphinx-gallery runs."""
    tree = ast.parse((DOCS / "conf.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "TESSEL_DOCS_EXAMPLES"):
            return node.args[1].value
    raise AssertionError("docs/conf.py: no filename_pattern read from TESSEL_DOCS_EXAMPLES")


def test_shared_ending_is_no_gallery_page():
    """_common.py (run_example) is imported by examples, not run as one: docs/conf.py's
    ignore_pattern keeps it out of the gallery, and each example names it only when run."""
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    ignore = re.search(r'"ignore_pattern": r"([^"]+)"', conf).group(1)
    assert re.search(ignore, str(EXAMPLES / "_common.py"))
    for path in SCRIPTS:
        text = path.read_text(encoding="utf-8")
        if "_common" in text:  # bench/ loads examples as modules, without this folder on sys.path
            main_block = text[text.index('if __name__ == "__main__":'):]
            assert "from _common import run_example" in main_block, path.name


def _pyplot_calls(tree):
    """The names called as plt.<name>(...) and as <anything>.<name>(...), and whether a call
    passes title= (a helper that draws its own titled figure, as tessel.shapes.io.plot_shapes)."""
    direct, methods, titled = set(), set(), False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            titled |= any(k.arg == "title" for k in node.keywords)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            methods.add(node.func.attr)
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "plt":
                direct.add(node.func.attr)
    return direct, methods, titled


def test_every_example_draws_a_figure():
    """Each gallery page shows what its example computes (not sphinx-gallery's placeholder
    thumbnail): the script draws a titled matplotlib figure and shows or saves it, and a script
    the documentation build does not run names, as its thumbnail, an image that exists."""
    pattern = _gallery_pattern()
    for path in SCRIPTS:
        text = path.read_text(encoding="utf-8")
        direct, methods, titled = _pyplot_calls(ast.parse(text))
        assert "import matplotlib.pyplot as plt" in text, f"{path.name}: no matplotlib"
        assert direct & {"subplots", "figure"}, f"{path.name}: draws no figure"
        assert titled or methods & {"set_title", "suptitle"}, f"{path.name}: figure untitled"
        # run_example (_common.py) shows the figure that plot() drew.
        shown = "show" in direct or "savefig" in methods or "run_example(main, plot)" in text
        assert shown, f"{path.name}: figure not shown or saved"
        if not re.search(pattern, str(path)):
            thumb = re.search(r'^# sphinx_gallery_thumbnail_path = "([^"]+)"$', text, re.M)
            assert thumb, f"{path.name}: not run by the gallery, and no thumbnail path"
            assert (DOCS / thumb.group(1)).is_file(), f"{path.name}: {thumb.group(1)} missing"
