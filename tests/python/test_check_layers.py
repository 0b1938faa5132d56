"""scripts/check_layers.py fails on what it is there to refuse: the engine naming a backend, a
module below the compatibility layer importing it, an include up a layer, a function over the
length limit; a clean tree passes."""
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "check_layers.py")


def check(root):
    p = subprocess.run([sys.executable, SCRIPT, "--root", str(root)], capture_output=True,
                       text=True)
    return p.returncode, p.stdout


def tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


CLEAN = {
    "src/engine/dispatch.cpp": '#include "backend/registry.hpp"\nint f() { return 0; }\n',
    "src/backend/registry.hpp": "#pragma once\n",
    "src/backend/cuda/launch.cpp": '#include "backend/registry.hpp"\n',
    "python/tessel/__init__.py": "",
    "python/tessel/ot/__init__.py": "from .. import cluster\n",
    "python/tessel/cluster.py": "",
    "python/tessel/compat/__init__.py": "from ..ot import cluster\n",
}


def test_a_clean_tree_passes(tmp_path):
    rc, out = check(tree(tmp_path, CLEAN))
    assert rc == 0, out


@pytest.mark.parametrize("rel, text, said", [
    ("src/engine/half_io.cpp", "auto& d = reg.get(BackendId::Cuda);\n", "names a backend"),
    ("src/algos/solve.cpp", "KernelBackend& b = cuda_backend();\n", "names a backend"),
    ("src/engine/x.cpp", '#include "backend/cuda/driver.hpp"\n', "names a backend"),
    ("python/tessel/ot/multiscale.py", "from ..compat.pykeops.torch import cluster\n",
     "imports tessel.compat"),
    ("python/tessel/cluster.py", "import tessel.compat\n", "imports tessel.compat"),
    ("src/backend/registry.cpp", '#include "engine/dispatch.hpp"\n', "upper layer"),
])
def test_each_violation_fails(tmp_path, rel, text, said):
    files = dict(CLEAN)
    files["src/engine/dispatch.hpp"] = "#pragma once\n"
    files["src/backend/cuda/driver.hpp"] = "#pragma once\n"
    files[rel] = text
    rc, out = check(tree(tmp_path, files))
    assert rc == 1 and said in out, out


def test_a_comment_naming_a_backend_is_no_violation(tmp_path):
    files = dict(CLEAN)
    files["src/engine/x.cpp"] = "int g();  // unlike BackendId::Cuda, this asks the registry\n"
    rc, out = check(tree(tmp_path, files))
    assert rc == 0, out


def check_length(root, limit=10):
    p = subprocess.run([sys.executable, SCRIPT, "--root", str(root), "--function-limit",
                        str(limit)], capture_output=True, text=True)
    return p.returncode, p.stdout


def cpp_function(name, body_lines):
    body = "".join(f"  x += {k};  // {{ a brace in a comment\n" for k in range(body_lines))
    return f"int {name}(int x) {{\n  auto f = [&] {{ return x; }};\n{body}  return f();\n}}\n"


def test_function_length_counts_cpp_and_python(tmp_path):
    files = {
        "src/ops/short.cpp": "namespace tessel {\n" + cpp_function("fine", 5) + "}\n",
        "python/tessel/short.py": "def fine():\n" + "    x = 1\n" * 5,
    }
    rc, out = check_length(tree(tmp_path, files))
    assert rc == 0, out
    files["src/ops/long.cpp"] = ("namespace tessel {\nstruct S {\n" + cpp_function("long_one", 12)
                                 + "};\n}\n")
    files["python/tessel/long.py"] = "def long_one():\n" + "    x = '{'\n" * 12
    rc, out = check_length(tree(tmp_path, files))
    assert rc == 1 and "src/ops/long.cpp:3: 16 lines" in out and "(long_one)" in out, out


def test_a_table_can_be_exempted(tmp_path):
    text = "// function-length: table\n" + cpp_function("table", 12)
    rc, out = check_length(tree(tmp_path, {"src/ops/t.cpp": text}))
    assert rc == 0, out
