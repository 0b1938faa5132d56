"""tessel.shapes.register: it brings a source onto a target, reports its history, accepts any
torch optimizer and attachment, shows progress when asked, and refuses bad arguments."""
import math

import pytest
import torch

from tessel.shapes import LDDMM, Curve, GaussianKernel, PointCloud, atlas, register

F64 = torch.float64


def ellipse(n, a, b, shift=0.0):
    t = torch.linspace(0, 2 * math.pi, n + 1, dtype=F64)[:-1]
    return Curve.polyline(torch.stack((a * t.cos(), b * t.sin() + shift), 1), closed=True)


def dense_mmd(scale):
    """A kernel norm between the shapes' measures written densely (the test's own attachment)."""
    def k(x, y):
        return torch.exp(-((x[:, None] - y[None]) ** 2).sum(-1) / scale ** 2)

    def loss(a, b):
        xa, wa, xb, wb = a.centers, a.measures, b.centers, b.measures
        return wa @ k(xa, xa) @ wa - 2 * wa @ k(xa, xb) @ wb + wb @ k(xb, xb) @ wb
    return loss


SRC, TGT = ellipse(40, 1.0, 1.0), ellipse(40, 1.5, 0.7, 0.2)
MODEL = LDDMM(GaussianKernel(0.4, backend="interpreter"), n_steps=5)


def test_lbfgs_brings_the_source_onto_the_target():
    r = register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), max_iter=25, progress=False)
    first, last = r.history[0], r.history[-1]
    assert last["loss"] < 0.01 * first["loss"], r
    assert set(first) == {"iteration", "loss", "attachment", "energy", "evaluations", "seconds"}
    assert [h["iteration"] for h in r.history] == list(range(1, r.n_iter + 1))
    # The deformed shape is the model's deformation of the source by the returned momenta, and
    # the history's last attachment is its distance to the target.
    moved = MODEL.deform(SRC, r.momenta)
    torch.testing.assert_close(r.deformed.points, moved.points, rtol=0, atol=0)
    assert torch.equal(r.deformed.edges, SRC.edges)
    assert dense_mmd(0.2)(moved, TGT).item() == pytest.approx(last["attachment"], rel=1e-12)
    assert last["energy"] == pytest.approx(MODEL.energy(SRC.points, r.momenta).item(), rel=1e-12)
    assert "Registration(n_iter=" in repr(r)


def test_regularization_trades_attachment_for_energy():
    loose = register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), max_iter=15,
                     progress=False)
    tight = register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), max_iter=15,
                     regularization=1.0, progress=False)
    assert tight.history[-1]["energy"] < loose.history[-1]["energy"]
    assert tight.history[-1]["loss"] == pytest.approx(
        tight.history[-1]["attachment"] + tight.history[-1]["energy"], rel=1e-12)


@pytest.mark.parametrize("optimizer", ["adam", torch.optim.Adam,
                                       lambda ps: torch.optim.SGD(ps, lr=0.02, momentum=0.5)])
def test_any_torch_optimizer(optimizer):
    lr = None if callable(optimizer) and not isinstance(optimizer, type) else 0.05
    r = register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), optimizer=optimizer, lr=lr,
                 max_iter=8, progress=False)
    assert r.history[-1]["loss"] < r.history[0]["loss"]
    assert all(h["evaluations"] == 1 for h in r.history)


def test_control_points_momenta_and_callback():
    ctrl = SRC.points[::4].clone()
    seen = []
    r = register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), control_points=ctrl,
                 max_iter=20, progress=False, callback=lambda rec, p: seen.append(p.shape) or
                 rec["iteration"] == 3)
    assert r.n_iter == 3 and seen == [ctrl.shape] * 3 and r.momenta.shape == ctrl.shape
    torch.testing.assert_close(r.deform(SRC).points, MODEL.shoot(ctrl, r.momenta,
                                                                 SRC.points)[2])
    # A warm start from those momenta goes on from where the run stopped.
    again = register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), control_points=ctrl,
                     momenta=r.momenta, max_iter=1, progress=False)
    assert again.history[0]["loss"] < r.history[0]["loss"]


def test_progress_lines_on_request(capsys):
    register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), max_iter=2, progress=True)
    err = capsys.readouterr().err
    assert err.count("register: iteration") == 2 and "attachment" in err
    register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), max_iter=2, progress=False)
    register(SRC, TGT, model=MODEL, attachment=dense_mmd(0.2), max_iter=2)  # short: silent
    assert capsys.readouterr().err == ""


def test_point_clouds_register_too():
    src = PointCloud(SRC.points)
    tgt = PointCloud(TGT.points)
    r = register(src, tgt, model=MODEL, attachment=dense_mmd(0.3), max_iter=15, progress=False)
    assert r.history[-1]["loss"] < 0.05 * r.history[0]["loss"]
    assert isinstance(r.deformed, PointCloud)


