"""Registration: the momenta of a deformation that brings a source shape onto a target.

register(source, target) minimises over the momenta p0 on control points q0 (the source's
vertices unless given)
    loss(p0) = attachment(deformed source, target) + regularization * H(q0, p0),
H the deformation's energy, with L-BFGS (strong Wolfe line search) by default or any torch
optimizer, and returns a `Registration`: the momenta, the deformed shape, the model and a
history with, per iteration, the loss, the attachment, the energy, the evaluations and the time.
"""
import math
import numbers
import sys
import time

import torch

from .._docstrings import CIRCLE_AND_ELLIPSE, fill
from ._shape import check_finite, check_pair
from .attachments import KernelNorm, Varifold
from .kernels import GaussianKernel
from .lddmm import LDDMM


def diameter(*shapes):
    """The diagonal of the bounding box of the shapes' vertices (their common scale)."""
    pts = torch.cat([s.points.detach() for s in shapes])
    return float((pts.max(0).values - pts.min(0).values).norm())


def default_model(source, target):
    """LDDMM with a Gaussian kernel of width a tenth of the shapes' diameter, 10 Ralston steps
    (KeOps's LDDMM tutorial's integrator)."""
    return LDDMM(GaussianKernel(0.1 * diameter(source, target)), n_steps=10, integrator="ralston")


def default_attachment(source, target):
    """Curves and meshes: the unoriented (Binet) varifold at a twentieth of the diameter, as
    KeOps's tutorial and Deformetrica; point clouds: the Gaussian kernel norm at that scale."""
    scale = 0.05 * diameter(source, target)
    if source.normals is None or target.normals is None:
        return KernelNorm(scale)
    return Varifold(scale, orientation="binet")


# The first parameters of the classes that register and atlas return (see _Run).
RUN_PARAMETERS = """model : LDDMM
    The deformation model.
attachment : callable
    The data term."""


class _Run:
    """What register's and atlas's results share: the model and data term they ran with, the
    optimizer's history and whether the tolerance stopped it."""

    def __init__(self, model, attachment, history, converged):
        self.model, self.attachment = model, attachment
        self.history, self.converged = history, converged

    @property
    def n_iter(self):
        """The number of iterations run (the history's length)."""
        return len(self.history)

    def _last(self, key):
        """The last iteration's `key` (NaN before the first)."""
        return self.history[-1].get(key, math.nan) if self.history else math.nan


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE, run_parameters=RUN_PARAMETERS)
class Registration(_Run):
    """What register returns: the momenta it found, the source they deform, and the run.

    Parameters
    ----------
    {run_parameters}
    source : PointCloud, Curve or Mesh
        The registered shape.
    control_points : (N, D) tensor
        Where the momenta sit.
    momenta : (N, D) tensor
        The optimized momenta.
    history : list of dict
        One per iteration: iteration, loss, attachment, energy, evaluations, seconds.
    converged : bool
        Whether the tolerance stopped the run.

    Notes
    -----
    ``deformed`` is the source moved by the momenta (computed on first use) and ``n_iter`` the
    number of iterations.

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import register
    >>> r = register(circle, ellipse, max_iter=2)
    >>> type(r).__name__, tuple(r.deformed.points.shape), len(r.history)
    ('Registration', (20, 2), 2)
    """

    def __init__(self, model, attachment, source, control_points, momenta, history, converged):
        super().__init__(model, attachment, history, converged)
        self.control_points, self.momenta = control_points, momenta
        with torch.no_grad():
            self.deformed = self.deform(source)

    def deform(self, shape):
        """Any shape (the source, a finer mesh of it, a grid of points) moved by the
        registration's deformation."""
        if isinstance(shape, torch.Tensor):
            return self.model.shoot(self.control_points, self.momenta, shape)[2]
        return self.model.deform(shape, self.momenta, control_points=self.control_points)

    def __repr__(self):
        return (f"Registration(n_iter={self.n_iter}, loss={self._last('loss'):.6g}, "
                f"attachment={self._last('attachment'):.6g}, "
                f"energy={self._last('energy'):.6g}, converged={self.converged})")


