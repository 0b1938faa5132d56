"""Shapes as light objects over tensors: weighted point clouds, curves and triangle meshes.

Every shape exposes the same three views that the data attachments read, each computed from the
vertices by differentiable torch operations (so a loss on a deformed shape reaches the
deformation's parameters):

- `centers` (M, D): where the shape's measure sits (points, segment midpoints, face centroids);
- `measures` (M,): its masses (point weights, segment lengths, face areas);
- `normals` (M, D) or None: length- or area-weighted orientations (a curve's segment vectors
  p1 - p0, a mesh's face normals (p1 - p0) x (p2 - p0) / 2, whose norms are the measures);
  None for a point cloud.

`with_points(x)` gives the same connectivity on new vertices (the deformed shape); shapes hold
their tensors on any device, float32 or float64, and are checked once, when built.
"""
import math
import numbers
import warnings

import torch

from .._docstrings import CIRCLE_AND_ELLIPSE, fill

_FLOATS = (torch.float32, torch.float64)


def _fail(who, msg):
    raise ValueError(f"tessel.shapes.{who}: {msg}")


def _check_points(who, points, dims=None):
    if not isinstance(points, torch.Tensor):
        raise TypeError(f"tessel.shapes.{who}: points must be a torch.Tensor (N, D), got "
                        f"{type(points).__name__}")
    if points.dim() != 2 or points.shape[0] == 0 or points.shape[1] == 0:
        _fail(who, f"points has shape {tuple(points.shape)}; expected (N, D) with N >= 1 points "
                   "of dimension D >= 1 (an empty shape has no measure to compare)")
    if points.dtype not in _FLOATS:
        raise TypeError(f"tessel.shapes.{who}: points has dtype {points.dtype}; expected "
                        "torch.float32 or torch.float64")
    if dims is not None and points.shape[1] not in dims:
        want = " or ".join(map(str, dims))
        _fail(who, f"points has dimension {points.shape[1]}; expected {want}")
    check_finite(who, "points", points, "every vertex must be a finite point")


def check_finite(who, name, rows, expected="expected finite values"):
    """Refuses an (N, D) tensor with a non-finite entry, naming its first such row."""
    bad = ~torch.isfinite(rows.detach()).all(1)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0, 0])
        _fail(who, f"{name}[{i}] = {rows[i].detach().tolist()} is not finite; {expected}")


def _check_cells(who, name, cells, k, n_points, device):
    if not isinstance(cells, torch.Tensor):
        raise TypeError(f"tessel.shapes.{who}: {name} must be an integer torch.Tensor "
                        f"(F, {k}), got {type(cells).__name__}")
    if cells.dtype.is_floating_point or cells.dtype == torch.bool or cells.is_complex():
        raise TypeError(f"tessel.shapes.{who}: {name} has dtype {cells.dtype}; expected an "
                        "integer dtype (vertex indices)")
    if cells.dim() != 2 or cells.shape[1] != k or cells.shape[0] == 0:
        _fail(who, f"{name} has shape {tuple(cells.shape)}; expected (F, {k}) with F >= 1")
    if cells.device != device:
        _fail(who, f"{name} is on {cells.device} but the points on {device}; expected one device")
    lo, hi = int(cells.min()), int(cells.max())
    if lo < 0 or hi >= n_points:
        row = int(torch.nonzero((cells < 0).any(1) | (cells >= n_points).any(1))[0, 0])
        _fail(who, f"{name}[{row}] = {cells[row].tolist()} refers to a vertex out of range; "
                   f"expected indices in [0, {n_points})")
    cells = cells.to(torch.int64)
    same = torch.zeros(cells.shape[0], dtype=torch.bool, device=device)
    for a in range(k):
        for b in range(a + 1, k):
            same |= cells[:, a] == cells[:, b]
    if bool(same.any()):
        row = int(torch.nonzero(same)[0, 0])
        _fail(who, f"{name}[{row}] = {cells[row].tolist()} repeats a vertex; a degenerate "
                   f"{'segment' if k == 2 else 'triangle'} has no orientation")
    return cells


