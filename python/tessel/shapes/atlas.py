"""Atlas estimation: a template shape and one deformation of it per subject, fitted together.

atlas(shapes) minimises over the template's vertices T and momenta P_k on them (one set per
shape S_k, K shapes)
    loss = 1/K sum_k [attachment(phi_k(T), S_k) + regularization * H(T, P_k)],
phi_k the deformation that P_k generates from the template's vertices (Deformetrica's
deterministic atlas). The template keeps the connectivity of its start (default: the first
shape), so every deformed template is a shape of the same kind as the subjects.
"""
import torch

from .._docstrings import CIRCLE_AND_ELLIPSE, fill
from ._shape import PointCloud, check_finite, check_pair
from .registration import (RUN_PARAMETERS, _minimize, _Run, check_run, default_attachment,
                           default_model)


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE, run_parameters=RUN_PARAMETERS)
class Atlas(_Run):
    """What atlas returns: the template it estimated, the momenta onto each shape, and the run.

    Parameters
    ----------
    {run_parameters}
    template : PointCloud, Curve or Mesh
        The estimated template.
    momenta : list of (N, D) tensors
        One per subject, on the template's vertices.
    history : list of dict
        Per iteration: loss, attachment, energy, evaluations, seconds.
    converged : bool
        Whether the tolerance stopped the run.

    Notes
    -----
    ``deformed`` (the template moved onto each subject) and ``n_iter`` are computed from these.

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import atlas
    >>> a = atlas([circle, ellipse], regularization=0.01, max_iter=1)
    >>> type(a).__name__, len(a.deformed)
    ('Atlas', 2)
    """

    def __init__(self, model, attachment, template, momenta, history, converged):
        super().__init__(model, attachment, history, converged)
        self.template, self.momenta = template, momenta
        with torch.no_grad():
            self.deformed = [model.deform(template, p) for p in momenta]

    def __repr__(self):
        return (f"Atlas(subjects={len(self.momenta)}, template={self.template!r}, "
                f"n_iter={self.n_iter}, loss={self._last('loss'):.6g})")


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE)
def atlas(shapes, template=None, *, model=None, attachment=None, regularization=0.0,
          optimizer="lbfgs", lr=None, max_iter=50, tol=1e-7, progress=None, callback=None):
    """Estimates a template of `shapes` and the momenta that deform it onto each.

    Parameters
    ----------
    shapes : list of PointCloud, Curve or Mesh
        The subjects, of one dimension, dtype and device.
    template : shape, optional
        The start (default: the first shape).
    model, attachment
        As register's (their defaults from the template and the first shape).
    regularization : float, default 0.0
        The weight of each deformation's energy (without it nothing keeps the template from
        drifting between the subjects: a small positive value is the usual choice).
    optimizer, lr, max_iter, tol, progress
        As register's.
    callback : callable, optional
        ``callback(record, (template_points, momenta))`` after each iteration; True stops.

    Returns
    -------
    Atlas
        The template, the momenta per subject and the history.

    Raises
    ------
    ValueError
        Fewer than one shape, shapes of different kinds, dimensions, dtypes or devices,
        non-finite points, or register's errors on the optimization's arguments.

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import LDDMM, GaussianKernel, KernelNorm, atlas
    >>> a = atlas([circle, ellipse], model=LDDMM(GaussianKernel(0.5), n_steps=3),
    ...           attachment=KernelNorm(0.5), regularization=0.01, max_iter=3)
    >>> len(a.momenta), tuple(a.template.points.shape)
    (2, (20, 2))
    """
    shapes = list(shapes)
    if not shapes:
        raise ValueError("tessel.shapes.atlas: shapes is empty; expected at least one shape")
    template = shapes[0] if template is None else template
    for k, s in enumerate(shapes):
        if not isinstance(s, PointCloud):
            raise TypeError(f"tessel.shapes.atlas: shapes[{k}] must be a PointCloud, Curve or "
                            f"Mesh, got {type(s).__name__}")
        check_pair("atlas", template, s)
        check_finite("atlas", f"shapes[{k}].points", s.points)
    check_finite("atlas", "template.points", template.points)
    check_run("atlas", regularization, max_iter, tol)
    model = default_model(template, shapes[0]) if model is None else model
    attachment = default_attachment(template, shapes[0]) if attachment is None else attachment
    t = template.points.detach().clone().requires_grad_(True)
    ps = [torch.zeros_like(t, requires_grad=True) for _ in shapes]
    k = len(shapes)

    def terms():
        tpl = template.with_points(t)
        att = sum(attachment(model.deform(tpl, p), s) for p, s in zip(ps, shapes)) / k
        energy = sum(model.energy(t, p) for p in ps) / k
        return att + regularization * energy, att, energy

    history, converged = _minimize("atlas", [t] + ps, terms, optimizer, lr, max_iter, tol,
                                   progress, callback,
                                   lambda: (t.detach(), [p.detach() for p in ps]))
    return Atlas(model, attachment, template.with_points(t.detach()),
                 [p.detach() for p in ps], history, converged)