def _optimizer(optimizer, params, lr, who):
    if optimizer == "lbfgs":
        # One iteration per step; max_eval bounds its line search (PyTorch 2 gives the search
        # max_eval minus the step's first evaluation, which defaults to nothing for max_iter=1).
        return torch.optim.LBFGS(params, lr=1.0 if lr is None else lr, max_iter=1, max_eval=25,
                                 line_search_fn="strong_wolfe", history_size=20)
    if optimizer in ("adam", "sgd"):
        if lr is None:
            raise ValueError(f"tessel.shapes.{who}: optimizer={optimizer!r} needs lr (a step "
                             "size in units of momentum)")
        return (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(params, lr=lr)
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        return optimizer(params) if lr is None else optimizer(params, lr=lr)
    if callable(optimizer):
        opt = optimizer(params)
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"tessel.shapes.{who}: optimizer(params) returned "
                            f"{type(opt).__name__}; expected a torch.optim.Optimizer")
        return opt
    raise ValueError(f"tessel.shapes.{who}: optimizer must be 'lbfgs', 'adam', 'sgd', a "
                     f"torch.optim.Optimizer class or a function params -> optimizer, got "
                     f"{optimizer!r}")


class _Progress:
    """One line per iteration on stderr: from the start (True), never (False), or once the run
    has taken `after` seconds (None)."""

    def __init__(self, setting, max_iter, who, after=5.0):
        self.setting, self.max_iter, self.after, self.who = setting, max_iter, after, who
        self.start = time.perf_counter()

    def show(self, rec):
        if self.setting is False:
            return
        if self.setting is None and time.perf_counter() - self.start < self.after:
            return
        print(f"{self.who}: iteration {rec['iteration']}/{self.max_iter}  loss "
              f"{rec['loss']:.6g}  attachment {rec['attachment']:.6g}  energy "
              f"{rec['energy']:.6g}  {rec['seconds']:.3g} s", file=sys.stderr, flush=True)


def _check_args(source, target, control_points, momenta):
    who = "register"
    check_pair(who, source, target)
    q0 = source.points.detach() if control_points is None else control_points
    for name, t in (("control_points", q0), ("momenta", momenta)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[1] != source.dim:
            raise ValueError(f"tessel.shapes.register: {name} must be an (N, {source.dim}) "
                             f"tensor, got {getattr(t, 'shape', type(t).__name__)}")
        if t.dtype != source.dtype or t.device != source.device:
            raise ValueError(f"tessel.shapes.register: {name} are {t.dtype} on {t.device} but "
                             f"the source {source.dtype} on {source.device}; expected the same")
    if momenta is not None and momenta.shape != q0.shape:
        raise ValueError(f"tessel.shapes.register: momenta has shape {tuple(momenta.shape)}; "
                         f"expected {tuple(q0.shape)} (one per control point)")
    for name, t in (("source.points", source.points), ("target.points", target.points),
                    ("control_points", q0), ("momenta", momenta)):
        if t is not None:
            check_finite(who, name, t)
    return q0


def check_run(who, regularization, max_iter, tol):
    """The optimization's own arguments (register's, atlas's)."""
    def fail(name, value, expected):
        raise ValueError(f"tessel.shapes.{who}: {name} = {value!r}; expected {expected}")
    for name, value in (("regularization", regularization), ("tol", tol)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
                value >= 0 and math.isfinite(value)):
            fail(name, value, "a finite number >= 0")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        fail("max_iter", max_iter, "an integer >= 1")


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE)
def register(source, target, *, model=None, attachment=None, regularization=0.0,
             control_points=None, momenta=None, optimizer="lbfgs", lr=None, max_iter=50,
             tol=1e-7, progress=None, callback=None):
    """Registers `source` onto `target` and returns a Registration.

    The momenta p0 on the control points are optimized so that the deformed source matches the
    target: loss = attachment(deformed, target) + regularization * H(q0, p0).

    Parameters
    ----------
    source, target : PointCloud, Curve or Mesh
        Of one dimension, dtype and device.
    model : LDDMM, optional
        Default: a Gaussian kernel at a tenth of the diameter.
    attachment : callable, optional
        ``loss(deformed, target)``; default the Binet varifold for curves and meshes, a kernel
        norm for point clouds.
    regularization : float, default 0.0
        The weight of the energy H(q0, p0) in the loss (0: KeOps's tutorial's).
    control_points : (N, D) tensor, optional
        Where the momenta sit (default: the source's vertices).
    momenta : (N, D) tensor, optional
        The start (default: zeros).
    optimizer : str, class or callable, default "lbfgs"
        "lbfgs" (strong Wolfe line search), "adam" or "sgd" (with lr), a torch optimizer class, or
        a function params -> optimizer. One ``step`` per iteration.
    lr : float, optional
        The learning rate of "adam" / "sgd".
    max_iter : int, default 50
        Iterations in all.
    tol : float, default 1e-7
        Stop once an iteration changes the loss by less than tol times its value.
    progress : bool, optional
        One line per iteration on stderr: True, False, or None (after 5 s of running).
    callback : callable, optional
        ``callback(record, momenta)`` after each iteration (record: the history's dict);
        returning True stops the run.

    Returns
    -------
    Registration
        The momenta, the deformed source and the history.

    Raises
    ------
    ValueError
        Shapes of different dimensions, dtypes or devices, non-finite points, control points or
        momenta, an unknown optimizer, a regularization or tol that is not a finite number >= 0,
        or max_iter < 1.
    FloatingPointError
        The loss, or the optimizer's iterate, became non-finite (a step too large).

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import LDDMM, GaussianKernel, Varifold, register
    >>> r = register(circle, ellipse, model=LDDMM(GaussianKernel(0.5), n_steps=5),
    ...              attachment=Varifold(0.5, orientation="binet"), max_iter=5)
    >>> r.n_iter, r.history[-1]["attachment"] < 0.01 * r.history[0]["attachment"]
    (5, True)
    """
    check_run("register", regularization, max_iter, tol)
    q0 = _check_args(source, target, control_points, momenta)
    model = default_model(source, target) if model is None else model
    attachment = default_attachment(source, target) if attachment is None else attachment
    p0 = torch.zeros_like(q0) if momenta is None else momenta.detach().clone()
    p0.requires_grad_(True)

    def terms():
        deformed = model.deform(source, p0, control_points=control_points)
        att = attachment(deformed, target)
        energy = model.energy(q0, p0)
        return att + regularization * energy, att, energy

    history, converged = _minimize("register", [p0], terms, optimizer, lr, max_iter, tol,
                                   progress, callback, lambda: p0.detach())
    return Registration(model, attachment, source, control_points if control_points is not None
                        else source.points.detach(), p0.detach(), history, converged)


