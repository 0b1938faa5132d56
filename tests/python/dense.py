"""Dense references for the Genred tests: formulas on the full N x M grid, and every reduction.

Formulas are evaluated in PyTorch on broadcast shapes (Vi: (N, 1, d), Vj: (1, M, d), Pm:
(1, 1, d)), so the same code gives NumPy references (through float64 tensors) and dense autograd
references. Index semantics follow NumPy: argmin/argmax return the first NaN if there is one,
else the first extremum; a stable argsort ranks NaN last and ties by index.
"""
import numpy as np
import torch


def sqdist(a, b):
    return ((a - b) ** 2).sum(-1, keepdim=True)


def norm2(a):
    return (a ** 2).sum(-1, keepdim=True).sqrt()


GAUSS_ALIASES = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"]


# ---- float32 error bounds ------------------------------------------------------------------------
# The README's bounds ("Accuracy of sums", "Accuracy of elementary functions") in the rigorous form
# of tests/cpp/sum_bounds.hpp: gamma(k) = k u / (1 - k u) (Higham, 3.4 and 4.2). They hold at every
# SIMD level, on ARM and for any thread count: nothing in them depends on the machine.
U32, UD = 2.0**-24, 2.0**-53
BLOCK_TERMS = 64     # L: float32 run length per lane of the Block scheme
EXTRA_ACC_ADDS = 18  # accumulator additions per lane beyond the runs: head, tail, 16 lanes
EXP_ULPS = 2         # tessel's float32 Exp: within 2 ulp, and 1 ulp <= 2u relative


def gamma(k, u=U32):
    return k * u / (1 - k * u)


def sum_error_bound(n, abs_sum, abs_s, scheme="block", acc_f64=False, u=U32):
    """Bound on |computed sum - exact sum| for n terms with sum |x_i| = abs_sum, |s| = abs_s."""
    if acc_f64:
        rel = gamma(2 * n + EXTRA_ACC_ADDS, UD)
    elif scheme == "block":
        runs = 2 * np.ceil(n / BLOCK_TERMS) + EXTRA_ACC_ADDS
        rel = (1 + gamma(BLOCK_TERMS - 1, u)) * (1 + gamma(runs, UD)) - 1
    elif scheme == "kahan":
        rel = (1 + 2 * u + 4 * n * u * u) * (1 + gamma(EXTRA_ACC_ADDS, UD)) - 1
    else:  # direct: a lane's running sum in the data's precision, lanes in float64
        rel = (1 + gamma(n + 1, u)) * (1 + gamma(EXTRA_ACC_ADDS, UD)) - 1
    return u * abs_s + (1 + u) * rel * abs_sum


def scheme_of(sum_scheme="auto", dtype_acc=None, **_):
    """(scheme, acc_f64) of sum_error_bound() for Genred's options (src/engine/options.cpp)."""
    name = {"auto": "block", "block_sum": "block", "kahan_scheme": "kahan",
            "direct_sum": "direct"}.get(sum_scheme, sum_scheme)
    return name, dtype_acc == "float64"


def _sqdist_err(v, scale=None):
    """(exact value, bound on the float32 rounding error) of [scale *] SqDist(X, Y), 3-d, for
    float32 inputs: each difference and square rounds once, the 3 nonnegative squares add with 2
    roundings (5 in all, relative to the value itself), the scale multiplies once more."""
    d = sqdist(v["X"], v["Y"])
    if scale is None:
        return d, gamma(5) * d
    return scale * d, gamma(6) * scale * d


def _exp_times_err(a, b):
    """Bound on the float32 error of Exp(-a)*B, given -a with its error bound: the argument's
    error e moves Exp by a factor within exp(e), Exp itself is within EXP_ULPS ulp (2u each),
    the product rounds once; below 2^-125.5 float32 kernels under AVX-512 give 0."""
    (a, ea), b = a, b.abs()
    rel = (1 + U32) * (1 + 2 * EXP_ULPS * U32) * torch.exp(ea) - 1
    return rel * torch.exp(-a) * b + 2.0**-125 * b


