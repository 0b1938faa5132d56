"""How test_keopscore_ops.py draws each keopscore 2.3 op's arguments, and its torch float64 reference.

A case says how many arguments the op takes, how to draw their dims and the op's parameters, the
range of the inputs and the reference: keopscore's own `torch_op()` where it gives a correct one,
else a formula written here (REF_WHY says why keopscore's is not used). References receive the
arguments broadcast to (N, M, dim) and return (N, M, out dim); autodiff ops (Grad, Diff, ...) are
referenced through torch.autograd on those per-pair tensors.
"""
import torch
import torch.nn.functional as tf


class Case:
    """nargs: formula arguments. dims(rng) -> their dims; params(rng, dims) -> integer parameters.
    ref(*args, *params): the reference (None: keopscore's torch_op). ranges: (lo, hi) per argument
    for uniform inputs (None: keopscore's test_ranges, else standard normal); ints: integer inputs
    in [lo, hi] (ties for comparisons). cats: fixed categories ('i', 'j', 'p'), else drawn i/j.
    grad: indices of the arguments differentiated (None: all). text(vs, params, dims, cats): the
    formula, when it is not op(v0, ..., params). prep(args): fixes drawn inputs (sorted knots).
    draw(rng) -> (dims, params), for ops whose parameters and dims are drawn together."""

    def __init__(self, nargs=1, dims=None, params=None, ref=None, ranges=None, ints=False,
                 cats=None, grad=None, text=None, prep=None, draw=None):
        self.nargs, self.ref, self.ranges, self.ints, self.cats = nargs, ref, ranges, ints, cats
        dims, params = dims or _same_dims(nargs), params or (lambda rng, dims: ())
        self.draw = draw or (lambda rng: (lambda d: (d, tuple(params(rng, d))))(dims(rng)))
        self.grad, self.text, self.prep = grad, text, prep


def _same_dims(nargs):
    """Elementwise ops: one dim d for all, any argument but one possibly of dim 1 (broadcast)."""
    def draw(rng):
        d = int(rng.integers(1, 5))
        dims = [d if rng.random() < 0.6 else 1 for _ in range(nargs)]
        dims[int(rng.integers(nargs))] = d
        return dims
    return draw


def _fixed(*dims):
    return lambda rng: list(dims)


def _d(lo=1, hi=5):
    return lambda rng: [int(rng.integers(lo, hi + 1))]


# ---- complex numbers as KeOps stores them: (re, im) pairs along the last dim ----
def _c(x):
    return torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())


def _r(z):
    return torch.view_as_real(z).flatten(-2)


def _even(nargs, lo=1, hi=3):
    def draw(rng):
        return [2 * int(rng.integers(lo, hi + 1))] * nargs
    return draw


# ---- references written here ----
def _vjp(f, x, e):
    return torch.autograd.grad((f * e).sum(), x, create_graph=True)[0]


def _jacobian_rows(f, x):
    """[d f_k / d x for each k]: per-pair (N, M, dim x) rows (f is computed from the leaf x)."""
    return [torch.autograd.grad(f[..., k].sum(), x, create_graph=True)[0]
            for k in range(f.shape[-1])]


def _inner(x, y):  # the vector formula F(v0, v1) = exp(<v0, v1>) v1 of the autodiff cases
    return torch.exp((x * y).sum(-1, keepdim=True)) * y


INNER = "Mult(Exp(Scalprod(v0,v1)),v1)"


def _sinc(x):
    """sin(x)/x; below |x| = 1 its Taylor series to x^20 (the next term is < 2e-21), whose
    derivative does not cancel as cos(x)/x - sin(x)/x^2 does near 0."""
    u, series, term = x * x, torch.ones_like(x), torch.ones_like(x)
    for k in range(1, 11):
        term = -term * u / ((2 * k) * (2 * k + 1))
        series = series + term
    far = x.abs() >= 1
    return torch.where(far, torch.sin(x) / torch.where(far, x, torch.ones_like(x)), series)


