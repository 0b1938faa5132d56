"""Every public Python name has a numpydoc docstring whose example runs, and is in the reference.

Public names are the `__all__` of the modules a user imports (PUBLIC_MODULES); the reference is
docs/api/*.rst, whose autodoc directives the site renders. The examples run under the kernel
interpreter (no compile), so this checks what they print, not how fast.
"""
import doctest
import importlib
import inspect
import os
import pathlib
import re
import warnings

import pytest

import numpydoc.validate as numpydoc_validate  # scripts/python_env.sh installs it

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLIC_MODULES = [
    "tessel", "tessel.numpy", "tessel.torch", "tessel.lazytensor", "tessel.ot", "tessel.gp",
    "tessel.shapes", "tessel.shapes.io", "tessel.loops", "tessel.distributed", "tessel.checkpoint",
    "tessel.memory", "tessel.compat", "tessel.compat.pykeops", "tessel.compat.pykeops.numpy",
    "tessel.compat.pykeops.torch",
]
# numpydoc's checks: a docstring with a summary, every parameter documented and none unknown, a
# Returns section for functions, and an Examples section.
CALLABLE_CHECKS = {"GL08", "SS01", "PR01", "PR02", "EX01"}
FUNCTION_CHECKS = CALLABLE_CHECKS | {"RT01"}
DIRECTIVE = re.compile(r"^\.\. (?:py:)?auto(function|class|exception|data)::\s+(\S+)", re.M)
CURRENT = re.compile(r"^\.\. (?:py:)?currentmodule::\s+(\S+)", re.M)


def _key(name, obj):
    """Classes and functions are the same wherever re-exported; a constant, by name and value."""
    return id(obj) if (inspect.isclass(obj) or inspect.isroutine(obj)) else (name, repr(obj))


def _public():
    """[(module name, name, object)] over the public modules' __all__, first listing first."""
    out, seen = [], set()
    for modname in PUBLIC_MODULES:
        module = importlib.import_module(modname)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            key = _key(name, obj)
            if key not in seen:
                seen.add(key)
                out.append((modname, name, obj))
    return out


PUBLIC = _public()
DOCUMENTED = [p for p in PUBLIC if inspect.isclass(p[2]) or inspect.isroutine(p[2])]


def _reference():
    """{object id or (module, name): 'module.name'} for every autodoc directive in docs/api."""
    found = {}
    for page in sorted((ROOT / "docs" / "api").glob("*.rst")):
        text = page.read_text(encoding="utf-8")
        marks = sorted([(m.start(), "mod", m.group(1)) for m in CURRENT.finditer(text)] +
                       [(m.start(), "obj", m.group(2)) for m in DIRECTIVE.finditer(text)])
        current = None
        for _, kind, value in marks:
            if kind == "mod":
                current = value
                continue
            path = value if current is None or value.startswith("tessel.") else f"{current}.{value}"
            modname, _, name = path.rpartition(".")
            obj = getattr(importlib.import_module(modname), name)
            found[_key(name, obj)] = path
    return found


@pytest.mark.parametrize("modname", PUBLIC_MODULES)
def test_all_lists_every_public_name(modname):
    """A class or function defined in the module itself without an underscore is public (a
    helper imported from a private module is not API)."""
    module = importlib.import_module(modname)
    listed = set(module.__all__)
    unlisted = [n for n, o in vars(module).items()
                if not n.startswith("_") and n not in listed
                and (inspect.isclass(o) or inspect.isfunction(o))
                and getattr(o, "__module__", None) == modname]
    assert not unlisted, f"{modname}: public names missing from __all__: {unlisted}"


def test_reference_lists_every_public_name():
    reference = _reference()
    missing = [f"{m}.{n}" for m, n, o in PUBLIC if _key(n, o) not in reference]
    assert not missing, f"docs/api/*.rst lacks an autodoc directive for {missing}"


def _ids(entries):
    return [f"{m}.{n}" for m, n, _ in entries]


