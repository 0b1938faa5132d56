"""tessel.shapes.io: shapes written and read back in PLY, OBJ, VTK, VTU, STL, OFF, GIfTI and
FreeSurfer files, the fsaverage5 cortex that nilearn ships, mirror's orientation, figures, and
the errors for missing files, unknown extensions and cells that are not triangles or lines."""
import math

import pytest
import torch

from tessel.shapes import Curve, Mesh, PointCloud
from tessel.shapes.io import fsaverage5, mirror, plot_shapes, read_shape, write_shape

F64 = torch.float64


def _bumpy_sphere():
    """An icosphere with uneven radii: vertices that no format can store by rounding luck."""
    s = Mesh.icosphere(1, dtype=F64)
    r = 1 + 0.1 * torch.sin(3 * s.points[:, 0]) * torch.cos(2 * s.points[:, 1]) + 1e-9 * math.pi
    return Mesh(s.points * r[:, None], s.faces)


def _signed_volume(mesh):
    a, b, c = mesh._corners()
    return float(torch.linalg.det(torch.stack((a, b, c), 1)).sum() / 6)


def _helix():
    t = torch.linspace(0, 4 * math.pi, 40, dtype=F64)
    return Curve.polyline(torch.stack((torch.cos(t), torch.sin(t), 0.1 * t), 1))


# Extensions and the precision at which each stores vertices (0: exactly, float64).
MESH_FORMATS = [(".ply", 0.0), (".obj", 0.0), (".vtk", 0.0), (".vtu", 0.0), (".off", 0.0),
                (".stl", 1e-6), (".gii", 1e-6), (".gii.gz", 1e-6), ("lh.pial", 1e-6)]


@pytest.mark.parametrize("ext,tol", MESH_FORMATS)
def test_mesh_round_trip(tmp_path, ext, tol):
    mesh = _bumpy_sphere()
    path = tmp_path / (ext if ext.startswith("lh.") else "mesh" + ext)
    assert write_shape(path, mesh) == path
    back = read_shape(path)
    assert isinstance(back, Mesh) and back.dtype == F64
    if ext == ".stl":
        # STL stores each facet's corners: meshio merges them back, in its own vertex order.
        assert back.points.shape == mesh.points.shape and back.faces.shape == mesh.faces.shape
        assert torch.allclose(back.centers.sort(0).values, mesh.centers.sort(0).values,
                              rtol=0, atol=1e-6)
        return
    # Relative to the coordinates (~1): float32 formats round to ~6e-8, float64 ones are exact.
    assert (back.points - mesh.points).abs().max() <= tol
    assert torch.equal(back.faces, mesh.faces)


def test_read_dtype_and_precision(tmp_path):
    mesh = _bumpy_sphere()
    write_shape(tmp_path / "m.gii", mesh)
    back = read_shape(tmp_path / "m.gii", dtype=torch.float32)
    assert back.dtype == torch.float32
    assert torch.equal(back.points, mesh.points.float())  # exactly GIfTI's float32 values
    with pytest.raises(TypeError, match=r"read_shape: dtype"):
        read_shape(tmp_path / "m.gii", dtype=torch.int32)


@pytest.mark.parametrize("ext", [".vtk", ".vtu", ".ply"])
def test_curve_round_trip(tmp_path, ext):
    curve = _helix()
    write_shape(tmp_path / ("c" + ext), curve)
    back = read_shape(tmp_path / ("c" + ext))
    assert isinstance(back, Curve)
    assert torch.equal(back.points, curve.points) and torch.equal(back.edges, curve.edges)


def test_planar_curve_reads_back_with_z_zero(tmp_path):
    t = torch.linspace(0, 2 * math.pi, 13, dtype=F64)[:-1]
    curve = Curve.polyline(torch.stack((torch.cos(t), torch.sin(t)), 1), closed=True)
    write_shape(tmp_path / "c.vtk", curve)
    back = read_shape(tmp_path / "c.vtk")
    assert back.dim == 3 and torch.equal(back.points[:, :2], curve.points)
    assert not back.points[:, 2].any() and torch.equal(back.edges, curve.edges)