def test_bad_arguments_are_clear_errors():
    att = dense_mmd(0.2)
    with pytest.raises(ValueError, match="source has dimension 2 but target 3"):
        register(SRC, PointCloud(torch.rand(5, 3, dtype=F64)), model=MODEL, attachment=att)
    with pytest.raises(TypeError, match="source is torch.float64 but target torch.float32"):
        register(SRC, PointCloud(TGT.points.float()), model=MODEL, attachment=att)
    with pytest.raises(ValueError, match="needs lr"):
        register(SRC, TGT, model=MODEL, attachment=att, optimizer="adam")
    with pytest.raises(ValueError, match="optimizer must be"):
        register(SRC, TGT, model=MODEL, attachment=att, optimizer="newton")
    with pytest.raises(ValueError, match="momenta has shape"):
        register(SRC, TGT, model=MODEL, attachment=att, momenta=torch.zeros(3, 2, dtype=F64))
    with pytest.raises(ValueError, match="regularization = -1.0; expected a finite number >= 0"):
        register(SRC, TGT, model=MODEL, attachment=att, regularization=-1.0)
    with pytest.raises(ValueError, match="max_iter = 2.5; expected an integer >= 1"):
        register(SRC, TGT, model=MODEL, attachment=att, max_iter=2.5)
    with pytest.raises(FloatingPointError, match="the loss became nan"):
        register(SRC, TGT, model=MODEL, attachment=lambda a, b: a.points.sum() * math.nan,
                 max_iter=2)


def test_atlas_fits_a_template_and_one_deformation_per_subject():
    subjects = [ellipse(30, 1.3, 0.8), ellipse(30, 0.8, 1.3), ellipse(30, 1.1, 1.1, 0.3)]
    start = ellipse(30, 1.0, 1.0)
    model = LDDMM(GaussianKernel(0.5, backend="interpreter"), n_steps=4)
    att = dense_mmd(0.3)
    a = atlas(subjects, template=start, model=model, attachment=att, regularization=0.01,
              max_iter=25, progress=False)
    assert a.history[-1]["loss"] < 0.1 * a.history[0]["loss"], a
    assert torch.equal(a.template.edges, start.edges) and len(a.momenta) == 3
    # Each deformed template is the model's deformation, and close to its subject.
    for p, d, s in zip(a.momenta, a.deformed, subjects):
        torch.testing.assert_close(d.points, model.deform(a.template, p).points, rtol=0, atol=0)
        assert float(att(d, s)) < 0.1 * float(att(start, s))
    # The loss is the mean attachment plus the weighted mean energy.
    last = a.history[-1]
    mean_att = sum(float(att(d, s)) for d, s in zip(a.deformed, subjects)) / 3
    assert last["attachment"] == pytest.approx(mean_att, rel=1e-10)
    assert "Atlas(subjects=3" in repr(a)
    with pytest.raises(ValueError, match="shapes is empty"):
        atlas([])
    with pytest.raises(ValueError, match="source has dimension 2 but target 3"):
        atlas([start, PointCloud(torch.rand(4, 3, dtype=F64))], model=model, attachment=att)


def test_defaults_register_a_mesh_with_the_binet_varifold():
    from tessel.shapes import Mesh, Varifold
    src = Mesh.icosphere(1)
    tgt = Mesh(src.points * torch.tensor([1.3, 0.8, 1.0], dtype=F64), src.faces)
    r = register(src, tgt, max_iter=10, progress=False)
    assert isinstance(r.attachment, Varifold) and r.attachment.orientation == "binet"
    assert r.history[-1]["loss"] < 0.2 * r.history[0]["loss"], r
    cloud = register(PointCloud(src.points), PointCloud(tgt.points), max_iter=3, progress=False)
    assert type(cloud.attachment).__name__ == "KernelNorm"


@pytest.mark.parametrize("nits", [1, 2])
def test_normalized_lddmm_reports_the_attachment_of_its_deformed_shape(nits):
    # The control points (the source's vertices) and the transported shape move by one field,
    # so the history's attachment, reached through the control points, is r.deformed's.
    from tessel.shapes import NormalizedLDDMM
    src = PointCloud(torch.rand(40, 2, dtype=F64, generator=torch.Generator().manual_seed(3)))
    tgt = PointCloud(src.points * 1.3 + 0.1)
    model = NormalizedLDDMM(GaussianKernel(0.4, backend="interpreter"), nits=nits, n_steps=4)
    att = dense_mmd(0.3)
    r = register(src, tgt, model=model, attachment=att, max_iter=5, progress=False)
    assert r.history[-1]["attachment"] < 0.5 * r.history[0]["attachment"]
    assert float(att(r.deformed, tgt)) == pytest.approx(r.history[-1]["attachment"], rel=1e-12)