def _check_degenerate(who, name, shape):
    """Refuses pieces of zero measure, and measures outside the dtype's normal range, which the
    same shape in float64 at unit size tells apart from coinciding vertices."""
    sizes = shape.measures.detach()
    what = "length" if name == "edges" else "area"
    tiny, big = torch.finfo(sizes.dtype).tiny, torch.finfo(sizes.dtype).max
    bad = ~((sizes >= tiny) & (sizes <= big))
    if not bool(bad.any()):
        return
    row = int(torch.nonzero(bad)[0, 0])
    pts = shape.points.detach().to(torch.float64)
    unit = math.ldexp(1.0, -math.frexp(float(pts.abs().max()))[1])
    ref = float(shape.with_points(pts * unit).measures[row])
    if ref == 0:
        _fail(who, f"{name}[{row}] has zero {what} (its vertices coincide"
                   f"{'' if name == 'edges' else ' or are collinear'}); remove it or merge "
                   "its vertices")
    power = 1 if name == "edges" else 2
    log10 = (math.log2(ref) - power * math.log2(unit)) * math.log10(2)
    _fail(who, f"{name}[{row}] has {what} 10^{log10:.1f} (its vertices are distinct), outside "
               f"{sizes.dtype}'s normal range [{tiny:.3g}, {big:.3g}]; pass float64 points or "
               "rescale them")


def _exponent(t):
    """2^-e per row of t (N, D), e the binary exponent of the row's largest |entry| (1 for a
    zero row), kept within the dtype's range: dividing a row by it is exact and brings it to
    unit size, so squares of its entries can neither overflow nor underflow."""
    e = torch.frexp(t.detach().abs().amax(1, keepdim=True))[1]
    limit = int(math.log2(torch.finfo(t.dtype).max)) - 2
    # exp2 of an integer is exact (torch.ldexp is not: it forms 2^e in float32).
    return torch.exp2((-e).clamp(-limit, limit).to(t.dtype))


def _row_norms(t):
    """|t_i| for each row, computed at unit size (see _exponent) then scaled back."""
    scale = _exponent(t)
    return (t * scale).norm(dim=1) / scale[:, 0]


