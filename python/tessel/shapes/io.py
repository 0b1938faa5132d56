"""Shapes from and to files (meshio's formats, GIfTI, FreeSurfer), fsaverage5, mirror and figures.

- `read_shape(path)`: a `Mesh` (triangles), `Curve` (line cells) or `PointCloud` (vertices only)
  from PLY, OBJ, VTK/VTU, STL, OFF... (meshio), GIfTI `.gii`/`.gii.gz` and FreeSurfer surfaces
  such as `lh.pial` (nibabel);
- `write_shape(path, shape)`: the reverse;
- `fsaverage5(hemisphere, surface)`: FreeSurfer's fsaverage5 cortex (10,242 vertices, 20,480
  faces per hemisphere) from the files that the nilearn package ships;
- `mirror(shape, axis)`: the shape reflected across a coordinate plane, still outward-oriented;
- `plot_shapes(path, *shapes)`: a PNG of source, target and deformed shapes (matplotlib, Agg).

The file libraries are imported on first use, so `tessel.shapes` itself needs none of them.
"""
import importlib.util
import os

import torch

from .._docstrings import fill
from ._shape import Curve, Mesh, PointCloud, _fail

__all__ = ["read_shape", "write_shape", "fsaverage5", "mirror", "plot_shapes"]

# The parameters of the functions that make a shape, and the result of those that write a file.
_VERTICES_PARAMETERS = """dtype : torch.dtype, default torch.float64
    The vertices' dtype.
device : torch.device, optional
    Where the vertices go."""
_RETURNS_PATH = """Returns
-------
str or path-like
    ``path``."""

# FreeSurfer's binary surfaces start with one of these magic numbers (triangle file, quad files);
# their names ("lh.pial", "rh.white") carry no extension to dispatch on.
_FREESURFER_MAGIC = (b"\xff\xff\xfe", b"\xff\xff\xff", b"\xff\xff\xfd")
_FREESURFER_SUFFIXES = (".pial", ".white", ".inflated", ".sphere", ".orig", ".smoothwm",
                        ".midthickness", ".graymid")
# meshio writes these formats with fewer cell types than it reads: STL and OFF would silently
# drop line cells (and STL every vertex), OBJ refuses them.
_TRIANGLES_OR_POINTS = (".off", ".obj")
_TRIANGLES_ONLY = (".stl",)
# Formats whose point clouds are stored as bare vertices: meshio rejects or mangles vertex cells.
_BARE_VERTICES = (".ply", ".obj", ".off")


def _require(who, module, install):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"tessel.shapes.{who} needs the Python package {module!r} "
                          f"(`pip install {install}`)") from e


def _ext(path):
    """The lower-case extension, with '.gz' kept as part of it ('.gii.gz')."""
    name = os.path.basename(os.fspath(path)).lower()
    stem, ext = os.path.splitext(name)
    if ext == ".gz":
        ext = os.path.splitext(stem)[1] + ext
    return ext


def _meshio_extensions(who):
    meshio = _require(who, "meshio", "meshio")
    return set(meshio.extension_to_filetypes)


def _supported(who):
    meshio = sorted(e for e in _meshio_extensions(who) if not e.endswith(".gz"))
    return ", ".join(meshio + [".gii", ".gii.gz", "FreeSurfer surfaces (lh.pial...)"])


def _check_dtype(who, dtype):
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"tessel.shapes.{who}: dtype is {dtype}; expected torch.float32 or "
                        "torch.float64")


def _shape_from_arrays(who, path, *arrays, **options):
    """The shape that the arrays describe, or an error that names the file as well as the fault
    that the shape's constructor found (a degenerate face, a vertex index out of range...)."""
    try:
        return _build_shape(*arrays, **options)
    except ValueError as e:
        raise ValueError(f"tessel.shapes.{who}: path {path!r} does not hold a valid shape: "
                         f"{e}") from e


