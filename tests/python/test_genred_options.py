"""Keyword options, read by the core's one normaliser, and the Genred call signature.

Every spelling a pykeops 2.3 user writes (backend, accuracy, pykeops-only switches) means the same
in tessel.numpy / tessel.torch and in the pykeops layer; bad options are TypeErrors (unknown key,
wrong type) or ValueErrors (wrong value) naming the function and the option. A formula whose
simplification drops a variable (0 * x) keeps the signature of its text, as in pykeops.
"""
import pickle

import numpy as np
import pytest
import torch

import tessel.numpy as tn
import tessel.torch as tt
from tessel import _core, _genred
from tessel._lru import LruCache
from tessel.compat.pykeops import numpy as pkn
from tessel.compat.pykeops import torch as pkt

BUILD, CALL, SOLVE = _core.BUILD_OPTIONS, _core.CALL_OPTIONS, _core.SOLVE_OPTIONS
PYKEOPS_BACKENDS = ("auto", "CPU", "GPU", "GPU_1D", "GPU_1D_device", "GPU_1D_host", "GPU_2D",
                    "GPU_2D_device", "GPU_2D_host")


def norm(options, scope=BUILD, reduction="Sum", who="Genred"):
    return _core.normalize_options(who, options, scope, reduction)


def test_every_pykeops_backend_spelling_has_one_meaning():
    want = {"auto": "auto", "CPU": "auto"}
    for b in PYKEOPS_BACKENDS:
        assert norm({"backend": b}, CALL)["backend"] == want.get(b, "cuda"), b
    for b, canon in (("compiled", "compiled"), ("interpreter", "interpreter"), ("cuda", "cuda"),
                     ("cpu", "auto"), ("gpu", "cuda")):
        assert norm({"backend": b}, CALL)["backend"] == canon


def test_the_list_matches_installed_pykeops():
    """The backends pykeops itself accepts are the ones the normaliser maps (no stale copy)."""
    get_options = pytest.importorskip("pykeops.common.get_options")
    assert set(get_options.SetBackend.possible_options_list) == set(PYKEOPS_BACKENDS)


def test_accuracy_options_as_pykeops_reads_them():
    assert norm({"sum_scheme": "kahan_scheme"})["sum_scheme"] == "kahan"
    assert norm({"sum_scheme": "block_sum"})["sum_scheme"] == "block"
    assert norm({"sum_scheme": "direct_sum"}, reduction="Min")["sum_scheme"] == "direct"
    assert norm({"sum_scheme": "auto"}, reduction="ArgKMin")["sum_scheme"] == "block"
    assert norm({"use_double_acc": True})["accumulate_f64"] is True
    assert norm({"dtype_acc": "float64"}, reduction="LogSumExp")["accumulate_f64"] is True
    assert norm({"dtype_acc": "float32"})["accumulate_f64"] is False
    assert norm({"dtype_acc": "auto", "use_double_acc": False}) == {}
    with pytest.raises(ValueError, match="Genred: use_double_acc and dtype_acc cannot both"):
        norm({"dtype_acc": "float32", "use_double_acc": True})
    with pytest.raises(ValueError, match="Genred: dtype_acc must be 'auto' for the Min reduct"):
        norm({"dtype_acc": "float64"}, reduction="Min")
    with pytest.raises(ValueError, match="sum_scheme must be 'auto' or 'direct_sum' for the Max"):
        norm({"sum_scheme": "block_sum"}, reduction="Max")
    with pytest.raises(ValueError, match="no float16"):
        norm({"dtype_acc": "float16"})


def test_bad_options_name_the_function_the_option_and_what_was_expected():
    with pytest.raises(TypeError, match="KernelSolve: unexpected keyword option 'tolerance'; "
                                        "accepted: .*tol"):
        norm({"tolerance": 1e-3}, SOLVE, None, "KernelSolve")
    with pytest.raises(TypeError, match="Genred: use_double_acc must be True or False, got str "
                                        "'yes'"):
        norm({"use_double_acc": "yes"})
    with pytest.raises(TypeError, match="Genred: sum_scheme must be a string, got int 3"):
        norm({"sum_scheme": 3})
    with pytest.raises(TypeError, match="LazyTensor.solve: alpha must be a number, got str"):
        norm({"alpha": "1"}, SOLVE, None, "LazyTensor.solve")
    with pytest.raises(ValueError, match="KernelSolve: alpha must be a number >= 0, got "
                                         "-1.0"):
        norm({"alpha": -1.0}, SOLVE, None, "KernelSolve")
    with pytest.raises(ValueError, match="Genred: invalid backend 'TPU'; backend must be one of"):
        norm({"backend": "TPU"}, CALL)
    with pytest.raises(ValueError, match="device_id must be -1 .* got -2"):
        norm({"device_id": -2}, CALL)
    with pytest.raises(TypeError, match="unexpected keyword option 'alpha'"):
        norm({"alpha": 1.0}, BUILD)  # a solve option is not a Genred option