class PointCloud:
    """Points (N, D) with weights (N,) (default: 1 / N each): a measure sum_i w_i delta_{x_i}.

    Checked once when made (finite coordinates, weights >= 0); ``centers``, ``measures`` (the
    weights) and ``points`` are differentiable. A point cloud has no orientation: Currents and
    the oriented Varifolds refuse it.

    Parameters
    ----------
    points : (N, D) float tensor
        The points, float32 or float64, any device.
    weights : (N,) tensor, optional
        Non-negative weights (default 1 / N each).

    Raises
    ------
    ValueError
        Points that are not an (N, D) floating tensor with finite values, or weights of another
        length, dtype or device, or negative.

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import PointCloud
    >>> cloud = PointCloud(torch.rand(10, 3, dtype=torch.float64))
    >>> cloud.measures.sum().item(), tuple(cloud.centers.shape)
    (1.0, (10, 3))
    """

    kind = "points"

    def __init__(self, points, weights=None):
        _check_points("PointCloud", points)
        if weights is None:
            weights = torch.full((points.shape[0],), 1.0 / points.shape[0], dtype=points.dtype,
                                 device=points.device)
        elif not isinstance(weights, torch.Tensor) or weights.shape != (points.shape[0],):
            _fail("PointCloud", f"weights must be a tensor of shape ({points.shape[0]},), got "
                                f"{getattr(weights, 'shape', type(weights).__name__)}")
        elif weights.dtype != points.dtype or weights.device != points.device:
            _fail("PointCloud", f"weights are {weights.dtype} on {weights.device} but points "
                                f"{points.dtype} on {points.device}; expected the same")
        elif not bool((torch.isfinite(weights.detach()) & (weights.detach() >= 0)).all()):
            _fail("PointCloud", "weights must be finite and >= 0")
        self.points, self.weights = points, weights

    def with_points(self, points):
        """The same shape (cells, weights) on other points: a deformed copy, differentiable."""
        who = f"{type(self).__name__}.with_points"
        if not isinstance(points, torch.Tensor):
            raise TypeError(f"tessel.shapes.{who}: points must be a torch.Tensor "
                            f"{tuple(self.points.shape)}, got {type(points).__name__}")
        if points.shape != self.points.shape:
            _fail(who, f"points has shape {tuple(points.shape)}; expected "
                       f"{tuple(self.points.shape)}, one row per vertex of this shape")
        if points.dtype not in _FLOATS:
            raise TypeError(f"tessel.shapes.{who}: points has dtype {points.dtype}; expected "
                            "torch.float32 or torch.float64")
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.points = points
        return out

    # The attachments' three views (a point cloud has no orientation), and what every shape shares.
    centers = property(lambda self: self.points, doc="(M, D) where the measure sits")
    measures = property(lambda self: self.weights, doc="(M,) the measure's masses")
    normals = property(lambda self: None, doc="(M, D) weighted orientations, or None")
    dim = property(lambda self: self.points.shape[1], doc="D, the points' dimension")
    device = property(lambda self: self.points.device, doc="the points' device")
    dtype = property(lambda self: self.points.dtype, doc="the points' dtype")

    def to(self, *args, **kwargs):
        """The shape with every tensor moved (device and/or float dtype, as Tensor.to)."""
        out = self.with_points(self.points.to(*args, **kwargs))
        for k, v in self.__dict__.items():
            if k != "points" and isinstance(v, torch.Tensor):
                floating = v.dtype.is_floating_point
                out.__dict__[k] = v.to(out.points.dtype if floating else v.dtype).to(out.device)
        return out

    def __repr__(self):
        extra = "".join(f", {k}={tuple(v.shape)[0]}" for k, v in self.__dict__.items()
                        if k in ("edges", "faces"))
        return (f"{type(self).__name__}(points={tuple(self.points.shape)[0]}{extra}, "
                f"dim={self.dim}, dtype={self.dtype}, device={self.device})")


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE)
class Curve(PointCloud):
    """A polygonal curve (or a set of them): vertices (N, D) and segments `edges` (E, 2).

    Segments are oriented from edges[:, 0] to edges[:, 1]; ``centers`` are their midpoints,
    ``normals`` the segment vectors (length-weighted tangents) and ``measures`` their lengths,
    all differentiable in the points.

    Parameters
    ----------
    points : (N, D) float tensor
        The vertices.
    edges : (E, 2) integer tensor
        Vertex indices of each segment.

    Raises
    ------
    ValueError
        Non-finite vertices, indices out of range, or degenerate (zero-length) segments.

    Examples
    --------
    {circle_and_ellipse}
    >>> round(float(circle.measures.sum()), 3)          # the polygon's perimeter
    6.257
    """

    kind = "curve"

    def __init__(self, points, edges):
        _check_points("Curve", points)
        self.points = points
        self.edges = _check_cells("Curve", "edges", edges, 2, points.shape[0], points.device)
        _check_degenerate("Curve", "edges", self)

    @classmethod
    def polyline(cls, points, closed=False):
        """The curve through the points in order (closed: back to the first)."""
        n = points.shape[0]
        i = torch.arange(n if closed else n - 1, device=points.device)
        return cls(points, torch.stack((i, (i + 1) % n), 1))

    @property
    def tangents(self):
        """(E, D) segment vectors p1 - p0 (their norms are the lengths)."""
        return self.points[self.edges[:, 1]] - self.points[self.edges[:, 0]]

    lengths = property(lambda self: _row_norms(self.tangents), doc="(E,) segment lengths")
    length = property(lambda self: self.lengths.sum(), doc="the total length")
    weights = measures = property(lambda self: self.lengths, doc="(E,) the segments' lengths")
    normals = property(lambda self: self.tangents, doc="(E, D) the segment vectors (tangents)")

    @property
    def centers(self):
        return (self.points[self.edges[:, 0]] + self.points[self.edges[:, 1]]) / 2


