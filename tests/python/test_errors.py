"""Bad arguments to the Python front ends: a TypeError or ValueError that names the function, the
argument and what was expected; never nanobind's "incompatible function arguments" or a crash."""
import re

import numpy as np
import pytest
import torch

import tessel
import tessel.numpy as tn
import tessel.torch as tt
from tessel.compat.pykeops import numpy as pkn
from tessel.compat.pykeops import torch as pkt

FORMULA = "Exp(-SqDist(X,Y))*B"
ALIASES = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"]


def args(lib="numpy", n=5, m=4):
    rng = np.random.default_rng(0)
    a = [rng.random((n, 3)), rng.random((m, 3)), rng.random((m, 2))]
    return a if lib == "numpy" else [torch.from_numpy(x) for x in a]


FRONTS = [pytest.param(tn, "numpy", id="numpy"), pytest.param(tt, "torch", id="torch")]


@pytest.mark.parametrize("front,lib", FRONTS)
def test_axis_must_be_the_integer_0_or_1(front, lib):
    with pytest.raises(TypeError, match=r"Genred: axis .* must be an integer, got float 1\.0"):
        front.Genred(FORMULA, ALIASES, axis=1.0)
    with pytest.raises(TypeError, match="Genred: axis .* must be an integer, got bool"):
        front.Genred(FORMULA, ALIASES, axis=True)
    with pytest.raises(ValueError, match=r"Genred: axis .* must be in \[0, 1\], got 2"):
        front.Genred(FORMULA, ALIASES, axis=2)


@pytest.mark.parametrize("front,lib", FRONTS)
def test_sizes_must_be_non_negative_integers(front, lib):
    g = front.Genred("B", ["B = Vj(2)"], axis=1)
    b = args(lib)[2]
    with pytest.raises(TypeError, match=r"Genred: ni \(the number of i rows\) must be an integer, "
                                        "got str '3'"):
        g(b, ni="3")
    with pytest.raises(TypeError, match="Genred: ni .* must be an integer, got float"):
        g(b, ni=3.0)
    with pytest.raises(ValueError, match=r"Genred: ni .* must be in \[0, \d+\], got -5"):
        g(b, ni=-5)
    with pytest.raises(ValueError, match=r"Genred: nj .* must be in \[0, \d+\], got -1"):
        g(b, nj=-1)
    with pytest.raises(ValueError, match="Genred: ni .* got 9223372036854775808"):
        g(b, ni=2**63)
    assert g(b, ni=3).shape == (3, 2)  # the rows come from ni when no i-variable says them


@pytest.mark.parametrize("front,lib", FRONTS)
def test_a_missing_size_names_the_python_option(front, lib):
    with pytest.raises(ValueError, match="no Vi input; pass their number as ni") as e:
        front.Genred("B", ["B = Vj(2)"], axis=1)(args(lib)[2])
    assert "Sizes" not in str(e.value)


@pytest.mark.parametrize("front,lib", FRONTS)
def test_k_must_fit_in_an_int(front, lib):
    with pytest.raises(ValueError, match=r"Genred: opt_arg \(the K of KMin\) must be in "
                                         r"\[1, 2147483647\], got 2147483648"):
        front.Genred("SqDist(X,Y)", ALIASES, "KMin", opt_arg=2**31)
    with pytest.raises(TypeError, match="Genred: opt_arg .* must be an integer, got float"):
        front.Genred("SqDist(X,Y)", ALIASES, "KMin", opt_arg=2.0)


def test_object_and_integer_arrays_are_type_errors():
    g = tn.Genred(FORMULA, ALIASES, axis=1)
    x, y, b = args()
    with pytest.raises(TypeError, match="Genred: argument 0 has dtype object; expected float32, "
                                        "float64 or float16"):
        g(x.astype(object), y, b)
    with pytest.raises(TypeError, match="Genred: argument 2 has dtype int32"):
        g(x, y, b.astype(np.int32))
    with pytest.raises(TypeError, match="KernelSolve: the arrays have dtypes float64, object"):
        tn.KernelSolve(FORMULA, ALIASES, "B")(x, x.astype(object), b)