def _build_shape(points, triangles=None, lines=None, weights=None,
                 dtype=torch.float64, device=None):
    """The shape that the arrays describe (numpy in, torch out on dtype and device)."""
    import numpy as np

    def tensor(a, kind):
        # A native-order, writable copy: VTK stores big-endian data and torch refuses it.
        return torch.from_numpy(np.array(a, dtype=kind))

    pts = tensor(points, np.float64).to(device=device, dtype=dtype)
    if triangles is not None:
        if pts.dim() == 2 and pts.shape[1] == 2:
            # A planar triangulation is still a surface: z = 0 makes it a Mesh in 3-D.
            pts = torch.cat((pts, pts.new_zeros(pts.shape[0], 1)), 1)
        return Mesh(pts, tensor(triangles, np.int64).to(pts.device))
    if lines is not None:
        return Curve(pts, tensor(lines, np.int64).to(pts.device))
    if weights is not None:
        weights = tensor(weights, np.float64).reshape(-1).to(device=pts.device, dtype=dtype)
    return PointCloud(pts, weights)


def _load(load, path, fmt):
    """load(path), with the library's failure on a malformed file as a ValueError that names
    read_shape and the file."""
    try:
        return load(path)
    except (Exception, SystemExit) as e:
        # meshio exits the interpreter on some malformed files instead of raising.
        why = f"exit {e.code}" if isinstance(e, SystemExit) else str(e)
        raise ValueError(f"tessel.shapes.read_shape: path {path!r} could not be read as "
                         f"{fmt}: {why}") from None


def _read_meshio(path, dtype, device):
    import numpy as np
    meshio = _require("read_shape", "meshio", "meshio")
    m = _load(meshio.read, path, _ext(path))
    blocks = {}
    for block in m.cells:
        if len(block.data):  # OFF and others report empty blocks for absent cell types
            blocks.setdefault(block.type, []).append(np.asarray(block.data))
    kinds = set(blocks) - {"vertex"}  # vertex cells only mark points, which every shape has
    if kinds - {"triangle", "line"}:
        _fail("read_shape", f"path {path!r} holds {', '.join(sorted(kinds))} cells; expected "
                            "only triangles (a Mesh), only lines (a Curve) or only vertices "
                            "(a PointCloud); split or triangulate it first")
    if kinds == {"triangle", "line"}:
        _fail("read_shape", f"path {path!r} mixes triangle and line cells; expected one kind "
                            "(a Mesh or a Curve), so write them to separate files")
    cells = {k: np.concatenate(v) for k, v in blocks.items()}
    weights = m.point_data.get("weights") if not kinds else None
    return _shape_from_arrays("read_shape", path, m.points, cells.get("triangle"),
                              cells.get("line"), weights, dtype, device)


def _read_gifti(path, dtype, device):
    nibabel = _require("read_shape", "nibabel", "nibabel")
    img = _load(nibabel.load, path, "GIfTI")
    points = img.get_arrays_from_intent("NIFTI_INTENT_POINTSET")
    faces = img.get_arrays_from_intent("NIFTI_INTENT_TRIANGLE")
    if len(points) != 1 or len(faces) > 1:
        _fail("read_shape", f"path {path!r} has {len(points)} point sets and {len(faces)} "
                            "triangle arrays; expected one point set and at most one triangle "
                            "array (a GIfTI surface, not a data file such as curvature)")
    return _shape_from_arrays("read_shape", path, points[0].data,
                              faces[0].data if faces else None, dtype=dtype, device=device)


def _is_freesurfer(path):
    with open(path, "rb") as f:
        return f.read(3) in _FREESURFER_MAGIC