class Mesh(PointCloud):
    """A triangle mesh in 3-D: vertices (N, 3) and `faces` (F, 3) of vertex indices.

    Faces are oriented by the right-hand rule ((p1 - p0) x (p2 - p0) points outwards for
    counter-clockwise faces); ``normals`` are area-weighted, ``measures`` the face areas and
    ``centers`` the centroids, all differentiable in the points. ``Mesh.icosphere`` and
    ``subdivide`` make test surfaces; ``decimate`` merges vertices in cubes.

    Parameters
    ----------
    points : (N, 3) float tensor
        The vertices.
    faces : (F, 3) integer tensor
        Vertex indices of each triangle.

    Raises
    ------
    ValueError
        Points that are not (N, 3), non-finite vertices, indices out of range, or degenerate
        (zero-area) faces.

    Examples
    --------
    >>> from tessel.shapes import Mesh
    >>> sphere = Mesh.icosphere(2)
    >>> tuple(sphere.points.shape), tuple(sphere.faces.shape)
    ((162, 3), (320, 3))
    >>> round(float(sphere.measures.sum()), 2)          # close to 4 pi
    12.33
    """

    kind = "mesh"

    def __init__(self, points, faces):
        _check_points("Mesh", points, dims=(3,))
        self.points = points
        self.faces = _check_cells("Mesh", "faces", faces, 3, points.shape[0], points.device)
        _check_degenerate("Mesh", "faces", self)

    @classmethod
    def icosphere(cls, subdivisions=0, radius=1.0, dtype=torch.float64, device=None):
        """The sphere of `radius` as an icosahedron whose faces are split in four
        `subdivisions` times (12, 42, 162, 642, 2562, 10242... vertices), outward normals."""
        t = (1 + 5 ** 0.5) / 2
        v = torch.tensor([[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t],
                          [0, -1, -t], [0, 1, -t], [t, 0, -1], [t, 0, 1], [-t, 0, -1],
                          [-t, 0, 1]], dtype=dtype, device=device)
        if isinstance(subdivisions, bool) or not isinstance(subdivisions, numbers.Integral) or (
                subdivisions < 0):
            _fail("Mesh.icosphere", f"subdivisions = {subdivisions!r}; expected an integer >= 0")
        if not isinstance(radius, torch.Tensor) and (
                isinstance(radius, bool) or not isinstance(radius, numbers.Real)
                or not 0 < radius < math.inf):
            _fail("Mesh.icosphere", f"radius = {radius!r}; expected a finite number > 0")
        f = torch.tensor([[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9],
                          [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2],
                          [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5], [2, 4, 11], [6, 2, 10],
                          [8, 6, 7], [9, 8, 1]], device=device)
        mesh = cls(radius * v / v.norm(dim=1, keepdim=True), f)
        for _ in range(subdivisions):
            fine = mesh.subdivide()
            mesh = cls(radius * fine.points / fine.points.norm(dim=1, keepdim=True), fine.faces)
        return mesh

    def decimate(self, cell):
        """A coarser mesh of the same surface: the vertices in each cube of side `cell` merged
        into their mean, the faces that collapse (or become flat) dropped, unused vertices
        removed (vertex clustering; coarse-to-fine registration, quick previews)."""
        if not (float(cell) > 0):
            _fail("Mesh.decimate", f"cell must be > 0, got {cell}")
        p = self.points
        cells = torch.floor((p.detach() - p.detach().min(0).values) / cell).to(torch.int64)
        _, label = torch.unique(cells, dim=0, return_inverse=True)
        k = int(label.max()) + 1
        count = torch.zeros(k, dtype=p.dtype, device=p.device).index_add_(
            0, label, torch.ones_like(p[:, 0]))
        merged = torch.zeros(k, 3, dtype=p.dtype, device=p.device).index_add_(0, label, p)
        merged = merged / count[:, None]
        f = label[self.faces]
        f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 2] != f[:, 0])]
        key = torch.sort(f, dim=1).values
        _, first = _first_of_each(key)
        f = f[first]
        a, b, c = merged[f[:, 0]], merged[f[:, 1]], merged[f[:, 2]]
        f = f[torch.linalg.cross(b - a, c - a, dim=1).norm(dim=1).detach() > 0]
        if f.shape[0] == 0:
            _fail("Mesh.decimate", f"cell = {cell} merges every face away; expected a cell "
                                   "smaller than the mesh")
        used, f = torch.unique(f, return_inverse=True)
        return Mesh(merged[used], f)

    def _corners(self):
        p = self.points
        return p[self.faces[:, 0]], p[self.faces[:, 1]], p[self.faces[:, 2]]

    @property
    def normals(self):
        """(F, 3) area-weighted normals (p1 - p0) x (p2 - p0) / 2 (their norms: the areas)."""
        a, b, c = self._corners()
        # At unit size, per face: a product of two edge coordinates under- or overflows where
        # a single coordinate does not (float32 faces of side 1e-20 or 1e20).
        u, v = b - a, c - a
        scale = _exponent(torch.cat((u, v), 1))
        return torch.linalg.cross(u * scale, v * scale, dim=1) / scale / scale / 2

    areas = property(lambda self: _row_norms(self.normals), doc="(F,) triangle areas")
    area = property(lambda self: self.areas.sum(), doc="the total area")
    weights = measures = property(lambda self: self.areas, doc="(F,) the triangles' areas")

    @property
    def centers(self):
        a, b, c = self._corners()
        return (a + b + c) / 3

    def subdivide(self):
        """Each triangle split in four at its edges' midpoints (the same surface, finer): the
        varifold of the result equals this one's up to the discretisation."""
        f, p = self.faces, self.points
        edges = torch.cat((f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]))
        key = torch.sort(edges, dim=1).values
        uniq, inv = torch.unique(key, dim=0, return_inverse=True)
        mids = (p[uniq[:, 0]] + p[uniq[:, 1]]) / 2
        m = inv.reshape(3, -1) + p.shape[0]  # the midpoints of edges 01, 12, 20 per face
        new_faces = torch.cat((torch.stack((f[:, 0], m[0], m[2]), 1),
                               torch.stack((m[0], f[:, 1], m[1]), 1),
                               torch.stack((m[2], m[1], f[:, 2]), 1),
                               torch.stack((m[0], m[1], m[2]), 1)))
        return Mesh(torch.cat((p, mids)), new_faces)