@pytest.mark.parametrize("make", [
    lambda al: tn.Genred(FORMULA, al), lambda al: tt.Genred(FORMULA, al),
    lambda al: tt.KernelSolve(FORMULA, al, "B"), lambda al: tn.KernelSolve(FORMULA, al, "B"),
    lambda al: pkt.Genred(FORMULA, al), lambda al: pkn.Genred(FORMULA, al),
    lambda al: pkt.KernelSolve(FORMULA, al, "B", axis=1)],
    ids=["numpy", "torch", "torch_solve", "numpy_solve", "pk_torch", "pk_numpy", "pk_solve"])
def test_aliases_must_be_a_list_of_strings(make):
    with pytest.raises(TypeError, match=r"(Genred|KernelSolve): aliases must be a list of strings "
                                        "such as .* got NoneType"):
        make(None)
    with pytest.raises(TypeError, match="aliases must be a list of strings .* got str"):
        make("X = Vi(3)")
    with pytest.raises(TypeError, match=r"aliases\[1\] must be a string .* got int"):
        make(["X = Vi(3)", 3])
    with pytest.raises(ValueError, match=r"(Genred|KernelSolve): in aliases\[1\]: expected Vi, Vj, "
                                         "Pm, Var, Vx or Vy, found 'Vq'"):
        make(["X = Vi(3)", "Y = Vq(3)", "B = Vj(2)"])


def test_one_alias_parser_everywhere():
    """The forms the core reads (Vx/Vy, unnamed, Var(...)) are read by every front end alike."""
    x, y, b = args("torch", 6, 6)
    old = ["X = Vx(3)", "Y = Vy(3)", "B = Vy(2)"]
    ref = tt.Genred(FORMULA, ALIASES, axis=1)(x, y, b)
    torch.testing.assert_close(tt.Genred(FORMULA, old, axis=1)(x, y, b), ref)
    torch.testing.assert_close(
        tt.Genred("Exp(-SqDist(X,Var(1,3,1)))*B", ["X = Vi(3)", "Vj(1,3)", "B = Var(2,2,1)"],
                  axis=1)(x, y, b), ref)
    torch.testing.assert_close(pkt.Genred(FORMULA, old, axis=1)(x, y, b), ref)
    sol = tt.KernelSolve(FORMULA, old, "B")(x, x, b, alpha=0.5)
    torch.testing.assert_close(pkt.KernelSolve(FORMULA, old, "B", axis=1)(x, x, b, alpha=0.5,
                                                                         eps=1e-12), sol)
    torch.testing.assert_close(tt.KernelSolve(FORMULA, old, "Var(2,2,1)")(x, x, b, alpha=0.5),
                               sol)
    with pytest.raises(ValueError, match="KernelSolve: 'C' is neither one of the alias names "
                                         r"\['X', 'Y', 'B'\]"):
        tt.KernelSolve(FORMULA, ALIASES, "C")
    with pytest.raises(ValueError, match="does not occur in the formula"):
        tt.KernelSolve(FORMULA, ALIASES, "Vj(7,2)")


_BAD = "\ud800"  # a lone surrogate: a str, but not one UTF-8 (hence the core) can hold
_UNICODE = "must be valid Unicode text; it holds the lone surrogate '\\\\ud800' at position"


@pytest.mark.parametrize("make, who, name", [
    (lambda: tn.Genred(f"Exp(X{_BAD})", ALIASES), "Genred", "formula"),
    (lambda: tt.Genred("X", ALIASES, "LogSumExp", formula2=f"B{_BAD}"), "Genred", "formula2"),
    (lambda: tt.Genred(FORMULA, ALIASES[:2] + [f"B = Vj(2){_BAD}"]), "Genred", r"aliases\[2\]"),
    (lambda: tn.Genred(FORMULA, ALIASES, f"Sum{_BAD}"), "Genred", "reduction_op"),
    (lambda: tn.Genred(FORMULA, ALIASES, backend=f"auto{_BAD}"), "Genred", "option backend"),
    (lambda: tn.Genred(FORMULA, ALIASES)(*args(), backend=f"auto{_BAD}"), "Genred",
     "option backend"),
    (lambda: tt.KernelSolve(FORMULA, ALIASES, f"B{_BAD}"), "KernelSolve", "varinvalias"),
    (lambda: tn.KernelSolve(FORMULA, ALIASES, "B")(*args(n=4), on_nonconvergence=f"warn{_BAD}"),
     "KernelSolve", "option on_nonconvergence"),
    (lambda: pkn.Genred(f"Exp(X{_BAD})", ALIASES), "Genred", "formula"),
    (lambda: pkt.KernelSolve(FORMULA, ALIASES, f"B{_BAD}", axis=1), "KernelSolve", "varinvalias"),
    (lambda: pkt.generic_sum(FORMULA, f"a = Vi(2){_BAD}", *ALIASES), "generic_sum", "output"),
    (lambda: pkt.Vi(torch.ones(3, 1)).sum(1, sum_scheme=f"direct_sum{_BAD}"), "LazyTensor.sum",
     "option sum_scheme"),
], ids=["formula", "formula2", "alias", "reduction", "option", "call-option", "varinvalias",
        "solve-option", "pk-formula", "pk-varinvalias", "pk-output", "pk-lazy-option"])