@fill(vertices_parameters=_VERTICES_PARAMETERS)
def read_shape(path, dtype=torch.float64, device=None):
    """Reads a shape from a file: a Mesh, a Curve or a PointCloud.

    A ``Mesh`` if the file holds triangles, a ``Curve`` if it holds line cells, a ``PointCloud``
    if only vertices (with the point data "weights" as weights when present). Formats: meshio's
    (PLY, OBJ, VTK, VTU, STL, OFF, ...), GIfTI (``.gii``, ``.gii.gz``) and FreeSurfer surfaces
    (``lh.pial``, ...), recognised by their extension or, for FreeSurfer, by their first bytes.

    Parameters
    ----------
    path : str or path-like
        The file.
    {vertices_parameters}

    Returns
    -------
    Mesh, Curve or PointCloud
        The shape.

    Raises
    ------
    ValueError
        An unknown format, a file with no vertices, or cells the shapes cannot hold.
    ImportError
        The file library the format needs (meshio, nibabel) is not installed.

    Examples
    --------
    >>> import os, tempfile
    >>> from tessel.shapes import Mesh
    >>> from tessel.shapes.io import read_shape, write_shape
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = write_shape(os.path.join(tmp, "sphere.ply"), Mesh.icosphere(1))
    ...     back = read_shape(path)
    >>> type(back).__name__, tuple(back.faces.shape)
    ('Mesh', (80, 3))
    """
    _check_dtype("read_shape", dtype)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"tessel.shapes.read_shape: path must be a str or os.PathLike, got "
                        f"{type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tessel.shapes.read_shape: path {path!r} does not exist or is "
                                "not a file; expected an existing mesh, curve or point file")
    ext = _ext(path)
    if ext in (".gii", ".gii.gz"):
        return _read_gifti(path, dtype, device)
    if ext in _meshio_extensions("read_shape"):
        return _read_meshio(path, dtype, device)
    if _is_freesurfer(path):
        nibabel = _require("read_shape", "nibabel", "nibabel")
        coords, faces = _load(nibabel.freesurfer.read_geometry, path, "a FreeSurfer surface")
        return _shape_from_arrays("read_shape", path, coords, faces, dtype=dtype, device=device)
    _fail("read_shape", f"path {path!r} has the unknown extension {ext or '(none)'!r} and is not "
                        f"a FreeSurfer surface; expected one of {_supported('read_shape')}")


def _numpy(t):
    return t.detach().cpu().numpy()


@fill(returns_path=_RETURNS_PATH)
def write_shape(path, shape):
    """Writes a shape to a file in the format its extension names.

    float64 vertices where the format stores them (PLY, OBJ, VTK, VTU, OFF), float32 in STL,
    GIfTI and FreeSurfer files. A 2-D shape is written with z = 0 (the formats store 3-D points).
    A ``PointCloud``'s weights go in the point data "weights" where the format has point data
    (PLY, VTK, VTU).

    Parameters
    ----------
    path : str or path-like
        The file; its extension names the format (see ``read_shape``).
    shape : Mesh, Curve or PointCloud
        The shape to write.

    {returns_path}

    Raises
    ------
    ValueError
        An unknown format, or a shape the format cannot hold (line cells in STL).
    ImportError
        The file library the format needs is not installed.

    Examples
    --------
    >>> import os, tempfile, torch
    >>> from tessel.shapes import PointCloud
    >>> from tessel.shapes.io import read_shape, write_shape
    >>> cloud = PointCloud(torch.rand(5, 3, dtype=torch.float64))
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     back = read_shape(write_shape(os.path.join(tmp, "cloud.vtk"), cloud))
    >>> same = torch.allclose(back.points, cloud.points)
    >>> bool(same), bool(torch.allclose(back.weights, cloud.weights))
    (True, True)
    """
    import numpy as np
    if not isinstance(shape, PointCloud):
        raise TypeError(f"tessel.shapes.write_shape: shape must be a PointCloud, Curve or Mesh, "
                        f"got {type(shape).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"tessel.shapes.write_shape: path must be a str or os.PathLike, got "
                        f"{type(path).__name__}")
    if shape.dim > 3:
        _fail("write_shape", f"shape has dimension {shape.dim}; expected 2 or 3 (the file "
                             "formats store 3-D points)")
    name, ext = os.fspath(path), _ext(path)
    points = _numpy(shape.points).astype(np.float64)
    if shape.dim < 3:
        points = np.hstack((points, np.zeros((len(points), 3 - shape.dim))))
    kind = shape.kind
    if ext in (".gii", ".gii.gz"):
        _write_gifti(name, shape, points)
        return path
    if ext not in _meshio_extensions("write_shape") and (
            ext in _FREESURFER_SUFFIXES or os.path.basename(name).startswith(("lh.", "rh."))):
        if kind != "mesh":
            _fail("write_shape", f"shape is a {type(shape).__name__} but FreeSurfer surfaces "
                                 f"({name!r}) hold triangle meshes; expected a Mesh")
        nibabel = _require("write_shape", "nibabel", "nibabel")
        nibabel.freesurfer.write_geometry(name, points, _numpy(shape.faces).astype(np.int32))
        return path
    if ext not in _meshio_extensions("write_shape"):
        _fail("write_shape", f"path {name!r} has the unknown extension {ext or '(none)'!r}; "
                             f"expected one of {_supported('write_shape')}")
    if (ext in _TRIANGLES_ONLY and kind != "mesh") or (ext in _TRIANGLES_OR_POINTS and
                                                        kind == "curve"):
        wanted = "a Mesh" if ext in _TRIANGLES_ONLY else "a Mesh or a PointCloud"
        _fail("write_shape", f"shape is a {type(shape).__name__} but {ext} files hold "
                             f"{wanted}; expected {wanted} (curves: use .vtk, .vtu or .ply)")
    meshio = _require("write_shape", "meshio", "meshio")
    point_data = {}
    if kind == "mesh":
        cells = [("triangle", _numpy(shape.faces).astype(np.int32))]
    elif kind == "curve":
        cells = [("line", _numpy(shape.edges).astype(np.int32))]
    else:
        n = len(points)
        cells = [] if ext in _BARE_VERTICES else [("vertex", np.arange(n, dtype=np.int32)[:, None])]
        if ext in (".ply", ".vtk", ".vtu"):
            point_data["weights"] = _numpy(shape.weights).astype(np.float64)
    meshio.write(name, meshio.Mesh(points, cells, point_data=point_data))
    return path


