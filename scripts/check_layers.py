#!/usr/bin/env python3
"""Checks the code's layering: no include that runs up a layer, no include or import cycles.

C++: every folder under src/ is a layer (backend/cpu and backend/cuda are sibling rooms of the
backend layer and may not include each other). A file may include public headers
(include/tessel/), files of its own room, and files of lower layers only. Public headers may include
only other public headers. Python: no import cycle between the modules of python/tessel, counting
imports inside functions too (a deferred import hides a cycle; it does not remove it).

The engine (src/engine, and src/algos, which drive it) names no backend: it asks the registry for
a backend and the device interface for device memory, so no BackendId, no built-in backend's
accessor and no include of backend/cpu or backend/cuda there. Python: nothing outside
tessel.compat imports tessel.compat, the pykeops compatibility layer at the package's edge.
bench/ (the benchmark cases) includes nothing from tools/ (the command that runs them). And no
function in src/ or python/ is longer than --function-limit lines (check_function_length.py).

Usage: scripts/check_layers.py [--root DIR] [--function-limit N]; prints each violation and exits 1 if there is any.
"""
import argparse
import ast
import os
import re
import sys

import check_function_length

# Top to bottom: a layer may use only the layers after it in this list.
LAYERS = ["engine", "algos", "autodiff", "backend", "codegen", "reduction", "text", "ops", "ir",
          "cache", "support"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(rel):
    """'src/backend/cpu/x.cpp' -> 'backend/cpu'; 'src/ops/op.hpp' -> 'ops'; public -> 'tessel'."""
    parts = rel.split("/")
    if parts[0] == "include":
        return "tessel"
    if parts[1] == "backend" and len(parts) > 3:
        return "backend/" + parts[2]
    return parts[1]


def layer_rank(room):
    top = room.split("/")[0]
    if top not in LAYERS:
        return None
    return len(LAYERS) - LAYERS.index(top)


def cpp_files(root):
    for base in ("src", "include"):
        for d, _, names in os.walk(os.path.join(root, base)):
            for n in sorted(names):
                if n.endswith((".cpp", ".hpp", ".h", ".cu")):
                    yield os.path.relpath(os.path.join(d, n), root)


def resolve(root, rel, target):
    for cand in (os.path.join("src", target), os.path.join("include", target),
                 os.path.join(os.path.dirname(rel), target)):
        if os.path.isfile(os.path.join(root, cand)):
            return os.path.normpath(cand)
    return None


def find_cycles(graph):
    """Returns one cycle (list of nodes) per strongly connected component larger than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_cpp(root):
    problems, graph = [], {}
    for rel in cpp_files(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        src_room = room_of(rel)
        for target in INCLUDE.findall(text):
            dep = resolve(root, rel, target)
            if dep is None:
                continue  # a generated or third-party header
            graph.setdefault(rel, set()).add(dep)
            dst_room = room_of(dep)
            if dst_room == "tessel" or dst_room == src_room:
                continue
            if src_room == "tessel":
                problems.append(f"{rel}: public header includes internal {dep}")
                continue
            a, b = layer_rank(src_room), layer_rank(dst_room)
            if a is None or b is None:
                problems.append(f"{rel}: includes {dep} from a folder with no layer "
                                f"(add it to LAYERS in {os.path.basename(__file__)})")
            elif b > a:
                problems.append(f"{rel}: includes {dep}, an upper layer ({dst_room} is above "
                                f"{src_room})")
            elif b == a and src_room != dst_room and "/" in dst_room and \
                    not src_room.startswith(dst_room):
                problems.append(f"{rel}: includes {dep} from sibling room {dst_room}")
    for cyc in find_cycles(graph):
        problems.append("include cycle: " + " -> ".join(cyc))
    return problems


# What the engine may not write: a backend's slot, a built-in backend, a backend's own files.
NAMES_A_BACKEND = re.compile(r'\bBackendId::\w+|\b(?:compiled|interpreter|cuda)_backend\(\)|'
                             r'#\s*include\s+"backend/(?:cpu|cuda)/')


def check_engine_names_no_backend(root):
    problems = []
    for rel in cpp_files(root):
        if room_of(rel) not in ("engine", "algos"):
            continue
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = NAMES_A_BACKEND.search(line.split("//")[0])
                if m:
                    problems.append(f"{rel}:{n}: the engine names a backend ({m.group(0).strip()})")
    return problems


def py_modules(root):
    base = os.path.join(root, "python")
    mods = {}
    for d, _, names in os.walk(os.path.join(base, "tessel")):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(d, n)
                rel = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                is_pkg = rel.endswith(".__init__")
                mods[rel[:-len(".__init__")] if is_pkg else rel] = (path, is_pkg)
    return mods


def check_python(root):
    mods = py_modules(root)
    graph = {}
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        targets = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = package.split(".")
                    up = up[:len(up) - (node.level - 1)]
                    mod = ".".join(up + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets.append(mod)
                targets += [mod + "." + a.name for a in node.names]
        for t in targets:
            # The longest known module that t names (an imported name may be a function).
            while t and t not in mods:
                t = t.rpartition(".")[0]
            # A module importing its own package (or an ancestor) is Python's normal idiom; the
            # package's body runs first, so that edge is no cycle.
            if not t or t == name or name.startswith(t + "."):
                continue
            graph.setdefault(name, set()).add(t)
    problems = ["import cycle: " + " -> ".join(c) for c in find_cycles(graph)]
    edge = "tessel.compat"
    for name, deps in sorted(graph.items()):
        if name == edge or name.startswith(edge + "."):
            continue
        for t in sorted(deps):
            if t == edge or t.startswith(edge + "."):
                problems.append(f"{name} imports {t}: only the compatibility layer's own "
                                "modules may (it sits at the package's edge)")
    return problems


def check_bench_below_tools(root):
    """bench/ (the benchmark cases) sits below tools/ (the `tessel` command that runs them): the
    command includes the cases, never the reverse, so no include in bench/ names a tools/ file."""
    problems = []
    bench = os.path.join(root, "bench")
    for n in sorted(os.listdir(bench)) if os.path.isdir(bench) else []:
        if not n.endswith((".cpp", ".hpp")):
            continue
        with open(os.path.join(bench, n), encoding="utf-8") as f:
            text = f.read()
        for target in INCLUDE.findall(text):
            if not os.path.isfile(os.path.join(bench, target)) and \
                    os.path.isfile(os.path.join(root, "tools", target)):
                problems.append(f"bench/{n}: includes tools/{target}, an upper layer (the "
                                "command uses the benchmark cases, not the reverse)")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--function-limit", type=int, default=120)
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    problems = (check_cpp(root) + check_engine_names_no_backend(root) + check_bench_below_tools(root)
                + check_python(root) + check_function_length.check(root, args.function_limit))
    for p in problems:
        print("check_layers:", p)
    print(f"check_layers: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
