"""Atlas estimation: a template shape and one deformation of it per subject, fitted together.

atlas(shapes) minimises over the template's vertices T and momenta P_k on them (one set per
shape S_k, K shapes)
    loss = 1/K sum_k [attachment(phi_k(T), S_k) + regularization * H(T, P_k)],
phi_k the deformation that P_k generates from the template's vertices (Deformetrica's
deterministic atlas). The template keeps the connectivity of its start (default: the first
shape), so every deformed template is a shape of the same kind as the subjects.
"""
import torch

from ._shape import PointCloud, check_pair
from .registration import _minimize, default_attachment, default_model


class Atlas:
    """What atlas returns: `template` (a shape), `momenta` (one (N, D) tensor per subject, on
    the template's vertices), `deformed` (the template moved onto each subject), `model`,
    `attachment`, `history` (per iteration: loss, attachment, energy, evaluations, seconds),
    `converged`, `n_iter`."""

    def __init__(self, model, attachment, template, momenta, history, converged):
        self.model, self.attachment, self.template = model, attachment, template
        self.momenta, self.history, self.converged = momenta, history, converged
        with torch.no_grad():
            self.deformed = [model.deform(template, p) for p in momenta]

    @property
    def n_iter(self):
        return len(self.history)

    def __repr__(self):
        last = self.history[-1] if self.history else {}
        return (f"Atlas(subjects={len(self.momenta)}, template={self.template!r}, "
                f"n_iter={self.n_iter}, loss={last.get('loss', float('nan')):.6g})")


def atlas(shapes, template=None, *, model=None, attachment=None, regularization=0.0,
          optimizer="lbfgs", lr=None, max_iter=50, tol=1e-7, progress=None, callback=None):
    """Estimates a template of `shapes` (a list of PointCloud, Curve or Mesh of one dimension,
    dtype and device) and the momenta that deform it onto each; returns an Atlas.

    template: the start (default: the first shape); model, attachment: as register's (their
    defaults from the template and the first shape); regularization: the weight of each
    deformation's energy (without it, nothing keeps the template from drifting between the
    subjects: a small positive value is the usual choice); optimizer, lr, max_iter, tol,
    progress: as register's; callback(record, (template_points, momenta)) after each iteration,
    True stops.
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
    if not (float(regularization) >= 0):
        raise ValueError(f"tessel.shapes.atlas: regularization must be >= 0, got "
                         f"{regularization}")
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