def test_text_with_a_lone_surrogate_is_a_value_error_naming_the_argument(make, who, name):
    """A lone surrogate reached the binding: "parse(): incompatible function arguments ... parse(
    text: str)" (or std::bad_cast for options), naming an internal function and contradicting
    itself. Now a ValueError naming the user's function and argument."""
    with pytest.raises(ValueError, match=rf"^{who}: {name} {_UNICODE}"):
        make()


def test_formula_must_be_text_or_a_formula():
    with pytest.raises(TypeError, match="Genred: formula must be a formula string such as .* got "
                                        "int"):
        tn.Genred(123, ALIASES)


def test_generic_sum_checks_the_output_dim():
    """pykeops ignores the output alias's dim (and returns another shape); tessel says so."""
    with pytest.raises(ValueError, match=re.escape("generic_sum: the output 'a = Vi(2)' declares "
                                                   "dim 2 but the formula 'SqDist(x,y)' gives "
                                                   "dim 1")):
        pkt.generic_sum("SqDist(x,y)", "a = Vi(2)", "x = Vi(3)", "y = Vj(3)")
    with pytest.raises(ValueError, match="generic_logsumexp: .* declares dim 3"):
        pkn.generic_logsumexp("-SqDist(x,y)", "a = Vj(3)", "x = Vi(3)", "y = Vj(3)")
    with pytest.raises(ValueError, match="generic_argmin: .* declares dim 1 .* gives dim 3"):
        pkt.generic_argmin("x-y", "a = Vi(1)", "x = Vi(3)", "y = Vj(3)")
    with pytest.raises(TypeError, match="generic_sum: the output must be an alias string"):
        pkt.generic_sum("SqDist(x,y)", None, "x = Vi(3)", "y = Vj(3)")
    x, y = args("torch")[:2]
    out = pkt.generic_sum("SqDist(x,y)", "a = Vi(1)", "x = Vi(3)", "y = Vj(3)")(x, y)
    assert out.shape == (5, 1)


def test_gpu_backend_without_a_gpu_is_the_cores_clear_error():
    if tessel.cuda_available():
        pytest.skip("this machine has a usable GPU")
    x, y, b = args("torch")
    with pytest.raises(ValueError, match="CUDA is not usable: "):
        pkt.Genred(FORMULA, ALIASES, axis=1)(x, y, b, backend="GPU")
    with pytest.raises(ValueError, match="CUDA is not usable: "):
        tt.Genred(FORMULA, ALIASES, axis=1)(x, y, b, backend="cuda")


@pytest.mark.parametrize("make", [
    lambda **kw: tn.Genred(FORMULA, ALIASES, **kw), lambda **kw: tt.Genred(FORMULA, ALIASES, **kw),
    lambda **kw: pkt.Genred(FORMULA, ALIASES, **kw), lambda **kw: pkn.Genred(FORMULA, ALIASES, **kw),
    lambda **kw: tn.KernelSolve(FORMULA, ALIASES, "B", **kw),
    lambda **kw: pkt.KernelSolve(FORMULA, ALIASES, "B", axis=1, **kw)],
    ids=["numpy", "torch", "pk_torch", "pk_numpy", "solve", "pk_solve"])