def _bspline(t, x, order):
    K = t.shape[-1]
    b = [((t[..., j:j + 1] <= x) & (x < t[..., j + 1:j + 2])).to(x.dtype) for j in range(K - 1)]

    def w(j, k):
        den = t[..., j + k:j + k + 1] - t[..., j:j + 1]
        return torch.where(den > 0, (x - t[..., j:j + 1]) / torch.where(den > 0, den, 1.0), 0.0)
    for k in range(1, order + 1):
        b = [w(j, k) * b[j] + (1 - w(j + 1, k)) * b[j + 1] for j in range(K - 1 - k)]
    return torch.cat(b, -1)


def _softdtw(x, y, gamma):
    """Soft-DTW of the squared differences, the recursion keopscore's SoftDTW_SqDist code
    describes: plain sums along the first row and column, r_ij = d_ij + softmin_gamma(r_i-1,j-1,
    r_i-1,j, r_i,j-1) inside. (pykeops 2.3's own CPU kernel is no reference: it takes the minimum
    in float32 (fminf) and gives NaN for the one pair x = (.3, -.5, .9, .1), y = (.2, -.7),
    gamma = .8.)"""
    n, m = x.shape[-1], y.shape[-1]
    r = {}
    for i in range(n):
        for j in range(m):
            d = (x[..., i:i + 1] - y[..., j:j + 1]) ** 2
            if i == 0 and j == 0:
                r[i, j] = d
            elif i == 0 or j == 0:  # the first row and column: plain sums
                r[i, j] = d + (r[i - 1, j] if i else r[i, j - 1])
            else:
                prev = torch.stack([r[i - 1, j - 1], r[i - 1, j], r[i, j - 1]])
                r[i, j] = d - gamma * torch.logsumexp(-prev / gamma, 0)
    return r[n - 1, m - 1]


def _tensordot(a, b, da, db, ca, cb, perm):
    A, B = a.reshape(*a.shape[:-1], *da), b.reshape(*b.shape[:-1], *db)
    nb = a.dim() - 1
    # One einsum label per axis; contracted pairs share theirs. Kept axes: a's, then b's.
    la = [10 + k for k in range(len(da))]
    lb = [20 + k for k in range(len(db))]
    for p, q in zip(ca, cb):
        lb[q] = la[p]
    keep = [x for x in la if x not in [la[p] for p in ca]] + [x for k, x in enumerate(lb)
                                                               if k not in cb]
    out = torch.einsum(A, [*range(nb), *la], B, [*range(nb), *lb], [*range(nb), *keep])
    # KeOps's `permute` names where each kept axis goes (out axis perm[k] is kept axis k): the
    # inverse of torch's permute, which names where each output axis comes from.
    inverse = sorted(range(len(perm)), key=perm.__getitem__)
    out = out.permute(*range(nb), *[nb + p for p in inverse])
    return out.reshape(*out.shape[:nb], -1)


def _kron(a, b, da, db):
    A, B = a.reshape(*a.shape[:-1], *da), b.reshape(*b.shape[:-1], *db)
    nb, r = a.dim() - 1, len(da)
    out = A.reshape(*A.shape, *[1] * r) * B.reshape(*B.shape[:nb], *[1] * r, *db)
    inter = [k for pair in zip(range(nb, nb + r), range(nb + r, nb + 2 * r)) for k in pair]
    out = out.permute(*range(nb), *inter)
    return out.reshape(*out.shape[:nb], -1)


def _weighted_sqnorm(s, x):
    d = x.shape[-1]
    if s.shape[-1] == 1:
        return s * (x * x).sum(-1, keepdim=True)
    if s.shape[-1] == d:
        return (s * x * x).sum(-1, keepdim=True)
    S = s.reshape(*s.shape[:-1], d, d)
    return (x[..., :, None] * S * x[..., None, :]).sum((-1, -2))[..., None]


def _cmp(fn):
    return lambda a, b: fn(a, b).to(a.dtype)


