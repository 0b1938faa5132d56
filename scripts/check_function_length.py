"""Finds functions longer than a limit (120 lines) in src/ and python/: C++ and Python.

A function that long does several things; its steps get names of their own. Python functions are
read with `ast` (a nested function counts toward the one that holds it, and on its own). C++
functions are found by their braces: a `{` after a `)` at namespace or class scope opens a
function body (lambdas and blocks inside it count toward it); comments, strings and character
literals are blanked first. A line ending in `// function-length: table` above a function exempts
it (a data table, not logic).

scripts/check_layers.py runs it (--function-limit sets the limit) with the other structure checks.
"""
import ast
import os
import re

EXEMPT = "function-length: table"
BLANK = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
SCOPE = re.compile(r'\b(namespace|struct|class|enum|union)\b[^;{}()]*$')


def _blank(text):
    """Comments and literals replaced by spaces, newlines kept (so line numbers hold)."""
    return BLANK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def cpp_functions(text):
    """(name line, first line, last line) of each function body at namespace or class scope."""
    code = _blank(text)
    stack = []  # "scope", "function" or "block" for each open brace
    out, start, head = [], 0, 0
    for i, ch in enumerate(code):
        if ch in ";}":
            head = i + 1
        if ch == "{":
            before = code[head:i]
            if SCOPE.search(before) or (before.strip().endswith("=") and "(" not in before):
                kind = "scope"
            elif all(k == "scope" for k, _ in stack) and ")" in before:
                kind = "function"
                start = code.count("\n", 0, head + len(before) - len(before.lstrip())) + 1
            else:
                kind = "block"
            stack.append((kind, start))
            head = i + 1
        elif ch == "}" and stack:
            kind, first = stack.pop()
            if kind == "function":
                out.append((first, code.count("\n", 0, i) + 1))
    return out


def python_functions(text, path):
    tree = ast.parse(text, path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield node.name, first, node.end_lineno


def exempt(lines, first):
    return first >= 2 and EXEMPT in lines[first - 2]


def check(root, limit):
    problems = []
    for base in ("src", "python"):
        for d, _, names in os.walk(os.path.join(root, base)):
            for n in sorted(names):
                path = os.path.join(d, n)
                rel = os.path.relpath(path, root)
                if n.endswith((".cpp", ".hpp", ".h", ".cu")):
                    with open(path, encoding="utf-8") as f:
                        text = f.read()
                    lines = text.split("\n")
                    for first, last in cpp_functions(text):
                        if last - first + 1 > limit and not exempt(lines, first):
                            problems.append(f"{rel}:{first}: {last - first + 1} lines "
                                            f"({lines[first - 1].strip()[:60]})")
                elif n.endswith(".py"):
                    with open(path, encoding="utf-8") as f:
                        text = f.read()
                    lines = text.split("\n")
                    for name, first, last in python_functions(text, path):
                        if last - first + 1 > limit and not exempt(lines, first):
                            problems.append(f"{rel}:{first}: {last - first + 1} lines ({name})")
    return problems