@pytest.mark.parametrize("modname, name, obj", DOCUMENTED, ids=_ids(DOCUMENTED))
def test_docstring_sections(modname, name, obj):
    """numpydoc's own validation: parameters, returns and an example; errors in a Raises."""
    checks = CALLABLE_CHECKS if inspect.isclass(obj) else FUNCTION_CHECKS
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        checks = {"GL08", "SS01"}
    if not _has_signature(obj):  # an overloaded extension type: numpydoc cannot see its
        checks = checks - {"PR02"}  # parameters, so it calls every documented one unknown
    result = numpydoc_validate.validate(f"{modname}.{name}")
    errors = [f"{code}: {msg}" for code, msg in result["errors"] if code in checks]
    assert not errors, f"{modname}.{name}: " + "; ".join(errors)
    doc = inspect.getdoc(obj) or ""
    takes = [p for p in _parameters(obj) if p not in ("self", "cls")]
    if takes and _raises(obj) and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
        assert re.search(r"^Raises\n-+$", doc, re.M), f"{modname}.{name}: no Raises section"


def _raises(obj):
    """Whether the function (a class: its __init__) raises anything itself: then its docstring
    says what, and when."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        source = inspect.getsource(target)
    except (TypeError, OSError):  # compiled (nanobind) or inherited from object
        return True
    return re.search(r"^\s*raise\b", source, re.M) is not None


def _has_signature(obj):
    try:
        inspect.signature(obj)
        return True
    except (TypeError, ValueError):
        return False


def _parameters(obj):
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return []


@pytest.mark.parametrize("modname, name, obj", DOCUMENTED, ids=_ids(DOCUMENTED))
def test_docstring_example_runs(modname, name, obj, monkeypatch):
    """The Examples section is a doctest that gives the output it shows."""
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        pytest.skip("exceptions are documented without an example")
    monkeypatch.setenv("TESSEL_CXX", "tessel-test-no-compiler")
    tests = doctest.DocTestFinder(recurse=False).find(obj, f"{modname}.{name}",
                                                       globs={"__name__": "__doctest__"})
    examples = sum(len(t.examples) for t in tests)
    assert examples, f"{modname}.{name}: the docstring has no >>> example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    cwd = os.getcwd()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's fallback notice
        for test in tests:
            runner.run(test, out=_Collect.write)
    os.chdir(cwd)
    assert not runner.failures, f"{modname}.{name}: example failed:\n{_Collect.take()}"
    _Collect.take()


class _Collect:
    """Keeps doctest's report of a failure for the assertion message."""
    text = []

    @classmethod
    def write(cls, s):
        cls.text.append(s)

    @classmethod
    def take(cls):
        out, cls.text = "".join(cls.text), []
        return out


CLASSES = [p for p in DOCUMENTED if inspect.isclass(p[2]) and not issubclass(p[2], BaseException)]


@pytest.mark.parametrize("modname, name, cls", CLASSES, ids=_ids(CLASSES))
def test_members_have_docstrings(modname, name, cls):
    """Every public method and property of a public class says what it does (the reference
    lists them, and help() shows them)."""
    missing = []
    for member in dir(cls):
        if member.startswith("_"):
            continue
        owner = next((c for c in cls.__mro__ if member in vars(c)), cls)
        if not owner.__module__.startswith("tessel"):
            continue  # inherited from another library's class (GPyTorch's Kernel): its docs
        static = inspect.getattr_static(cls, member)
        value = getattr(cls, member)
        if (callable(value) or isinstance(static, property)) and not inspect.getdoc(value):
            missing.append(member)
    assert not missing, f"{modname}.{name}: members without a docstring: {missing}"


def test_fill_puts_a_shared_part_whole_at_its_placeholder():
    """Text several docstrings share is written once and shown whole, at the placeholder's
    indent; a placeholder that is not in the docstring is refused, not silently dropped."""
    from tessel._docstrings import fill

    def f():
        """Summary.

        Examples
        --------
        {setup}
        >>> x = 1
        """

    fill(f, setup=">>> a = 1\n\n>>> b = 2")
    assert "\n        >>> a = 1\n\n        >>> b = 2\n        >>> x = 1\n" in f.__doc__

    def g():
        """Summary with {setup} inside a line."""

    with pytest.raises(ValueError, match=r"g has no line \{setup\}"):
        fill(g, setup=">>> a = 1")


def test_no_docstring_keeps_a_placeholder():
    """Every `{name}` line of a shared docstring part was filled."""
    left = [f"{m}.{n}" for m, n, o in DOCUMENTED
            if re.search(r"^\s*\{\w+\}\s*$", inspect.getdoc(o) or "", re.M)]
    assert not left, f"unfilled docstring placeholders in {left}"