@pytest.mark.parametrize("ext", [".ply", ".vtk", ".vtu", ".obj", ".off", ".gii"])
def test_point_cloud_round_trip(tmp_path, ext):
    g = torch.Generator().manual_seed(1)
    cloud = PointCloud(torch.randn(50, 3, generator=g, dtype=F64),
                       torch.rand(50, generator=g, dtype=F64))
    write_shape(tmp_path / ("p" + ext), cloud)
    back = read_shape(tmp_path / ("p" + ext))
    assert type(back) is PointCloud
    tol = 1e-6 if ext == ".gii" else 0.0
    assert (back.points - cloud.points).abs().max() <= tol
    if ext in (".ply", ".vtk", ".vtu"):  # formats with point data keep the weights
        assert torch.equal(back.weights, cloud.weights)
    else:
        assert torch.allclose(back.weights, torch.full((50,), 1 / 50, dtype=F64))


@pytest.fixture(scope="module")
def cortex():
    return {h: fsaverage5(h) for h in ("left", "right")}


@pytest.mark.parametrize("hemisphere", ["left", "right"])
def test_fsaverage5_pial(cortex, hemisphere):
    mesh = cortex[hemisphere]  # the Mesh constructor refused any degenerate face
    assert mesh.points.shape == (10242, 3) and mesh.faces.shape == (20480, 3)
    assert mesh.dtype == F64 and bool((mesh.areas > 0).all())
    area = float(mesh.area)
    print(f"fsaverage5 {hemisphere} pial: {area:.0f} mm^2")
    # A hemisphere's pial surface is ~1,000 cm^2 (~1e5 mm^2); fsaverage5's coarse mesh less.
    assert 3e4 < area < 3e5
    # Left hemisphere at x < 0, right at x > 0 (RAS coordinates, mm).
    side = -1 if hemisphere == "left" else 1
    assert side * float(mesh.points[:, 0].mean()) > 10
    # Closed and outward-oriented: the enclosed volume (a few hundred cm^3) is positive.
    assert 1e5 < _signed_volume(mesh) < 2e6


def test_fsaverage5_other_surfaces_and_errors():
    sphere = fsaverage5("rh", "sphere", dtype=torch.float32)
    assert sphere.dtype == torch.float32 and sphere.faces.shape == (20480, 3)
    assert fsaverage5("left", "inflated").points.shape == (10242, 3)
    with pytest.raises(ValueError, match=r"fsaverage5: hemisphere is 'middle'; expected"):
        fsaverage5("middle")
    with pytest.raises(ValueError, match=r"fsaverage5: surface is 'bone'; expected"):
        fsaverage5("left", "bone")


def test_fsaverage5_without_nilearn(monkeypatch):
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "nilearn" else find_spec(name, *a))
    with pytest.raises(ImportError, match=r"pip install --no-deps nilearn"):
        fsaverage5()


def test_mirror_keeps_outward_orientation(cortex):
    sphere = Mesh.icosphere(2, dtype=F64)
    sphere = Mesh(sphere.points + torch.tensor([2.0, 0.5, -1.0], dtype=F64), sphere.faces)
    for axis in (0, 1, 2):
        m = mirror(sphere, axis)
        assert torch.equal(m.points[:, axis], -sphere.points[:, axis])
        assert _signed_volume(m) == pytest.approx(_signed_volume(sphere), rel=1e-12)
        assert _signed_volume(sphere) > 0
        # Outward: each face's normal points away from the sphere's center.
        center = m.points.mean(0)
        assert bool(((m.normals * (m.centers - center)).sum(1) > 0).all())
    left = cortex["left"]
    right = mirror(left)
    assert float(right.points[:, 0].mean()) > 10 and _signed_volume(right) > 0
    assert float(right.area) == pytest.approx(float(left.area), rel=1e-12)
    # A 2-D closed curve is a hypersurface too: its segments are reversed (still outward).
    t = torch.linspace(0, 2 * math.pi, 9, dtype=F64)[:-1]
    circle = Curve.polyline(torch.stack((torch.cos(t), torch.sin(t)), 1), closed=True)
    flipped = mirror(circle, axis=1)
    assert torch.equal(flipped.edges, circle.edges.flip(1))
    assert torch.equal(mirror(_helix()).edges, _helix().edges)  # a 3-D curve has no outside
    # Differentiable, and any kind of shape.
    p = sphere.points.clone().requires_grad_()
    mirror(Mesh(p, sphere.faces)).area.backward()
    assert p.grad is not None and torch.isfinite(p.grad).all()
    cloud = PointCloud(sphere.points)
    assert torch.equal(mirror(cloud, -1).weights, cloud.weights)
    with pytest.raises(ValueError, match=r"mirror: axis is 3; expected"):
        mirror(sphere, 3)