def _write_gifti(name, shape, points):
    import numpy as np
    nibabel = _require("write_shape", "nibabel", "nibabel")
    from nibabel.gifti import GiftiDataArray, GiftiImage
    if shape.kind == "curve":
        _fail("write_shape", f"shape is a Curve but GIfTI ({name!r}) has no line cells; "
                             "expected a Mesh or a PointCloud (curves: use .vtk or .ply)")
    # float32 and int32, as FreeSurfer, Workbench and nilearn write and expect them.
    arrays = [GiftiDataArray(points.astype(np.float32), intent="NIFTI_INTENT_POINTSET",
                             datatype="NIFTI_TYPE_FLOAT32")]
    if shape.kind == "mesh":
        arrays.append(GiftiDataArray(_numpy(shape.faces).astype(np.int32),
                                     intent="NIFTI_INTENT_TRIANGLE", datatype="NIFTI_TYPE_INT32"))
    nibabel.save(GiftiImage(darrays=arrays), name)


# nilearn has shipped each surface under one or both of these names ("pial_left.gii.gz",
# "pial.left.gii.gz"); the inflated surface is also "pial_inflated".
_FSAVERAGE_STEMS = {"pial": ("pial",), "white": ("white",), "inflated": ("infl", "pial_inflated"),
                    "sphere": ("sphere",)}
_HEMISPHERES = {"left": "left", "lh": "left", "right": "right", "rh": "right"}


def _nilearn_dir(who):
    # find_spec locates the package without importing it: nilearn is installed without its
    # dependencies (scikit-learn, pandas...), only for its data files.
    spec = importlib.util.find_spec("nilearn")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"tessel.shapes.{who} reads the fsaverage5 surfaces that the nilearn "
                          "package ships; install them with `pip install --no-deps nilearn`")
    return list(spec.submodule_search_locations)


