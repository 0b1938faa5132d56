"""What pykeops.numpy.utils and pykeops.torch.utils share: dense reference kernels and array tools.

pykeops's own tests (and some user code) compare KeOps reductions with these dense NumPy / torch
kernels, and write backend-generic code against `numpytools` / `torchtools`. The kernels here are
written once over a small namespace of array functions (`xp`), so both front ends give the same
formulas; an unknown kernel name raises a ValueError (pykeops's NumPy helpers return None).
"""

KERNELS = ("gaussian", "laplacian", "cauchy", "inverse_multiquadric")
SPHERE_KERNELS = ("binet", "linear", "gaussian_unoriented", "gaussian_oriented")


def _check(fn, kernel, known):
    if kernel not in known:
        raise ValueError(f"{fn}: kernel must be one of {', '.join(map(repr, known))}; "
                         f"got {kernel!r}")


def squared_distances(x, y):
    """(N, M) matrix of |x_i - y_j|^2 for x (N, D) and y (M, D), through |x|^2 + |y|^2 - 2 x.y
    (as pykeops's helpers do: cheap, but it can round to small negative values)."""
    xx = (x ** 2).sum(1).reshape(-1, 1)
    yy = (y ** 2).sum(1).reshape(1, -1)
    return xx + yy - 2.0 * (x @ y.T)


def kernel(xp, fn, x, y, s, name):
    """The dense (N, M) radial kernel matrix k(|x_i - y_j|) with scale s."""
    _check(fn, name, KERNELS)
    r2 = squared_distances(x, y) / (s * s)
    if name == "gaussian":
        return xp.exp(-r2)
    if name == "laplacian":
        return xp.exp(-xp.sqrt(squared_distances(x, y)) / s)
    if name == "cauchy":
        return 1.0 / (1 + r2)
    return xp.rsqrt(1 + r2)


def log_kernel(xp, fn, x, y, s, name):
    """The logarithm of kernel(...), computed without exp (for log-domain references)."""
    _check(fn, name, KERNELS)
    sq = squared_distances(x, y)
    if name == "gaussian":
        return -sq / (s * s)
    if name == "laplacian":
        return -xp.sqrt(sq) / s
    if name == "cauchy":
        return -xp.log(1 + sq / (s * s))
    return -0.5 * xp.log(1.0 + sq / (s * s))


def grad_kernel(xp, fn, x, y, s, name):
    """d k / d(|x - y|^2) of the radial kernel, as a dense (N, M) matrix."""
    _check(fn, name, KERNELS)
    sq = squared_distances(x, y)
    r2 = sq / (s * s)
    if name == "gaussian":
        return -xp.exp(-r2) / (s * s)
    if name == "laplacian":
        t = -xp.sqrt(r2)
        return xp.exp(t) / (2 * s * s * t)
    if name == "cauchy":
        return -1.0 / (s * (r2 + 1)) ** 2
    return -0.5 / ((s ** 2) * ((r2 + 1) ** 1.5))


def sphere_kernel(xp, fn, nalpha, nbeta, s, name):
    """Kernels on unit normals (varifold / current kernels) from their inner products."""
    _check(fn, name, SPHERE_KERNELS)
    prs = nalpha @ nbeta.T
    if name == "binet":
        return prs ** 2
    if name == "linear":
        return prs
    if name == "gaussian_unoriented":
        return xp.exp((-2.0 + 2.0 * prs * prs) / (s * s))
    return xp.exp((-2.0 + 2.0 * prs) / (s * s))


def complex_detector(array_type, is_complex_array):
    """detect_complex of numpytools / torchtools: a Python complex, a list holding one, or a
    complex array."""
    def detect_complex(x):
        if type(x) == list:  # noqa: E721  (pykeops tests the exact type: a subclass is no list)
            return any(type(v) == complex for v in x)  # noqa: E721
        if type(x) == array_type:  # noqa: E721
            return bool(is_complex_array(x))
        return type(x) == complex  # noqa: E721
    return detect_complex
