"""The Python package's products import downward only: compat at the edge, loops on the core alone.

Read from the sources (every import, inside functions too), so a deferred import cannot hide an
upward edge. scripts/check_layers.py finds import cycles; this finds imports that run the wrong
way between products without forming one.
"""
import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "python" / "tessel"


def _module_name(path):
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path):
    """The tessel modules (dotted names, as written) that the file imports."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m == "tessel" or m.startswith("tessel.")}


MODULES = {_module_name(p): _imports(p) for p in sorted(PKG.rglob("*.py"))}


def _under(module, package):
    return module == package or module.startswith(package + ".")


def test_the_package_is_read():
    assert "tessel.loops.checkpoint" in MODULES and "tessel.ot.multiscale" in MODULES
    assert "tessel._cluster.torch" in MODULES["tessel.compat.pykeops.torch.cluster"]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _under(m, "tessel.compat")))
def test_nothing_below_the_edge_imports_compat(module):
    assert not [m for m in MODULES[module] if _under(m, "tessel.compat")], module


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, "tessel.loops")))
def test_loops_use_the_core_only(module):
    # The memory tools are differentiation machinery for any PyTorch loop: they sit below the
    # front end and tessel.ot, which build on them (tessel._exit and tessel._docstrings, the
    # shared docstring text, import nothing of tessel).
    outside = [m for m in MODULES[module] if not (_under(m, "tessel.loops") or
                                                  m in ("tessel", "tessel._core") or
                                                  _under(m, "tessel._exit") or
                                                  _under(m, "tessel._docstrings"))]
    assert not outside, (module, outside)


@pytest.mark.parametrize("leaf", ["tessel._exit", "tessel._docstrings"])
def test_the_leaves_below_loops_import_nothing_of_tessel(leaf):
    assert not [m for m in MODULES[leaf] if _under(m, "tessel")]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, "tessel._cluster")))
def test_cluster_helpers_sit_below_ot(module):
    assert not [m for m in MODULES[module] if _under(m, "tessel.ot")], module


@pytest.mark.parametrize("module",
                         sorted(m for m in MODULES if not _under(m, "tessel.distributed")))
def test_nothing_in_one_process_imports_distributed(module):
    # The sharded layer builds on the front end and tessel.ot; a module of one process that
    # imported it would pull torch.distributed into every import of tessel.
    assert not [m for m in MODULES[module] if _under(m, "tessel.distributed")], module
