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


class Case:
    """A formula with its aliases, the shapes of its inputs and its dense PyTorch version."""

    def __init__(self, name, formula, aliases, dense, dim):
        self.name, self.formula, self.aliases, self.dense, self.dim = (
            name, formula, list(aliases), dense, dim)
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


CASES = {
    # The Gaussian kernel, scalar (every reduction applies).
    "gauss": Case("gauss", "Exp(-G*SqDist(X,Y))*B", GAUSS_ALIASES,
                  lambda v: torch.exp(-v["G"] * sqdist(v["X"], v["Y"])) * v["B"], 1),
    "sqdist": Case("sqdist", "SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"],
                   lambda v: sqdist(v["X"], v["Y"]), 1),
    "wsqdist": Case("wsqdist", "WeightedSqDist(S,X,Y)", ["S = Pm(3)", "X = Vi(3)", "Y = Vj(3)"],
                    lambda v: (v["S"] * (v["X"] - v["Y"]) ** 2).sum(-1, keepdim=True), 1),
    "norm2": Case("norm2", "Norm2(X-Y)*A + Sin(A*Elem(Y,1))",
                  ["X = Vi(2)", "A = Vi(1)", "Y = Vj(2)"],
                  lambda v: norm2(v["X"] - v["Y"]) * v["A"] + torch.sin(v["A"] * v["Y"][..., 1:2]), 1),
    # Vector-valued.
    "gauss_vec": Case("gauss_vec", "Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"],
                      lambda v: torch.exp(-sqdist(v["X"], v["Y"])) * v["B"], 2),
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
        a = F[..., 0].detach().double().numpy()
        idx = torch.from_numpy(np.argsort(a, axis=1, kind="stable")[:, :k].astype(np.int64))
        val = torch.gather(F[..., 0], 1, idx)
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