def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_shapes(tmp_path, cortex):
    sphere = Mesh.icosphere(2, dtype=F64)
    moved = Mesh(sphere.points * 1.3 + 0.2, sphere.faces)
    cloud = PointCloud(torch.randn(100, 3, dtype=F64))
    out = tmp_path / "fig.png"
    assert plot_shapes(out, sphere, moved, _helix(), cloud,
                       labels=["source", "target", "curve", "points"], title="test") == out
    _assert_png(out)
    # The whole fsaverage5 hemisphere (20,480 faces) and its mirror image.
    big = tmp_path / "cortex.png"
    plot_shapes(big, cortex["left"], mirror(cortex["left"]), labels=["left", "mirrored"])
    _assert_png(big)
    # 2-D shapes on plain axes.
    t = torch.linspace(0, 2 * math.pi, 30, dtype=F64)
    flat = tmp_path / "flat.png"
    plot_shapes(flat, Curve.polyline(torch.stack((torch.cos(t), torch.sin(t)), 1)),
                PointCloud(torch.randn(20, 2, dtype=F64)))
    _assert_png(flat)
    # One panel per shape, seen from a given angle (the figure is wider than the overlay's).
    side = tmp_path / "panels.png"
    plot_shapes(side, sphere, moved, _helix(), labels=["a", "b", "c"], title="t", panels=True,
                view=(10, 180))
    _assert_png(side)
    assert side.read_bytes()[16:20] > out.read_bytes()[16:20]  # PNG header: width, big-endian
    with pytest.raises(ValueError, match=r"plot_shapes: labels has 1 entries for 2 shapes"):
        plot_shapes(flat, sphere, moved, labels=["one"])
    with pytest.raises(ValueError, match=r"plot_shapes: no shapes given"):
        plot_shapes(flat)


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"read_shape: path '.*nothing\.ply' does not "
                                                r"exist.*expected an existing"):
        read_shape(tmp_path / "nothing.ply")
    unknown = tmp_path / "shape.xyz123"
    unknown.write_text("1 2 3\n")
    with pytest.raises(ValueError, match=r"read_shape: path .* unknown extension '\.xyz123'.*"
                                         r"expected one of .*\.ply.*\.gii\.gz"):
        read_shape(unknown)
    with pytest.raises(ValueError, match=r"write_shape: path .* unknown extension '\.xyz123'"):
        write_shape(unknown, _bumpy_sphere())
    import meshio
    import numpy as np
    square = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=float)
    quads = tmp_path / "quad.vtk"
    meshio.write(quads, meshio.Mesh(square, [("quad", np.array([[0, 1, 2, 3]]))]))
    with pytest.raises(ValueError, match=r"read_shape: path .*quad\.vtk' holds quad cells; "
                                         r"expected only triangles"):
        read_shape(quads)
    mixed = tmp_path / "mixed.vtk"
    meshio.write(mixed, meshio.Mesh(square, [("triangle", np.array([[0, 1, 2]])),
                                             ("line", np.array([[2, 3]]))]))
    with pytest.raises(ValueError, match=r"read_shape: .* mixes triangle and line cells"):
        read_shape(mixed)
    flat = tmp_path / "flat.ply"  # a zero-area face: the error names the file and the face
    meshio.write(flat, meshio.Mesh(square, [("triangle", np.array([[0, 1, 2], [0, 1, 0]]))]))
    with pytest.raises(ValueError, match=r"read_shape: path .*flat\.ply' does not hold a valid "
                                         r"shape: .*faces\[1\] = \[0, 1, 0\] repeats a vertex"):
        read_shape(flat)
    garbage = tmp_path / "bad.vtk"
    garbage.write_text("not a vtk file\n")
    with pytest.raises(ValueError, match=r"read_shape: path .*bad\.vtk' could not be read"):
        read_shape(garbage)
    (tmp_path / "bad.gii").write_text("<GIFTI>")
    with pytest.raises(ValueError, match=r"read_shape: path .*bad\.gii' could not be read as "
                                         r"GIfTI"):
        read_shape(tmp_path / "bad.gii")
    with pytest.raises(ValueError, match=r"write_shape: shape is a Curve but \.stl files hold "
                                         r"a Mesh"):
        write_shape(tmp_path / "c.stl", _helix())
    with pytest.raises(ValueError, match=r"write_shape: shape is a Curve but GIfTI"):
        write_shape(tmp_path / "c.gii", _helix())
    with pytest.raises(TypeError, match=r"write_shape: shape must be a PointCloud"):
        write_shape(tmp_path / "c.ply", torch.zeros(3, 3))
