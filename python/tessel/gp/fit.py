"""Fitting a GP's hyperparameters: L-BFGS or Adam on the negative log marginal likelihood per
point, with a history, progress lines and clear failures (CG that does not converge, a loss that
goes non-finite)."""
import math
import sys
import time
import warnings

import torch

__all__ = ["fit_model"]

_OPTIMIZERS = ("lbfgs", "adam")


def _check(who, name, value, ok, expected):
    if not ok(value):
        raise ValueError(f"{who}: {name} must be {expected}, got {value!r}")


def _hyperparameters(model):
    """name -> value (softplus applied where the model stores raw values), for messages."""
    out = {}
    for name, p in model.named_parameters():
        v = p.detach()
        if name.split(".")[-1].startswith("raw_"):
            v = torch.nn.functional.softplus(v)
            name = name.replace("raw_", "")
        out[name] = [float(t) for t in v.reshape(-1)[:4]]
    return out


class _Objective:
    """-log p(y) / n with its gradient, the CG report of the last call and the checks."""

    def __init__(self, model, params, mode, opts, who):
        self.model, self.params, self.mode, self.opts, self.who = model, params, mode, opts, who
        self.n = model.n_data
        self.cg_iterations = 0
        self.unconverged = None  # the first CG report that did not converge
        self.iteration = 0

    def __call__(self, seed):
        for p in self.params:
            p.grad = None
        stats = {} if self.mode == "bbmm" else None
        try:
            lml = self.model.log_marginal_likelihood(mode=self.mode, stats=stats, seed=seed,
                                                     **self.opts)
        except ValueError as e:  # a singular K + noise, met where the optimiser went
            raise ValueError(f"{self.who}: at iteration {self.iteration} with hyperparameters "
                             f"{_hyperparameters(self.model)}: {e}") from e
        loss = -lml / self.n
        value = float(loss)
        if not math.isfinite(value):
            raise FloatingPointError(
                f"{self.who}: the loss is {value} at iteration {self.iteration} with "
                f"hyperparameters {_hyperparameters(self.model)}: rescale x and y (standardise "
                "them), lower lr or bound the noise (fixed_noise)")
        loss.backward()
        for name, p in self.model.named_parameters():
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                raise FloatingPointError(
                    f"{self.who}: the gradient in {name} is not finite at iteration "
                    f"{self.iteration} (loss {value:.6g}, hyperparameters "
                    f"{_hyperparameters(self.model)})")
        if stats is not None:
            cg = stats["cg"]
            self.cg_iterations += int(cg["iterations"])
            if self.unconverged is None and not all(cg["converged"]):
                self.unconverged = (self.iteration, cg["summary"])
        return loss

    def grad_norm(self):
        sq = sum(float((p.grad.detach() ** 2).sum()) for p in self.params if p.grad is not None)
        return math.sqrt(sq)


class _Progress:
    """Lines on stderr: every iteration on request, else once `after` seconds have passed and
    then every `every` seconds, so that a long fit shows it is alive and a short one stays
    quiet."""

    def __init__(self, who, progress, max_iter, after=3.0, every=5.0):
        self.who, self.on, self.max_iter = who, progress, max_iter
        self.after, self.every, self.last = after, every, None

    def __call__(self, row):
        if self.on is False:
            return
        t = row["seconds"]
        if self.on is None:
            if t < self.after or (self.last is not None and t - self.last < self.every):
                return
        self.last = t
        cg = f", CG {row['cg_iterations']} iterations" if row["cg_iterations"] else ""
        print(f"{self.who}: iteration {row['iteration']}/{self.max_iter}, loss "
              f"{row['loss']:.6g}, |grad| {row['grad_norm']:.3g}{cg}, {t:.1f} s",
              file=sys.stderr, flush=True)


def fit_model(model, optimizer="lbfgs", max_iter=100, lr=None, mode="auto", probes=10, rank=15,
              seed=0, tol=1e-4, cg_maxiter=0, gtol=1e-5, ftol=1e-9, progress=None,
              callback=None, who="ExactGP.fit"):
    """Fits `model`'s parameters (see ExactGP.fit); returns the history, a list of dicts."""
    _check(who, "optimizer", optimizer, lambda v: v in _OPTIMIZERS, f"one of {_OPTIMIZERS}")
    _check(who, "max_iter", max_iter,
           lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an int >= 0")
    if lr is None:
        lr = 1.0 if optimizer == "lbfgs" else 0.1
    _check(who, "lr", lr, lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
           "a finite number > 0")
    for name, v in (("gtol", gtol), ("ftol", ftol)):
        _check(who, name, v, lambda v: isinstance(v, (int, float)) and v >= 0, "a number >= 0")
    _check(who, "progress", progress, lambda v: v in (None, True, False), "None, True or False")
    if callback is not None and not callable(callback):
        raise TypeError(f"{who}: callback must be callable, got {type(callback).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{who}: the model has no parameter to fit (every hyperparameter is "
                         "fixed)")
    mode = model._mode(mode, who)
    opts = dict(probes=probes, rank=rank, tol=tol, maxiter=cg_maxiter) if mode == "bbmm" else {}
    objective = _Objective(model, params, mode, opts, who)
    show = _Progress(who, progress, max_iter)
    if optimizer == "lbfgs":
        # One L-BFGS iteration per step (its memory persists between steps); a fixed probe seed
        # makes the BBMM objective one smooth function that the line search can trust.
        opt = torch.optim.LBFGS(params, lr=lr, max_iter=1, line_search_fn="strong_wolfe",
                                tolerance_grad=0.0, tolerance_change=0.0)
    else:
        opt = torch.optim.Adam(params, lr=lr)
    history, start = [], time.perf_counter()

    def record(loss, cg_before):
        row = dict(iteration=objective.iteration, loss=float(loss),
                   grad_norm=objective.grad_norm(),
                   cg_iterations=objective.cg_iterations - cg_before,
                   seconds=time.perf_counter() - start)
        history.append(row)
        show(row)
        return row

    model.history_ = history
    for it in range(max_iter):
        objective.iteration = it
        cg_before = objective.cg_iterations
        if optimizer == "lbfgs":
            evaluations = []

            def closure():
                loss = objective(seed)
                evaluations.append(objective.grad_norm())
                return loss

            loss = opt.step(closure)
            row = record(loss, cg_before)
            row["grad_norm"] = evaluations[0]  # at the point the iteration started from
        else:
            # Fresh probes every step (GPyTorch's choice): Adam averages their noise out.
            loss = objective(seed + it)
            row = record(loss, cg_before)
            opt.step()
        stop = callback(row) if callback is not None else False
        if stop is True or row["grad_norm"] <= gtol:
            break
        if len(history) > 1 and optimizer == "lbfgs" and \
                abs(history[-2]["loss"] - row["loss"]) <= ftol * max(1.0, abs(row["loss"])):
            break
    objective.iteration = len(history)
    cg_before = objective.cg_iterations
    record(objective(seed), cg_before)  # where the fit ended
    for p in params:
        p.grad = None
    if objective.unconverged is not None:
        at, summary = objective.unconverged
        warnings.warn(f"{who}: CG did not converge at iteration {at} ({summary}); the "
                      "likelihood and its gradient are approximate there: raise cg_maxiter or "
                      "rank, or loosen tol", RuntimeWarning, stacklevel=3)
    return history
