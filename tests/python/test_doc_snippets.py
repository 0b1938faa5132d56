"""The code in the README and the documentation pages runs as written.

Every ```python block of a page runs, in order, in one namespace per page (a page may define its
data once, as a reader running it would); a C++ block with a `main` is compiled against this
build and run. A block right after an `<!-- not run: reason -->` line is skipped: the reason is
for the reader of the source (torchrun, a GPU, minutes of work at full size).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "guide").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
SKIP = re.compile(r"<!--\s*not run:[^>]*-->\s*$")


def blocks(page, language):
    """[(line, code)] of the page's fenced blocks in `language` that are meant to run."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) != language:
            continue
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if not SKIP.search(before):
            out.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
    return out


def _rel(page):
    return str(page.relative_to(ROOT))


PY_PAGES = [p for p in PAGES if blocks(p, "python")]
CPP_PAGES = [p for p in PAGES if any("int main" in code for _, code in blocks(p, "cpp"))]


def test_the_pages_have_code_to_check():
    assert ROOT / "README.md" in PY_PAGES and ROOT / "README.md" in CPP_PAGES
    assert ROOT / "docs" / "getting_started.md" in CPP_PAGES


@pytest.mark.parametrize("page", PY_PAGES, ids=_rel)
def test_python_blocks_run(page, tmp_path):
    """One subprocess per page: a block's imports and globals never leak into another page."""
    script = ["import os, sys", f"os.chdir({str(tmp_path)!r})"]
    for line, code in blocks(page, "python"):
        script.append(f"print('--- block at line {line}', flush=True)")
        script.append(f"exec(compile({code!r}, {_rel(page) + ':' + str(line)!r}, 'exec'))")
    out = subprocess.run([sys.executable, "-c", "\n".join(script)], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ))
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]


@pytest.mark.parametrize("page", CPP_PAGES, ids=_rel)
def test_cpp_blocks_compile_and_run(page, tmp_path):
    build = ROOT / "build"
    if not (build / "libtessel.so").exists():
        pytest.skip("the C++ library is not built (scripts/build.sh)")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    for line, code in blocks(page, "cpp"):
        if "int main" not in code:
            continue
        src = tmp_path / f"block_{line}.cpp"
        src.write_text(code, encoding="utf-8")
        exe = tmp_path / f"block_{line}"
        cc = subprocess.run([cxx, "-std=c++20", "-O1", str(src), f"-I{ROOT / 'include'}",
                             f"-L{build}", "-ltessel", f"-Wl,-rpath,{build}", "-o", str(exe)],
                            capture_output=True, text=True, timeout=600)
        assert cc.returncode == 0, f"{_rel(page)}:{line} does not compile:\n{cc.stderr[-4000:]}"
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{_rel(page)}:{line} failed:\n{run.stdout}{run.stderr}"
        assert run.stdout.strip(), f"{_rel(page)}:{line} printed nothing"
