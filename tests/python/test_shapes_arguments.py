"""tessel.shapes' arguments: defaults that work, and inputs that cannot be computed refused by a
ValueError naming the function, the argument, what was expected and what was given."""
import math

import pytest
import torch

from tessel.shapes import (LDDMM, Curve, GaussianKernel, Mesh, NormalizedLDDMM, PointCloud,
                           register)
from tessel.shapes.attachments import Varifold

pytestmark = pytest.mark.usefixtures("interpreted")

F64 = torch.float64


def test_varifold_defaults_to_the_binet_orientation():
    s = Mesh.icosphere(1)
    t = s.with_points(s.points * torch.tensor([1.2, 0.9, 1.0], dtype=F64))
    v = Varifold(0.5)
    assert v.orientation == "binet" and v.orientation_scale is None
    assert float(v(s, t)) == float(Varifold(0.5, orientation="binet")(s, t)) > 0


def cloud(n, seed, d=2):
    return torch.rand(n, d, dtype=F64, generator=torch.Generator().manual_seed(seed))


def spoiled(t, value, row=2):
    t = t.clone()
    t[row, 1] = value
    return t


MODELS = [LDDMM(GaussianKernel(0.5)), LDDMM(GaussianKernel(0.5), integrator="reversible"),
          LDDMM(GaussianKernel(0.5), snapshots=2), NormalizedLDDMM(GaussianKernel(0.5))]


@pytest.mark.parametrize("model", MODELS, ids=repr)
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_shooting_refuses_non_finite_starts(model, value):
    q, p, x = cloud(6, 0), 0.1 * cloud(6, 1), cloud(4, 2)
    who = type(model).__name__
    for args, name in (((spoiled(q, value), p), "q0"), ((q, spoiled(p, value)), "p0"),
                       ((q, p, spoiled(x, value)), "points")):
        with pytest.raises(ValueError, match=rf"{who}.shoot: {name}\[2\] = \[.*\] is not finite"):
            model.shoot(*args)
    with pytest.raises(ValueError, match=rf"{who}.energy: p0\[2\] = .* is not finite"):
        model.energy(q, spoiled(p, value))
    with pytest.raises(ValueError, match=rf"{who}.shoot: p0\[2\] = .* is not finite"):
        model.deform(Curve.polyline(q), spoiled(p, value))


def test_register_names_its_non_finite_arguments():
    src = Curve.polyline(cloud(6, 3), closed=True)
    tgt = src.with_points(src.points + 0.1)
    model = LDDMM(GaussianKernel(0.5, backend="interpreter"), n_steps=2)
    q = src.points
    cases = [(dict(control_points=spoiled(q, math.nan)), r"control_points\[2\]"),
             (dict(momenta=spoiled(torch.zeros_like(q), math.inf)), r"momenta\[2\]"),
             (dict(control_points=q[:, :1]), r"control_points must be an \(N, 2\) tensor"),
             (dict(momenta=[[0.0, 0.0]]), r"momenta must be an \(N, 2\) tensor, got list")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=rf"tessel.shapes.register: {message}"):
            register(src, tgt, model=model, max_iter=1, **kwargs)
    for s, t, name in ((src.with_points(spoiled(q, math.nan)), tgt, "source"),
                       (src, tgt.with_points(spoiled(q, math.inf)), "target")):
        with pytest.raises(ValueError, match=rf"register: {name}.points\[2\] = .* is not finite"):
            register(s, t, model=model, max_iter=1)


def test_a_non_finite_iterate_blames_the_step():
    src = Curve.polyline(cloud(6, 3), closed=True)
    model = LDDMM(GaussianKernel(0.5, backend="interpreter"), n_steps=2)
    with pytest.raises(FloatingPointError, match=r"register: the optimizer's step made the "
                                                 r"parameters non-finite at iteration 1"):
        register(src, src.with_points(src.points + 0.1), model=model, optimizer="sgd",
                 lr=math.inf, max_iter=2)