def test_ignored_options_are_listed_once_with_a_reason():
    ignored = dict(_core.ignored_options())
    assert {"dtype", "cuda_type", "enable_chunks", "rec_multVar_highdim", "use_fast_math",
            "optional_flags", "device_id"} == set(ignored)
    assert all(len(reason) > 20 for reason in ignored.values())
    # Accepted (their types still checked where pykeops documents one), and left out.
    assert norm(dict(enable_chunks=False, use_fast_math=True, dtype=torch.float32,
                     optional_flags=["-O0"], rec_multVar_highdim=3)) == {}
    with pytest.raises(TypeError, match="enable_chunks must be True or False"):
        norm({"enable_chunks": "no"})


def test_numpy_integers_and_none():
    assert norm({"ni": np.int64(4), "nj": None}, CALL) == {"ni": 4}
    assert norm({"maxiter": np.int32(7), "tol": np.float32(0.5)}, SOLVE, None)["maxiter"] == 7


FORMULA, ALIASES = "Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"]


def _data(n=5, m=4):
    rng = np.random.default_rng(1)
    return rng.random((n, 3)), rng.random((m, 3)), rng.random((m, 2))


@pytest.mark.parametrize("front", [tn, tt], ids=["numpy", "torch"])
def test_tessel_genred_takes_the_pykeops_spellings(front):
    x, y, b = _data()
    args = (x, y, b) if front is tn else tuple(torch.from_numpy(a) for a in (x, y, b))
    ref = front.Genred(FORMULA, ALIASES, axis=1)(*args)
    for kw in (dict(use_double_acc=True), dict(sum_scheme="kahan_scheme"),
               dict(enable_chunks=False, use_fast_math=False), dict(backend="CPU")):
        out = front.Genred(FORMULA, ALIASES, axis=1, **kw)(*args)
        np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(front.Genred(FORMULA, ALIASES, axis=1)(
        *args, backend="GPU_1D_host" if _core.cuda_available() else "CPU")),
        np.asarray(ref), rtol=1e-6)
    with pytest.raises(TypeError, match="Genred: unexpected keyword option 'sumscheme'"):
        front.Genred(FORMULA, ALIASES, sumscheme="kahan")
    with pytest.raises(TypeError, match="Genred: ni .* must be an integer"):
        front.Genred(FORMULA, ALIASES, axis=1)(*args, ni="5")


def test_compat_kernel_solve_checks_its_options():
    x = torch.rand(20, 3, dtype=torch.float64)
    b = torch.rand(20, 1, dtype=torch.float64)
    ks = pkt.KernelSolve("Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"], "B",
                         axis=1)
    with pytest.raises(ValueError, match="KernelSolve: eps must be a number >= 0"):
        ks(x, x, b, alpha=1.0, eps=-1.0)
    with pytest.raises(TypeError, match="KernelSolve: alpha must be a number, got str"):
        ks(x, x, b, alpha="1")
    k = torch.exp(-((x[:, None] - x[None]) ** 2).sum(-1))
    # alpha may be a tensor, as in pykeops's own tests
    for alpha in (1.0, torch.tensor([1.0], dtype=torch.float64)):
        a = ks(x, x, b, alpha=alpha, backend="CPU", device_id=0)
        torch.testing.assert_close(k @ a + a, b, rtol=1e-5, atol=1e-5)


# ---- a variable the simplification drops keeps its argument ---------------------------------------
DROP = "Mult(IntCst(0),Var(0,1,0))"


@pytest.mark.parametrize("Genred", [tn.Genred, pkn.Genred], ids=["tessel", "compat"])
def test_numpy_signature_of_a_dropped_variable(Genred):
    x, y = np.ones((4, 1)), np.ones((3, 1))
    g = Genred(DROP, [], reduction_op="Sum", axis=1)
    # No j-variable at all: pykeops reduces over 1 row, tessel's own Genred asks for nj.
    out = g(x) if Genred is pkn.Genred else g(x, nj=3)
    assert out.shape == (4, 1) and not out.any()
    g2 = Genred(DROP + "+Var(1,1,1)*IntCst(0)", [], reduction_op="Sum", axis=1)
    assert g2(x, y).shape == (4, 1)
    with pytest.raises(ValueError, match="expected 2 arguments|invalid number of arguments"):
        g2(x)
    with pytest.raises(ValueError, match=r"argument 0 \(Vi\(0,1\), which the simplified formula "
                                         r"does not read\) has shape \(4, 2\)"):
        g2(np.ones((4, 2)), y)


def test_the_issue_example_torch_and_compat():
    x, y = torch.ones(4, 1, dtype=torch.float64), torch.ones(3, 1, dtype=torch.float64)
    out = pkt.Genred("Mult(IntCst(0),Var(0,1,0))", [], reduction_op="Sum", axis=1)(x)
    assert out.shape == (4, 1)
    out = tt.Genred("Mult(IntCst(0),Var(0,1,0))", [], reduction_op="Sum", axis=1)(x, nj=3)
    assert out.shape == (4, 1)
    for G in (tt.Genred, pkt.Genred):
        out = G("Var(1,1,1)*Mult(IntCst(0),Var(0,1,0))", [], reduction_op="Sum", axis=1)(x, y)
        assert out.shape == (4, 1) and not out.any()