def _minimize(who, params, terms, optimizer, lr, max_iter, tol, progress, callback, state):
    """Runs the optimizer on params, one step per iteration, terms() -> (loss, attachment,
    energy); returns (history, converged)."""
    opt = _optimizer(optimizer, params, lr, who)
    evals = {"n": 0}
    last = {}

    def closure():
        opt.zero_grad()
        loss, att, energy = terms()
        loss.backward()
        evals["n"] += 1
        last.update(loss=float(loss.detach()), attachment=float(att.detach()),
                    energy=float(energy.detach()), at=[p.detach().clone() for p in params])
        return loss

    def values_at_iterate():
        """The loss terms at the optimizer's new iterate: the last evaluation's when it was
        there (L-BFGS's line search usually ends on it), else one more forward pass."""
        if not all(torch.equal(a, p.detach()) for a, p in zip(last["at"], params)):
            with torch.no_grad():
                loss, att, energy = terms()
            last.update(loss=float(loss), attachment=float(att), energy=float(energy))
        return {k: last[k] for k in ("loss", "attachment", "energy")}

    history, converged, show = [], False, _Progress(progress, max_iter, who)
    previous = math.inf
    for it in range(1, max_iter + 1):
        start, before = time.perf_counter(), evals["n"]
        try:
            opt.step(closure)
            values = values_at_iterate()
        except ValueError as err:
            _blame_the_step(who, it, params, last, err)
        rec = dict(iteration=it, evaluations=evals["n"] - before,
                   seconds=time.perf_counter() - start, **values)
        if not math.isfinite(rec["loss"]):
            raise FloatingPointError(f"tessel.shapes.{who}: the loss became {rec['loss']} at "
                                     f"iteration {it}; lower lr or the kernel's width")
        history.append(rec)
        show.show(rec)
        if callback is not None and callback(rec, state()):
            break
        # A stalled loss, not a rising one (Adam's steps need not descend).
        if abs(previous - rec["loss"]) <= tol * abs(rec["loss"]):
            converged = True
            break
        previous = rec["loss"]
    return history, converged


def _blame_the_step(who, it, params, last, err):
    """Re-raises err, a model's refusal of its input, unless the input was the optimizer's
    non-finite iterate (the caller's were checked before the run): then the step is to blame."""
    if all(bool(torch.isfinite(p.detach()).all()) for p in params):
        raise err
    loss = last.get("loss", 0.0)
    cause = (f"the loss became {loss}" if not math.isfinite(loss) else
             "the optimizer's step made the parameters non-finite")
    raise FloatingPointError(f"tessel.shapes.{who}: {cause} at iteration {it}; lower lr or the "
                             "kernel's width") from err


__all__ = ["register", "Registration", "default_model", "default_attachment", "diameter"]