def _tensordot_draw(rng):
    """A (p, q, c) . B (c, r) over c, with kept axes (p, q, r) of distinct sizes permuted by a
    3-cycle, which differs from its inverse (so a permutation applied backwards is caught)."""
    p, q, r = (int(v) for v in rng.permutation([2, 3, 4]))
    c = int(rng.integers(1, 4))
    perm = ((1, 2, 0), (2, 0, 1))[int(rng.integers(2))]
    return [p * q * c, c * r], ((p, q, c), (c, r), (2,), (0,), perm)


def _kron_draw(rng):
    da, db = (tuple(int(v) for v in rng.integers(1, 4, size=2)) for _ in range(2))
    return [da[0] * da[1], db[0] * db[1]], (da, db)


def _tuple(t):
    return "(" + ",".join(map(str, t)) + ("," if len(t) == 1 else "") + ")"


# Ops whose keopscore torch_op is not used, and why.
REF_WHY = {
    "Sum": "keopscore's torch_op is torch.sum without keepdim (sums every axis)",
    "SinXDivX": "the derivative of keopscore's torch_op, cos(x)/x - sin(x)/x^2, cancels near 0",
    "NotEqual": "keopscore's torch_op returns float32",
    "ElemT": "keopscore's torch_op assigns into a temporary copy: it returns zeros",
    "OneHot": "keopscore's torch_op indexes the last axis with every row's value at once",
    "Kron": "keopscore's torch_op is torch.kron on the flattened vectors, not on the dims given",
}

