"""Exact GP regression with the training points sharded over ranks: the BBMM log marginal
likelihood and its gradient, every kernel product a tessel.distributed.Genred Sum reduction
around the ring, every vector held as each rank's rows.

The algorithm is tessel.gp's PyTorch BBMM (tessel/gp/_torch_bbmm.py, the core's algorithm) on
sharded vectors: a pivoted partial Cholesky whose pivots are chosen over all ranks, batched
preconditioned CG on y and the probes with each column's Lanczos coefficients, stochastic
Lanczos quadrature for log det, and GPyTorch's variance-reduced trace estimate for the gradient.
Global sums are gathered and added in rank order, so every rank takes the same branches and
gets the same bits. The probes are drawn over the global rows, so that a sharding changes
nothing but rounding.
"""

import torch

from ..gp import ExactGP as _ExactGP
from ..gp._torch_bbmm import Rows, log_marginal_likelihood
from ._genred import Genred
from ._ring import Ring, check_group

__all__ = ["ExactGP"]

_WHO = "tessel.distributed.ExactGP"


def _allsum(ring, t):
    """The sum over ranks of t (any shape) in float64, the same bits on every rank."""
    return ring.sum_in_order(t.detach().to(torch.float64))


def _gather_rows(ring, t):
    """Every rank's rows of t (n_r, k), concatenated in rank order, on every rank (for small k
    only: the pivots' candidates)."""
    return torch.cat(ring.gather(t.detach().to(torch.float64)))


class _RingRows(Rows):
    """This rank's training rows: sums and candidates gathered over the ranks in rank order,
    products K V as tessel.distributed.Genred reductions around the ring."""

    who = _WHO

    def __init__(self, model, ring):
        super().__init__(model)
        self.ring = ring
        counts = _gather_rows(ring, torch.tensor([[model.x.shape[0]]], dtype=torch.float64,
                                                 device=model.x.device))
        self.counts = [int(c) for c in counts[:, 0].tolist()]
        self.n = sum(self.counts)
        self.offset = sum(self.counts[:ring.rank])

    def allsum(self, t):
        return _allsum(self.ring, t).to(t.device)

    def gather(self, t):
        return _gather_rows(self.ring, t).to(t.device)

    def reduction(self, m):
        key = (self.text, tuple(self.aliases), m)
        cache = self.model.__dict__.setdefault("_genreds", {})
        if key not in cache:
            cache[key] = Genred(f"({self.text})*V", list(self.aliases) + [f"V = Vj(3,{m})"],
                                group=self.ring.group)
        return cache[key]


class ExactGP(_ExactGP):
    """tessel.gp.ExactGP with the training rows sharded over the ranks of a process group.

    Each rank passes its own rows of x and y (and of per-point noise); shards may be uneven.
    ``log_marginal_likelihood`` is the BBMM estimate of the global log p(y), as tessel.gp's BBMM
    mode computes it (pivoted-Cholesky preconditioner of `rank`, batched preconditioned CG on y
    and `probes` probes, stochastic Lanczos quadrature, the variance-reduced gradient), with
    every product K V a tessel.distributed.Genred around the ring and every vector held as the
    ranks' rows: a rank's memory is O(n_r (probes + rank)). It is collective, and so is its
    backward: every rank gets the same value and, in every hyperparameter, the gradient of the
    global log p(y). ``fit`` therefore runs the same optimiser on every rank, in step.

    Parameters
    ----------
    x, y, kernel, noise, mean, fixed_noise, noise_min
        As for tessel.gp.ExactGP, x and y (and per-point noise) holding this rank's rows.
    group : torch.distributed.ProcessGroup, optional
        The ranks that share the rows; None (the default) is the world.

    Raises
    ------
    NotImplementedError
        For mode="exact", and for predictions (not sharded yet: load the fitted state_dict into
        a tessel.gp.ExactGP that holds every row).

    Examples
    --------
    A one-rank gloo group, so that the example runs alone (under ``torchrun``, each process
    runs the same lines with its own rows and ``dist.init_process_group("gloo")``):

    >>> import torch
    >>> import torch.distributed as dist
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> from tessel.distributed import ExactGP
    >>> from tessel.gp import Matern, Scale
    >>> x = torch.rand(200, 2, dtype=torch.float64)   # this rank's rows
    >>> gp = ExactGP(x, torch.sin(4 * x[:, 0]), Scale(Matern(nu=2.5)), noise=0.1)
    >>> lml = gp.log_marginal_likelihood(probes=8, rank=10)
    >>> lml.backward()                                 # collective, like the value
    >>> bool(torch.isfinite(gp.raw_noise.grad).all())
    True
    >>> dist.destroy_process_group()
    """

    _empty_ok = True  # a rank may hold no rows

    def __init__(self, x, y, kernel, noise=0.1, mean="constant", fixed_noise=None,
                 noise_min=1e-4, group=None):
        super().__init__(x, y, kernel, noise=noise, mean=mean, fixed_noise=fixed_noise,
                         exact_max=0, noise_min=noise_min)
        self.group = check_group(_WHO, group)
        self._genreds = {}

    @property
    def n_data(self):
        """The number of training rows over every rank (collective)."""
        ring = Ring.of(self.group, _WHO)
        return int(_allsum(ring, torch.tensor(float(self.x.shape[0]), device=self.x.device)))

    def _mode(self, mode, who):
        if mode in ("auto", "bbmm"):
            return "bbmm"
        if mode == "exact":
            raise NotImplementedError(f"{who}: mode='exact' is not sharded (it needs the dense "
                                      "K); the distributed likelihood is BBMM")
        raise ValueError(f"{who}: mode must be 'auto' or 'bbmm', got {mode!r}")

    def log_marginal_likelihood(self, mode="auto", probes=10, rank=15, seed=0, tol=1e-4,
                                maxiter=0, stats=None):
        """The global log p(y) by BBMM over the ranks, differentiable in every hyperparameter
        (collectively); the arguments as tessel.gp.ExactGP.log_marginal_likelihood's."""
        who = f"{_WHO}.log_marginal_likelihood"
        self._mode(mode, who)
        return log_marginal_likelihood(self, _RingRows(self, Ring.of(self.group, who)), probes,
                                       rank, seed, tol, maxiter, stats, who)

    def _not_sharded(self, name):
        raise NotImplementedError(
            f"{_WHO}.{name}: predictions are not sharded yet; load this model's state_dict into "
            "a tessel.gp.ExactGP holding every row (the hyperparameters are the same on every "
            "rank)")

    def predict(self, *args, **kwargs):
        """Not sharded yet (raises NotImplementedError)."""
        self._not_sharded("predict")

    def predict_covariance(self, *args, **kwargs):
        """Not sharded yet (raises NotImplementedError)."""
        self._not_sharded("predict_covariance")

    def sample(self, *args, **kwargs):
        """Not sharded yet (raises NotImplementedError)."""
        self._not_sharded("sample")