def _first_of_each(rows):
    """(unique rows, index of the first occurrence of each) of an integer (F, k) tensor."""
    uniq, inv = torch.unique(rows, dim=0, return_inverse=True)
    order = torch.arange(inv.shape[0], device=rows.device)
    first = torch.full((uniq.shape[0],), inv.shape[0], dtype=torch.int64, device=rows.device)
    with warnings.catch_warnings():  # scatter_reduce is "beta" in PyTorch 1.13, stable since
        warnings.simplefilter("ignore", UserWarning)
        first = first.scatter_reduce(0, inv, order, "amin")
    return uniq, first


def check_pair(who, source, target):
    """Two shapes that a loss may compare: same dimension, dtype and device."""
    for name, s in (("source", source), ("target", target)):
        if not isinstance(s, PointCloud):
            raise TypeError(f"tessel.shapes.{who}: {name} must be a PointCloud, Curve or Mesh, "
                            f"got {type(s).__name__}")
    if source.dim != target.dim:
        _fail(who, f"source has dimension {source.dim} but target {target.dim}; expected the same")
    if source.device != target.device:
        _fail(who, f"source is on {source.device} but target on {target.device}; expected one "
                   "device")
    if source.dtype != target.dtype:
        raise TypeError(f"tessel.shapes.{who}: source is {source.dtype} but target "
                        f"{target.dtype}; expected one dtype")