def reduce_error_bound(op, F, T, axis=1, scheme="block", acc_f64=False):
    """Bound on |float32 result - float64 reference| of reduction `op` (values), for formula values
    F (N, M, d) whose float32 evaluation errs by at most T (same shape), or None where no bound is
    derived here. Sum: the terms' errors, the scheme's bound on the computed terms, and the
    float64 reference's own rounding. Min, Max, KMin: a selection moves by at most the largest
    error of a term (the k-th smallest value is 1-Lipschitz in the sup norm)."""
    if axis == 0:
        F, T = F.transpose(0, 1), T.transpose(0, 1)
    F, T = F.detach().double(), T.detach().double()
    n = F.shape[1]
    if op == "Sum":
        abs_sum, terms_err = F.abs().sum(1), T.sum(1)
        return (terms_err + sum_error_bound(n, abs_sum + terms_err, F.sum(1).abs() + terms_err,
                                            scheme, acc_f64) + gamma(n, UD) * abs_sum)
    T = T.nan_to_num(0.0)  # NaN terms are selected only where both sides give NaN
    if op in ("Min", "Max", "Min_ArgMin", "Max_ArgMax"):
        return T.amax(1)
    if op in ("KMin", "KMin_ArgKMin"):
        return T[..., 0].amax(1, keepdim=True)
    return None


class Case:
    """A formula with its aliases, the shapes of its inputs and its dense PyTorch version, and
    where given (`error`, a function of the grid like `dense`) a bound on the error of its float32
    evaluation for each pair."""

    def __init__(self, name, formula, aliases, dense, dim, error=None):
        self.name, self.formula, self.aliases, self.dense, self.dim = (
            name, formula, list(aliases), dense, dim)
        self.error = error
        self.vars = []  # (name, category "i"/"j"/"p", dim) in alias (= argument) order
        for a in aliases:
            n, rhs = (s.strip() for s in a.split("="))
            cat = {"Vi": "i", "Vj": "j", "Pm": "p"}[rhs[:2]]
            self.vars.append((n, cat, int(rhs[3:-1])))

    def __repr__(self):
        return self.name

    def data(self, n, m, seed=0, dtype=np.float64):
        """Random inputs as NumPy arrays; parameters positive and of shape (d,)."""
        rng = np.random.default_rng(seed)
        out = []
        for _, cat, d in self.vars:
            if cat == "p":
                out.append(rng.uniform(0.3, 1.2, size=d))
            else:
                out.append(rng.standard_normal((n if cat == "i" else m, d)))
        return [a.astype(dtype) for a in out]

    def grid(self, args):
        """Broadcast views of the inputs (torch tensors) keyed by alias name."""
        v = {}
        for (n, cat, d), a in zip(self.vars, args):
            a = a.reshape(-1, d)
            v[n] = a[:, None, :] if cat == "i" else a[None, :, :] if cat == "j" else a.reshape(1, 1, d)
        return v

    def F(self, args, formula=None):
        """The (N, M, dim) values of the formula (or of `formula`, a function of the grid)."""
        v = self.grid(args)
        n = next(a.reshape(-1, d).shape[0] for (_, c, d), a in zip(self.vars, args) if c == "i")
        m = next(a.reshape(-1, d).shape[0] for (_, c, d), a in zip(self.vars, args) if c == "j")
        f = (formula or self.dense)(v)
        return f.expand(n, m, f.shape[-1])

    def F_error(self, args):
        """The (N, M, dim) bounds on the float32 evaluation's error (None where not derived)."""
        if self.error is None:
            return None
        return self.F(args, lambda v: self.error(v).expand_as(self.dense(v)))