@pytest.mark.parametrize("Genred", [tt.Genred, pkt.Genred], ids=["tessel", "compat"])
def test_gradients_of_dropped_variables_are_zeros(Genred):
    x = torch.rand(4, 2, dtype=torch.float64, requires_grad=True)
    y = torch.rand(3, 2, dtype=torch.float64, requires_grad=True)
    p = torch.rand(2, dtype=torch.float64, requires_grad=True)
    # x is read; y (a j-variable beyond the ones read) and p are dropped by 0 * (...).
    g = Genred("SqNorm2(X) + IntCst(0)*(Y|P)", ["X = Vi(2)", "Y = Vj(2)", "P = Pm(2)"],
               reduction_op="Sum", axis=1)
    out = g(x, y, p)
    assert out.shape == (4, 1)
    torch.testing.assert_close(out, 3 * (x ** 2).sum(1, keepdim=True))
    gx, gy, gp = torch.autograd.grad(out.sum(), [x, y, p])
    torch.testing.assert_close(gx, 6 * x)
    assert gy.shape == y.shape and not gy.any()
    assert gp.shape == p.shape and not gp.any()
    # Second order through the same path.
    (gx,) = torch.autograd.grad(g(x, y, p).sum(), [x], create_graph=True)
    (hy,) = torch.autograd.grad(gx.sum(), [y], allow_unused=True)
    assert hy is None or not hy.any()


def test_dropped_variable_gives_the_rows():
    """The only i-variable is dropped: its argument still gives the output's rows."""
    x, b = np.ones((6, 1)), np.arange(3.0).reshape(3, 1)
    out = tn.Genred("IntCst(0)*X + B", ["X = Vi(1)", "B = Vj(1)"], axis=1)(x, b)
    np.testing.assert_allclose(out, np.full((6, 1), 3.0))
    with pytest.raises(ValueError, match="argument 0 has 6 rows but ni = 2"):
        tn.Genred("IntCst(0)*X + B", ["X = Vi(1)", "B = Vj(1)"], axis=1)(x, b, ni=2)


def test_pickle_keeps_the_options_and_signature():
    g = tn.Genred(DROP, [], axis=1, use_double_acc=True)
    h = pickle.loads(pickle.dumps(g))
    assert h._spec.settings.as_dict() == g._spec.settings.as_dict() == {"accumulate_f64": True}
    assert h._spec.n_inputs == 1


# ---- bounded caches -------------------------------------------------------------------------------
def test_lru_cache_is_bounded_and_keeps_recent_entries():
    c = LruCache(3)
    for k in range(10):
        assert c.get_or_make(k, lambda k=k: k * k) == k * k
    assert len(c) == 3
    c.get_or_make(7, lambda: pytest.fail("7 is recent; it must be cached"))
    with pytest.raises(ValueError):
        LruCache(0)


def test_gradient_cache_stays_bounded_over_many_formulas():
    size = _genred.GRAD_CACHE_SIZE
    for k in range(size + 40):  # distinct formulas (the constant differs), each differentiated
        f = _core.parse(f"X*Y*IntCst({k + 1})", ["X = Vi(1)", "Y = Vj(1)"])
        _genred.grad_of(_core.Reduction("Sum", f, 1), 0)
    assert len(_genred._grad_cache) == size
    # The torch front end's backward goes through the same cache.
    x = torch.rand(3, 1, dtype=torch.float64, requires_grad=True)
    y = torch.rand(2, 1, dtype=torch.float64)
    out = tt.Genred("X*Y*IntCst(12345)", ["X = Vi(1)", "Y = Vj(1)"], axis=1)(x, y)
    (gx,) = torch.autograd.grad(out.sum(), [x])
    torch.testing.assert_close(gx, 12345 * y.sum().expand(3, 1))
    assert len(_genred._grad_cache) == size


def test_gpu_devices_are_kept_with_the_reduction():
    """README: Genred(..., gpu_devices=[0, 1]) shares a host-array call between GPUs; the list is
    read once, when the reduction is built, and a bad one is refused there."""
    g = tn.Genred("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"], gpu_devices=[0, 1])
    assert g._spec.settings.gpu_devices == [0, 1]
    assert tn.Genred("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"])._spec.settings.gpu_devices == []
    for bad in ([0, 0], [-1], [True], [0.5]):
        with pytest.raises(ValueError, match="Genred: gpu_devices must be a list of distinct GPU"):
            tn.Genred("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"], gpu_devices=bad)
    with pytest.raises(TypeError, match="Genred: gpu_devices must be a list .* got int"):
        tn.Genred("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"], gpu_devices=0)
