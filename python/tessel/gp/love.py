"""LOVE predictive variances for ExactGP: a Lanczos root of (K + noise)^-1 computed once per set of
hyperparameters and kept, after which the variances of any number of test points cost one kernel
product with `love_rank` columns (Pleiss et al., "Constant-time predictive distributions for
Gaussian processes", 2018; GPyTorch's fast_pred_var)."""
import hashlib

import numpy as np
import torch

from .. import _core
from . import _torch_bbmm
from ._problem import _numpy64, _Problem

__all__ = ["love_variances", "love_variances_on_device", "predictive_weights"]


def _digest(*arrays):
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.digest()


def _key(model, prob, *extra):
    # What the cached vectors depend on, by value (the points too: x shares the caller's storage,
    # which may be written in place), and the kernel's formula (a kernel swapped for another
    # with the same parameter values): a fit or an edit makes them anew.
    return (_digest(prob.params[0], _numpy64(model.noise), prob.x), prob.x.shape,
            prob.signature) + extra


def cached(model, name, key, make):
    """make(), kept on the model under `name` while `key` stays the same."""
    slot = getattr(model, name, None)
    if slot is not None and slot[0] == key:
        return slot[1]
    value = make()
    setattr(model, name, (key, value))
    return value


def love_root(model, love_rank, seed):
    """The root R (n, steps) with (K + noise)^-1 ~ R R^T, cached on the model."""
    prob = _Problem(model.kernel, model.x)
    root = cached(model, "_love_root", _key(model, prob, "root", love_rank, seed),
                  lambda: _core.gp_love_root(prob.formula, prob.params, prob.x,
                                             _numpy64(model.noise), love_rank, seed))
    return prob, root


def predictive_weights(model, r, rank, tol, stats):
    """(K + noise)^-1 r by CG, cached on the model (LOVE's "mean cache")."""
    prob = _Problem(model.kernel, model.x)
    rv = _numpy64(r)
    key = _key(model, prob, "mean", _digest(rv), rank, tol)
    alpha, rep = cached(model, "_love_mean", key, lambda: _core.gp_solve(
        prob.formula, prob.params, prob.x, _numpy64(model.noise), rv, 1, rank, tol))
    if stats is not None:
        stats["mean_solve"] = rep
    return prob, alpha


def _check_options(love_rank, check):
    who = "ExactGP.predict"
    if int(love_rank) != love_rank or love_rank < 1:
        raise ValueError(f"{who}: love_rank must be an integer >= 1, got {love_rank!r}")
    if int(check) != check or check < 0:
        raise ValueError(f"{who}: love_check must be an integer >= 0, got {check!r}")


def _spread(m, check):
    return np.unique(np.linspace(0, m - 1, min(int(check), m)).round().astype(np.int64))


def love_variances_on_device(model, xt, love_rank, seed, check, rank, tol, stats):
    """love_variances for a model whose points are on a GPU: the same Lanczos root in PyTorch
    on the device, kept on the model as the host's is."""
    _check_options(love_rank, check)
    rows = _torch_bbmm.Rows(model)
    prob = _Problem(model.kernel, model.x)  # host copies: only for the cache's key
    root = cached(model, "_love_root", _key(model, prob, "root", int(love_rank), int(seed)),
                  lambda: _torch_bbmm.love_root(model, rows, love_rank, seed))
    var = _torch_bbmm.love_variances(model, rows, xt, root)
    if stats is not None:
        stats["love_rank"] = root.shape[1]
    if check and xt.shape[0]:
        idx = _spread(xt.shape[0], check)
        exact = _torch_bbmm.variances(model, rows, xt[idx], rank, tol, 32, None)
        excess = (var[idx] - exact).cpu().numpy()
        if stats is not None:
            stats["love_check"] = dict(points=idx, exact=exact.cpu().numpy(), excess=excess,
                                       max_excess=float(excess.max()), solves=None)
    return var


def love_variances(model, pt, love_rank, seed, check, rank, tol, stats):
    """LOVE's latent variances at the test points pt (numpy, the model's dtype); with check > 0,
    that many of them (spread over pt) also solved exactly, the largest excess put in stats."""
    _check_options(love_rank, check)
    prob, root = love_root(model, int(love_rank), int(seed))
    var = _core.gp_love_variance(prob.formula, prob.params, prob.x, root, pt)
    if stats is not None:
        stats["love_rank"] = root.shape[1]
    m = pt.shape[0]
    if check and m:
        idx = _spread(m, check)
        exact, rep = _core.gp_predictive_variance(prob.formula, prob.params, prob.x,
                                                  _numpy64(model.noise),
                                                  np.ascontiguousarray(pt[idx]), rank, tol)
        excess = var[idx] - exact
        if stats is not None:
            stats["love_check"] = dict(points=idx, exact=exact, excess=excess,
                                       max_excess=float(excess.max()), solves=rep)
    return torch.as_tensor(var)