CASES = {
    # The Gaussian kernel, scalar (every reduction applies).
    "gauss": Case("gauss", "Exp(-G*SqDist(X,Y))*B", GAUSS_ALIASES,
                  lambda v: torch.exp(-v["G"] * sqdist(v["X"], v["Y"])) * v["B"], 1,
                  lambda v: _exp_times_err(_sqdist_err(v, v["G"]), v["B"])),
    "sqdist": Case("sqdist", "SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"],
                   lambda v: sqdist(v["X"], v["Y"]), 1, lambda v: _sqdist_err(v)[1]),
    "wsqdist": Case("wsqdist", "WeightedSqDist(S,X,Y)", ["S = Pm(3)", "X = Vi(3)", "Y = Vj(3)"],
                    lambda v: (v["S"] * (v["X"] - v["Y"]) ** 2).sum(-1, keepdim=True), 1),
    "norm2": Case("norm2", "Norm2(X-Y)*A + Sin(A*Elem(Y,1))",
                  ["X = Vi(2)", "A = Vi(1)", "Y = Vj(2)"],
                  lambda v: norm2(v["X"] - v["Y"]) * v["A"] + torch.sin(v["A"] * v["Y"][..., 1:2]), 1),
    # Vector-valued.
    "gauss_vec": Case("gauss_vec", "Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"],
                      lambda v: torch.exp(-sqdist(v["X"], v["Y"])) * v["B"], 2,
                      lambda v: _exp_times_err(_sqdist_err(v), v["B"])),
    "concat": Case("concat", "Concat(Norm2(X-Y), (X-Y)*B)", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"],
                   lambda v: torch.cat([norm2(v["X"] - v["Y"]), (v["X"] - v["Y"]) * v["B"]], -1), 4),
    "pm": Case("pm", "(X|P)*Exp(-SqDist(X,Y)) + Sin(Y*P)", ["X = Vi(3)", "Y = Vj(3)", "P = Pm(3)"],
               lambda v: (v["X"] * v["P"]).sum(-1, keepdim=True) * torch.exp(-sqdist(v["X"], v["Y"]))
               + torch.sin(v["Y"] * v["P"]), 3),
}

# Weight formulas (formula2) for LogSumExp and SumSoftMaxWeight on the Gaussian aliases, with their
# dense versions. The LogSumExp weights are positive (their log is taken).
LSE_F = ("-G*SqDist(X,Y)", lambda v: -v["G"] * sqdist(v["X"], v["Y"]))
LSE_W = ("Exp((X-Y)*B)", lambda v: torch.exp((v["X"] - v["Y"]) * v["B"]))
SOFTMAX_G = ("(X-Y)*B", lambda v: (v["X"] - v["Y"]) * v["B"])


def _first_index(f, arg):
    """NumPy's argmin/argmax along axis 1 (first NaN, else first extremum), as int64 tensor."""
    a = f.detach().cpu().double().numpy()
    return torch.from_numpy(arg(a, axis=1).astype(np.int64))


def reduce(op, F, axis=1, k=None, W=None):
    """Dense reference of Genred's reduction on formula values F (N, M, d) and weights W.

    axis=1 reduces over j (M), axis=0 over i (N). Differentiable where the reduction is (indices
    are chosen on the detached values, then values gathered). Returns a tensor or a tuple
    (values, int64 indices).
    """
    if axis == 0:
        F = F.transpose(0, 1)
        W = None if W is None else W.transpose(0, 1)
    if op == "Sum":
        return F.sum(1)
    if op in ("Min", "ArgMin", "Min_ArgMin", "Max", "ArgMax", "Max_ArgMax"):
        idx = _first_index(F, np.argmin if "Min" in op else np.argmax)
        val = torch.gather(F, 1, idx[:, None, :])[:, 0, :]
        return val if op in ("Min", "Max") else idx if op.startswith("Arg") else (val, idx)
    if op in ("KMin", "ArgKMin", "KMin_ArgKMin"):
        # Each component on its own; column q * D + c is component c's q-th best (KeOps).
        a = F.detach().double().numpy()
        idx = torch.from_numpy(np.argsort(a, axis=1, kind="stable")[:, :k].astype(np.int64))
        val = torch.gather(F, 1, idx).flatten(1)
        idx = idx.flatten(1)
        return val if op == "KMin" else idx if op == "ArgKMin" else (val, idx)
    if op == "LogSumExp":
        m = F.detach().max(1, keepdim=True).values
        e = torch.exp(F - m)
        if W is not None:
            e = e * W
        return m[:, 0] + torch.log(e.sum(1))
    if op == "SumSoftMaxWeight":
        m = F.detach().max(1, keepdim=True).values
        e = torch.exp(F - m)
        return (e * W).sum(1) / e.sum(1)
    raise ValueError(op)


def to_torch(args, dtype=torch.float64, requires_grad=False):
    return [torch.tensor(np.asarray(a), dtype=dtype, requires_grad=requires_grad) for a in args]


def to_numpy(out):
    if isinstance(out, tuple):
        return tuple(to_numpy(o) for o in out)
    return out.detach().numpy()
