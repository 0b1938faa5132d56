"""The table "pykeops API -> tessel status" (docs/guide/keops.md) covers every public name of pykeops 2.3 and
says "works" only of names tessel.compat.pykeops has (scripts/pykeops_api.py lists the names)."""
import importlib
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import pykeops_api  # noqa: E402

STATUSES = ("works", "works, differs", "not supported", "not provided")


def _tessel_has(key):
    """Whether tessel.compat.pykeops has the pykeops name `key` (keyed as the table writes it)."""
    base = "tessel.compat.pykeops"
    importlib.import_module(f"{base}.numpy.utils")
    importlib.import_module(f"{base}.torch.utils")
    parts = key.split(".")
    if parts[0] == "pykeops":
        paths = [[base] + parts[1:]]
    elif parts[0] in ("numpy", "torch"):
        paths = [[f"{base}.{parts[0]}"] + parts[1:]]
    else:  # in both front ends (cluster.X, LazyTensor.X, X)
        paths = [[f"{base}.{fe}"] + parts for fe in ("numpy", "torch")]
    for path in paths:
        obj = importlib.import_module(path[0])
        for name in path[1:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
    return True


@pytest.fixture(scope="module")
def table():
    pytest.importorskip("pykeops")
    try:
        names = pykeops_api.pykeops_names()
    except RuntimeError as e:  # pykeops resolved to tessel's layer: no reference to list
        pytest.skip(str(e))
    return names, pykeops_api.readme_names()


def test_readme_table_lists_every_public_name_of_pykeops(table):
    names, rows = table
    assert len(names) > 150, "the introspection of pykeops found too few names"
    missing, extra = sorted(set(names) - set(rows)), sorted(set(rows) - set(names))
    assert not missing, f"the pykeops API table (docs/guide/keops.md) misses {missing}"
    assert not extra, f"the pykeops API table (docs/guide/keops.md) lists names pykeops 2.3 lacks: {extra}"


def test_readme_table_statuses_match_tessel(table):
    _, rows = table
    for key, status in rows.items():
        kind = next((s for s in sorted(STATUSES, key=len, reverse=True) if status.startswith(s)),
                    None)
        assert kind is not None, f"`{key}`: status {status!r} is not one of {STATUSES}"
        if kind.startswith("works"):
            assert _tessel_has(key), f"`{key}` is marked {status!r} but tessel.compat lacks it"
        if kind == "not provided":
            assert not _tessel_has(key), f"`{key}` is marked 'not provided' but tessel.compat " \
                                         "has it: update the table in docs/guide/keops.md"


def test_the_check_catches_a_missing_row(tmp_path):
    pytest.importorskip("pykeops")
    text = open(pykeops_api.TABLE, encoding="utf-8").read()
    cut = text.replace("`LazyTensor.xlogx`, ", "").replace(", `LazyTensor.xlogx`", "")
    assert cut != text
    (tmp_path / "keops.md").write_text(cut, encoding="utf-8")
    missing, extra = pykeops_api.check(str(tmp_path / "keops.md"))
    assert missing == ["LazyTensor.xlogx"] and extra == []