@fill(vertices_parameters=_VERTICES_PARAMETERS)
def fsaverage5(hemisphere="left", surface="pial", dtype=torch.float64, device=None):
    """FreeSurfer's fsaverage5 cortical surface as a Mesh (10,242 vertices, 20,480 faces, mm).

    Read with nibabel from the files of the nilearn package (``pip install --no-deps nilearn``).

    Parameters
    ----------
    hemisphere : {"left", "right", "lh", "rh"}
        The hemisphere.
    surface : {"pial", "white", "inflated", "sphere"}
        The surface.
    {vertices_parameters}

    Returns
    -------
    Mesh
        The surface, outward-oriented.

    Raises
    ------
    ValueError
        An unknown hemisphere or surface.
    ImportError
        nilearn or nibabel is not installed.

    Examples
    --------
    >>> from tessel.shapes.io import fsaverage5
    >>> brain = fsaverage5("left")
    >>> tuple(brain.points.shape), tuple(brain.faces.shape)
    ((10242, 3), (20480, 3))
    """
    _check_dtype("fsaverage5", dtype)
    hemi = _HEMISPHERES.get(hemisphere) if isinstance(hemisphere, str) else None
    if hemi is None:
        _fail("fsaverage5", f"hemisphere is {hemisphere!r}; expected 'left' or 'right'")
    if surface not in _FSAVERAGE_STEMS:
        _fail("fsaverage5", f"surface is {surface!r}; expected one of "
                            f"{', '.join(map(repr, _FSAVERAGE_STEMS))}")
    tried = []
    for root in _nilearn_dir("fsaverage5"):
        folder = os.path.join(root, "datasets", "data", "fsaverage5")
        for stem in _FSAVERAGE_STEMS[surface]:
            for name in (f"{stem}_{hemi}.gii.gz", f"{stem}.{hemi}.gii.gz"):
                path = os.path.join(folder, name)
                if os.path.isfile(path):
                    return _read_gifti(path, dtype, device)
                tried.append(path)
    raise FileNotFoundError(f"tessel.shapes.fsaverage5: the nilearn package has no file for the "
                            f"{hemi} {surface} surface (looked for {', '.join(tried)}); "
                            "expected a nilearn release that ships fsaverage5 "
                            "(`pip install --no-deps --upgrade nilearn`)")