def test_options_are_checked_by_the_core_normaliser(make):
    """One reader of the options: the same TypeError / ValueError from every front end."""
    with pytest.raises(TypeError, match=r"(Genred|KernelSolve): use_double_acc must be True or "
                                        "False, got str 'yes'"):
        make(use_double_acc="yes")
    with pytest.raises(TypeError, match="sum_scheme must be a string, got int 3"):
        make(sum_scheme=3)
    with pytest.raises(ValueError, match="(Genred|KernelSolve): sum_scheme must be one of 'auto', "
                                         "'block_sum', 'kahan_scheme', 'direct_sum'"):
        make(sum_scheme="pairwise")
    with pytest.raises(ValueError, match="dtype_acc must be 'auto', 'float32' or 'float64' "
                                         r"\(tessel has no float16\)"):
        make(dtype_acc="float16")


def test_unknown_options_of_tessel_front_ends_are_type_errors():
    with pytest.raises(TypeError, match="Genred: unexpected keyword option 'dtypeacc'"):
        tn.Genred(FORMULA, ALIASES, dtypeacc="float64")
    with pytest.raises(TypeError, match="KernelSolve: unexpected keyword option 'alpha'"):
        tt.KernelSolve(FORMULA, ALIASES, "B", alpha=1.0)  # alpha belongs to the call
LEAK_SCRIPT = r"""
import numpy as np
import torch
import tessel.numpy as tn
import tessel.torch as tt
from tessel.torch import LazyTensor

f, al = "Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"]
x, y, b = np.random.rand(5, 3), np.random.rand(4, 3), np.random.rand(4, 2)
out_np = tn.Genred(f, al, axis=1)(x, y, b)
X = torch.rand(5, 3, requires_grad=True)
Y, B = torch.rand(4, 3), torch.rand(4, 2)
# Graphs left alive at exit: torch never frees their Python objects.
loss = tt.Genred(f, al, axis=1)(X, Y, B).sum()
(g,) = torch.autograd.grad(loss, [X], create_graph=True)
d2 = g.square().sum()
K = (-((LazyTensor(X[:, None, :]) - LazyTensor(Y[None, :, :])) ** 2).sum(-1)).exp()
lt = K.sum(1).sum()
lt.backward()
sol = tt.KernelSolve(f, al, "B")(X, X, torch.rand(5, 2), alpha=0.5).sum()
# The loop tools hold the user's function (and the Genreds it calls) on their graphs.
field = tt.Genred("Exp(-SqDist(X,Y))*B", ["X=Vi(3)", "Y=Vj(3)", "B=Vj(3)"])
y0 = torch.rand(4, 3, requires_grad=True)
ode = tt.odeint_reversible(lambda t, y: (field(y[0], y[0], y[1]), field(y[1], y[1], y[0])),
                           (y0, 2 * y0), torch.tensor([0.0, 1.0]), steps_per_interval=2)
loop = tt.checkpoint_loop(lambda s, k: s + 0.1 * field(s, s, s), y0, 3, 2)
fix = tt.fixed_point(lambda z, a: 0.5 * torch.tanh(field(z, z, z)) + a, torch.zeros(4, 3), (y0,))
print("ok")
"""


def test_no_nanobind_leaks_at_exit(tmp_path):
    """Leak reporting stays on: an interpreter that ran Genred, LazyTensor, KernelSolve, the loop
    tools and torch autograd (graphs still alive at exit included) ends without nanobind
    reporting a leak."""
    import os
    import subprocess
    import sys
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(
        tessel.__file__)), env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, "-c", LEAK_SCRIPT], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert "nanobind: leaked" not in r.stderr, r.stderr
    assert "leaked" not in r.stderr, r.stderr


def test_error_tiers_map_to_python_exceptions():
    """User errors are TypeError or ValueError by kind; a broken invariant is tessel.InternalError,
    a RuntimeError that `except ValueError` does not mistake for bad input."""
    assert issubclass(tessel.InternalError, RuntimeError)
    assert not issubclass(tessel.InternalError, (ValueError, TypeError))
    with pytest.raises(TypeError, match="tessel::_raise: a type error"):
        tessel._core._raise("type")
    with pytest.raises(ValueError, match="tessel::_raise: a value error"):
        tessel._core._raise("value")
    with pytest.raises(tessel.InternalError,
                       match=r"tessel: internal error in .*: an internal error \(module\.cpp:\d+\); "
                             "please report it"):
        tessel._core._raise("internal")
    x, y, b = args()
    g = tn.Genred(FORMULA, ALIASES, axis=1)
    with pytest.raises(TypeError, match="input 1 has dtype float32 but input 0 has float64"):
        g(x, y.astype(np.float32), b)