CASES = {
    # ---- maths: elementwise (keopscore's VectorizedScalarOp), broadcasting dim-1 arguments ----
    **{n: Case() for n in ("Abs", "Atan", "Cos", "Exp", "Floor", "Inv", "Minus", "ReLU",
                           "Sign", "Sin")},
    "SinXDivX": Case(ref=_sinc),
    **{n: Case(1, ranges=[r]) for n, r in (("Acos", (-1, 1)), ("Asin", (-1, 1)),
                                           ("Log", (0, 2)), ("XLogX", (0, 2)),
                                           ("Sqrt", (0, 2)), ("Rsqrt", (0.5, 2)))},
    **{n: Case(2) for n in ("Add", "Subtract", "Mult", "Divide", "Atan2")},
    "Powf": Case(2, ranges=[(0, 2), (-1, 1)]),
    "Square": Case(ref=lambda x: x * x),
    "Step": Case(ref=lambda x: (x >= 0).to(x.dtype), ints=True, ranges=[(-2, 2)]),
    "Pow": Case(params=lambda rng, d: (int(rng.integers(-2, 5)),), ranges=[(0.2, 2)]),
    "Round": Case(params=lambda rng, d: (int(rng.integers(0, 4)),),
                  ref=lambda x, k: torch.round(x * 10 ** k) / 10 ** k),
    "ClampInt": Case(params=lambda rng, d: tuple(sorted(int(v) for v in
                                                       rng.integers(-2, 3, size=2)))),
    "DiffClampInt": Case(params=lambda rng, d: tuple(sorted(int(v) for v in
                                                           rng.integers(-2, 3, size=2))),
                         ref=lambda x, a, b: ((x >= a) & (x <= b)).to(x.dtype)),
    "Clamp": Case(3, ranges=[(-2, 2), (-1.5, -0.1), (0.1, 1.5)],
                  ref=lambda x, a, b: torch.where(x < a, a, torch.where(x > b, b, x))),
    "IfElse": Case(3, ints=True, ranges=[(-2, 2)] * 3,
                   ref=lambda x, a, b: torch.where(x >= 0, a, b)),
    "Mod": Case(3, ranges=[(-3, 3), (0.5, 2), (-1, 1)]),
    "Equal": Case(2, ints=True, ranges=[(-1, 1)] * 2, ref=_cmp(torch.eq)),
    "NotEqual": Case(2, ints=True, ranges=[(-1, 1)] * 2, ref=_cmp(torch.ne)),
    "LessThan": Case(2, ints=True, ranges=[(-1, 1)] * 2, ref=_cmp(torch.lt)),
    "LessOrEqual": Case(2, ints=True, ranges=[(-1, 1)] * 2, ref=_cmp(torch.le)),
    # ---- maths: reductions over the vector, indexing, products ----
    **{n: Case(dims=_d(2, 6)) for n in ("Max", "Min", "ArgMax", "ArgMin")},
    "Sum": Case(dims=_d(), ref=lambda x: x.sum(-1, keepdim=True)),
    "SumT": Case(dims=_fixed(1), params=lambda rng, d: (int(rng.integers(1, 5)),),
                 ref=lambda x, d: x.expand(*x.shape[:-1], d)),
    "Norm2": Case(dims=_d(), ref=lambda x: x.norm(dim=-1, keepdim=True)),
    "SqNorm2": Case(dims=_d(), ref=lambda x: (x * x).sum(-1, keepdim=True)),
    # dim >= 2: at dim 1 Normalize is Sign, whose derivative 0 the reference gets as rounding noise
    "Normalize": Case(dims=_d(2, 5), ref=lambda x: x / x.norm(dim=-1, keepdim=True)),
    "Scalprod": Case(2, dims=lambda rng: _d()(rng) * 2,
                     ref=lambda x, y: (x * y).sum(-1, keepdim=True)),
    "SqDist": Case(2, dims=lambda rng: _d()(rng) * 2,
                   ref=lambda x, y: ((x - y) ** 2).sum(-1, keepdim=True)),
    "SqNormIso": Case(2, dims=lambda rng: [1] + _d()(rng), ref=_weighted_sqnorm),
    "SqNormDiag": Case(2, dims=lambda rng: _d(2, 4)(rng) * 2, ref=_weighted_sqnorm),
    "SymSqNorm": Case(2, dims=lambda rng: (lambda d: [d * d, d])(int(rng.integers(2, 4))),
                      ref=_weighted_sqnorm),
    "WeightedSqNorm": Case(2, dims=lambda rng: (lambda d: [int(rng.choice([1, d, d * d])), d])(
        int(rng.integers(2, 4))), ref=_weighted_sqnorm),
    "WeightedSqDist": Case(3, dims=lambda rng: (lambda d: [int(rng.choice([1, d, d * d])), d, d])(
        int(rng.integers(2, 4))), ref=lambda s, x, y: _weighted_sqnorm(s, x - y)),
    "Elem": Case(dims=_d(2, 6), params=lambda rng, d: (int(rng.integers(d[0])),)),
    "ElemT": Case(dims=_fixed(1), params=lambda rng, d: (lambda n: (n, int(rng.integers(n))))(
        int(rng.integers(1, 6))), ref=lambda x, n, m: tf.pad(x, (m, n - m - 1))),
    "Extract": Case(dims=_d(2, 6), params=lambda rng, d: (lambda s: (s, int(rng.integers(
        1, d[0] - s + 1))))(int(rng.integers(d[0])))),
    "ExtractT": Case(dims=_d(1, 4), params=lambda rng, d: (lambda s: (s, s + d[0] + int(
        rng.integers(0, 3))))(int(rng.integers(0, 3)))),
    "OneHot": Case(dims=_fixed(1), ints=True, ranges=[(0, 3)],
                   params=lambda rng, d: (int(rng.integers(4, 6)),),
                   ref=lambda x, D: tf.one_hot(torch.floor(x.detach() + 0.5).long()[..., 0],
                                               D).to(x.dtype)),
    "Concat": Case(2, dims=lambda rng: [int(v) for v in rng.integers(1, 5, size=2)],
                   ref=lambda a, b: torch.cat([a, b], -1)),
    "MatVecMult": Case(2, dims=lambda rng: (lambda m, n: [m * n, n])(
        *(int(v) for v in rng.integers(1, 4, size=2))),
        ref=lambda A, b: (A.reshape(*A.shape[:-1], -1, b.shape[-1]) @ b[..., None])[..., 0]),
    "VecMatMult": Case(2, dims=lambda rng: (lambda n, p: [n, n * p])(
        *(int(v) for v in rng.integers(1, 4, size=2))),
        ref=lambda b, A: (b[..., None, :] @ A.reshape(*A.shape[:-1], b.shape[-1], -1))[..., 0, :]),
    "TensorProd": Case(2, dims=lambda rng: [int(v) for v in rng.integers(1, 4, size=2)],
                       ref=lambda a, b: (a[..., :, None] * b[..., None, :]).flatten(-2)),
    "TensorDot": Case(2, draw=_tensordot_draw, ref=_tensordot,
                      text=lambda vs, p, d, c: f"TensorDot({vs[0]},{vs[1]},"
                      + ",".join(_tuple(t) for t in p) + ")"),
    "Kron": Case(2, draw=_kron_draw, ref=_kron,
                 text=lambda vs, p, d, c: f"Kron({vs[0]},{vs[1]},{_tuple(p[0])},{_tuple(p[1])})"),
    "BSpline": Case(2, dims=lambda rng: [int(rng.integers(3, 7)), 1],
                    params=lambda rng, d: (int(rng.integers(0, d[0] - 1)),),
                    ranges=[(0, 1), (0, 1)], ref=_bspline, grad=(),  # KeOps: no derivative
                    prep=lambda a: [a[0].sort(-1).values, a[1]]),
    "SoftDTW_SqDist": Case(3, dims=lambda rng: [int(v) for v in rng.integers(1, 5, size=2)] + [1],
                           cats=None, ranges=[(-1, 1), (-1, 1), (0.5, 1.5)], ref=_softdtw,
                           grad=(0, 1)),  # KeOps has no derivative in gamma
    "IntInv": Case(params=lambda rng, d: (int(rng.integers(1, 6)),), ref=lambda x, n: x / n,
                   text=lambda vs, p, d, c: f"Mult(IntInv({p[0]}),{vs[0]})"),
    "GradMatrix": Case(2, dims=lambda rng: _d(1, 3)(rng) * 2,
                       ref=lambda x, y: torch.cat(_jacobian_rows(_inner(x, y), x), -1),
                       text=lambda vs, p, d, c: f"GradMatrix({INNER},v0)"),
    # ---- variables ----
    "IntCst": Case(params=lambda rng, d: (int(rng.integers(-3, 4)),), ref=lambda x, n: n * x,
                   text=lambda vs, p, d, c: f"Mult(IntCst({p[0]}),{vs[0]})"),
    "RatCst": Case(params=lambda rng, d: (int(rng.integers(-3, 4)), int(rng.integers(1, 5))),
                   ref=lambda x, p, q: x * p / q,
                   text=lambda vs, p, d, c: f"Mult(RatCst({p[0]},{p[1]}),{vs[0]})"),
    "Var": Case(2, dims=lambda rng: _d()(rng) * 2, ref=lambda x, y: x + y,
                text=lambda vs, p, d, c: "Add(" + ",".join(
                    f"Var({k},{d[k]},{'ijp'.index(c[k])})" for k in range(2)) + ")"),
    "Zero": Case(ref=lambda x: x, text=lambda vs, p, d, c: f"Add(Zero({d[0]}),{vs[0]})"),
    # ---- autodiff and factorization, on F(v0, v1) = exp(<v0, v1>) v1 ----
    "Grad": Case(3, dims=lambda rng: _d(1, 3)(rng) * 3,
                 ref=lambda x, y, e: _vjp(_inner(x, y), x, e),
                 text=lambda vs, p, d, c: f"Grad({INNER},v0,v2)"),
    "Diff": Case(3, dims=lambda rng: _d(1, 3)(rng) * 3,
                 ref=lambda x, y, u: torch.cat([(r * u).sum(-1, keepdim=True) for r in
                                                _jacobian_rows(_inner(x, y), x)], -1),
                 text=lambda vs, p, d, c: f"Diff({INNER},v0,v2)"),
    "Divergence": Case(2, dims=lambda rng: _d(1, 3)(rng) * 2,
                       ref=lambda x, y: sum(r[..., k:k + 1] for k, r in
                                            enumerate(_jacobian_rows(_inner(x, y), x))),
                       text=lambda vs, p, d, c: f"Divergence({INNER},v0)"),
    "Laplacian": Case(2, dims=lambda rng: _d(1, 3)(rng) * 2,
                      ref=lambda x, y: sum(r[..., k:k + 1] for k, r in enumerate(_jacobian_rows(
                          _vjp(torch.exp(-((x - y) ** 2).sum(-1, keepdim=True)), x, 1.0), x))),
                      text=lambda vs, p, d, c: "Laplacian(Exp(-SqDist(v0,v1)),v0)"),
    "Factorize": Case(2, dims=lambda rng: _d()(rng) * 2,
                      ref=lambda x, y: torch.exp(x) * y + torch.exp(x),
                      text=lambda vs, p, d, c: "Factorize(Add(Mult(Exp(v0),v1),Exp(v0)),Exp(v0))"),
    "AutoFactorize": Case(2, dims=lambda rng: _d()(rng) * 2,
                          ref=lambda x, y: torch.exp(x) * y + torch.exp(x),
                          text=lambda vs, p, d, c: "AutoFactorize(Add(Mult(Exp(v0),v1),Exp(v0)))"),
    # the Jacobian of v0 -> v1 * v0 is diag(v1)
    "TraceOperator": Case(2, dims=lambda rng: _d()(rng) * 2,
                          ref=lambda x, y: y.sum(-1, keepdim=True),
                          text=lambda vs, p, d, c: "TraceOperator(Mult(v1,v0),v0)"),
    # ---- complex numbers, stored as (re, im) pairs ----
    **{n: Case(1, dims=_even(1), ref=f) for n, f in (
        ("ComplexAbs", lambda x: _c(x).abs()),
        ("ComplexAngle", lambda x: _c(x).angle()),
        ("ComplexExp", lambda x: _r(torch.exp(_c(x)))),
        ("ComplexImag", lambda x: _c(x).imag),
        ("ComplexReal", lambda x: _c(x).real),
        ("ComplexSquareAbs", lambda x: _c(x).abs() ** 2),
        ("ComplexSum", lambda x: _r(_c(x).sum(-1, keepdim=True))),
        ("Conj", lambda x: _r(torch.conj_physical(_c(x)))))},
    **{n: Case(2, dims=_even(2), ref=f) for n, f in (
        ("ComplexAdd", lambda x, y: _r(_c(x) + _c(y))),
        ("ComplexSubtract", lambda x, y: _r(_c(x) - _c(y))),
        ("ComplexMult", lambda x, y: _r(_c(x) * _c(y))),
        ("ComplexDivide", lambda x, y: _r(_c(x) / _c(y))))},
    **{n: Case(1, dims=_d(1, 3), ref=f) for n, f in (
        ("ComplexExp1j", lambda x: _r(torch.exp(1j * x))),
        ("Real2Complex", lambda x: _r(torch.complex(x, torch.zeros_like(x)))),
        ("Imag2Complex", lambda x: _r(torch.complex(torch.zeros_like(x), x))))},
    # pykeops 2.3 computes its value but cannot build its gradient ("dimensions are not
    # compatible for VectorizedComplexScalarOp"); the gradient checked here is torch's.
    "ComplexRealScal": Case(2, dims=lambda rng: [1] + _even(1)(rng),
                            ref=lambda f, g: _r(f * _c(g))),
    "ComplexSumT": Case(1, dims=_fixed(2), params=lambda rng, d: (2 * int(rng.integers(1, 4)),),
                        ref=lambda x, D: x.repeat(*[1] * (x.dim() - 1), D // 2)),
}