def mirror(shape, axis=0):
    """The shape reflected across the plane where coordinate `axis` is 0 (x -> -x for axis 0).

    A reflection reverses orientation, so the cells of a hypersurface (a mesh's triangles, a
    2-D curve's segments) are reversed too, by swapping two vertices of each: the normals of a
    closed, outward-oriented shape stay outward. The mirror of a left hemisphere is a right-like
    one. Differentiable in the vertices.

    Parameters
    ----------
    shape : Mesh, Curve or PointCloud
        The shape.
    axis : int, default 0
        The coordinate whose sign flips.

    Returns
    -------
    Mesh, Curve or PointCloud
        The reflected shape, of the same kind.

    Raises
    ------
    ValueError
        An axis outside the shape's dimensions, or an object that is not a shape.

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import Mesh
    >>> from tessel.shapes.io import mirror
    >>> sphere = Mesh.icosphere(1)
    >>> m = mirror(sphere)
    >>> bool(torch.allclose(m.points[:, 0], -sphere.points[:, 0]))
    True
    >>> bool(((m.normals * m.centers).sum(1) > 0).all())    # still outward
    True
    """
    if not isinstance(shape, PointCloud):
        raise TypeError(f"tessel.shapes.mirror: shape must be a PointCloud, Curve or Mesh, got "
                        f"{type(shape).__name__}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -shape.dim <= axis < shape.dim:
        _fail("mirror", f"axis is {axis!r}; expected an integer in [-{shape.dim}, {shape.dim})")
    sign = torch.ones(shape.dim, dtype=shape.dtype, device=shape.device)
    sign[axis] = -1
    out = shape.with_points(shape.points * sign)
    if shape.kind == "mesh":
        out.faces = shape.faces[:, [0, 2, 1]]
    elif shape.kind == "curve" and shape.dim == 2:
        out.edges = shape.edges.flip(1)
    return out


_COLORS = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple", "tab:brown")


def _draw(ax, shape, color, dim):
    """One shape on `ax` (3-D axes when dim is 3), as matplotlib draws each kind best."""
    import numpy as np
    p = _numpy(shape.points).astype(np.float64)
    if p.shape[1] < dim:
        p = np.hstack((p, np.zeros((len(p), dim - p.shape[1]))))
    if shape.kind == "mesh":
        # Transparent, without edges: overlapping source, target and deformed surfaces stay
        # readable, and 20k faces draw in a second or two.
        ax.plot_trisurf(p[:, 0], p[:, 1], p[:, 2], triangles=_numpy(shape.faces), color=color,
                        alpha=0.35, linewidth=0, antialiased=False, shade=True)
    elif shape.kind == "curve":
        segments = p[_numpy(shape.edges)]
        if dim == 3:
            from mpl_toolkits.mplot3d.art3d import Line3DCollection
            ax.add_collection3d(Line3DCollection(segments, colors=color, linewidths=1.2))
        else:
            from matplotlib.collections import LineCollection
            ax.add_collection(LineCollection(segments, colors=color, linewidths=1.2))
    else:
        # Flat dots: depth shading would make the far points of a cloud look like another one.
        ax.scatter(*p.T, color=color, s=6, **({"depthshade": False} if dim == 3 else {}))
    return p


@fill(returns_path=_RETURNS_PATH)
def plot_shapes(path, *shapes, labels=None, title=None, panels=False, view=None):
    """Draws shapes (e.g. source, target and deformed) in one figure saved at `path`.

    Meshes as transparent surfaces, curves as segments, point clouds as dots, each shape in its
    own colour, on 3-D axes when any shape is 3-D, with equal scales on every axis (matplotlib,
    Agg).

    Parameters
    ----------
    path : str or path-like
        The file (PNG unless the extension names another format matplotlib writes).
    *shapes : Mesh, Curve or PointCloud
        The shapes, drawn in order.
    labels : list of str, optional
        One legend or panel title per shape.
    title : str, optional
        The figure's title.
    panels : bool, default False
        One panel per shape side by side (same limits), else all together.
    view : (float, float), optional
        (elevation, azimuth) in degrees for 3-D axes.

    {returns_path}

    Raises
    ------
    ValueError
        No shape, labels of another length, or shapes of different dimensions.
    ImportError
        matplotlib is not installed.

    Examples
    --------
    >>> import os, tempfile
    >>> from tessel.shapes import Mesh
    >>> from tessel.shapes.io import plot_shapes
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = plot_shapes(os.path.join(tmp, "sphere.png"), Mesh.icosphere(1),
    ...                        labels=["sphere"])
    ...     size = os.path.getsize(path)
    >>> size > 1000
    True
    """
    import numpy as np
    if not shapes:
        _fail("plot_shapes", "no shapes given; expected plot_shapes(path, shape, ...)")
    for i, s in enumerate(shapes):
        if not isinstance(s, PointCloud):
            raise TypeError(f"tessel.shapes.plot_shapes: shapes[{i}] must be a PointCloud, "
                            f"Curve or Mesh, got {type(s).__name__}")
        if s.dim not in (2, 3):
            _fail("plot_shapes", f"shapes[{i}] has dimension {s.dim}; expected 2 or 3")
    if labels is not None and len(labels) != len(shapes):
        _fail("plot_shapes", f"labels has {len(labels)} entries for {len(shapes)} shapes; "
                             "expected one label per shape")
    _require("plot_shapes", "matplotlib", "matplotlib")
    # Figure without pyplot: no global state and no display needed (the Agg canvas draws it).
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    dim = max(s.dim for s in shapes)
    colors = [_COLORS[i % len(_COLORS)] for i in range(len(shapes))]
    groups = [[k] for k in range(len(shapes))] if panels else [list(range(len(shapes)))]
    fig = Figure(figsize=(5 * len(groups) if panels else 7, 5 if panels else 6), dpi=100)
    axes, pts = [], []
    for n, group in enumerate(groups):
        ax = fig.add_subplot(1, len(groups), n + 1, projection="3d" if dim == 3 else None)
        pts += [_draw(ax, shapes[k], colors[k], dim) for k in group]
        axes.append(ax)
    pts = np.concatenate(pts)
    lo, hi = pts.min(0), pts.max(0)
    center, half = (lo + hi) / 2, max(float((hi - lo).max()) / 2, 1e-12) * 1.05
    for ax, group in zip(axes, groups):
        # Equal scales: a sphere looks round and a deformation is not distorted by the axes.
        ax.set_xlim(center[0] - half, center[0] + half)
        ax.set_ylim(center[1] - half, center[1] + half)
        if dim == 3:
            ax.set_zlim(center[2] - half, center[2] + half)
            ax.set_box_aspect((1, 1, 1))
            if view is not None:
                ax.view_init(elev=view[0], azim=view[1])
        else:
            ax.set_aspect("equal")
        if labels is not None and panels:
            ax.set_title(str(labels[group[0]]))
    if labels is not None and not panels:
        # Proxy patches: surfaces and line collections have no reliable legend entry of their own.
        axes[0].legend(handles=[Patch(color=c, label=str(l)) for c, l in zip(colors, labels)],
                       loc="upper right")
    if title is not None:
        (fig.suptitle if panels else axes[0].set_title)(str(title))
    fig.savefig(os.fspath(path), dpi=100)
    return path
