"""What NumPy and PyTorch KernelSolve share: the solve's reduction, the unknown's slot, options, reports."""
import warnings

from . import _core
from ._genred import GenredSpec, alias_index, normalize_options, ranges_arg, settings_of

_CAT_NAME = {0: "an i-variable (Vi)", 1: "a j-variable (Vj)", 2: "a parameter (Pm)"}


class KernelSolveBase:
    """Solves (alpha I + K) x = b by conjugate gradient, K(v) = Sum_j F(..., v_j) linear in v.

    formula, aliases: as for Genred (KeOps text), a Sum reduction over j (axis=1, the default)
        or over i (axis=0).
    varinvalias: the unknown — an alias name ("B"), its variable index, or "Var(k,d,c)" — which
        must be indexed by the reduced index and have the output's dim. The call takes one
        argument per alias, b standing at the unknown's position.
    K must be symmetric positive semi-definite (a positive definite kernel evaluated on the same
    points for i and j), as conjugate gradient requires; a breakdown is reported as an error.

    Call options: alpha (>= 0), tol (relative residual |b - A x| <= tol |b|; default 1e-6 in
    float64, 1e-5 in float32), atol, maxiter (default max(100, min(2 size, 1000))),
    on_nonconvergence ("warn" by default, "raise" or "ignore"), backend, ranges and stats (a dict
    filled with iterations, residual and converged, and the backward's solve under "backward").
    The CG vectors are float64 whatever the dtype; nothing is stored per iteration.
    """

    _who = "KernelSolve"

    def __init__(self, formula, aliases, varinvalias, axis=1, **options):
        """`options`: backend, dtype_acc, sum_scheme and the pykeops spellings, as for Genred."""
        who = self._who
        self._spec = GenredSpec(formula, aliases, "Sum", axis, None, None, options, who=who)
        self._init_args = dict(formula=formula, aliases=list(aliases), varinvalias=varinvalias,
                               axis=axis, **options)
        if isinstance(varinvalias, bool) or not isinstance(varinvalias, (int, str)):
            raise TypeError(f"{who}: varinvalias must be an alias name or a variable index, got "
                            f"{varinvalias!r}")
        if isinstance(varinvalias, int):
            var = varinvalias
        else:
            var = alias_index(aliases, varinvalias, who)
        slots = {i: (c, d) for i, c, d in self._spec.reduction.inputs()}
        if var not in slots:
            raise ValueError(f"{who}: the unknown {varinvalias!r} (variable {var}) does not occur "
                             f"in the formula")
        cat, dim = slots[var]
        want = 1 if axis == 1 else 0
        if cat != want:
            raise ValueError(f"{who}: the unknown {varinvalias!r} is {_CAT_NAME[cat]} but axis="
                             f"{axis} reduces over {'ij'[want]}: the unknown must be "
                             f"{_CAT_NAME[want]}")
        self.var, self.dim = var, dim

    @property
    def reduction(self):
        """The core's Sum reduction K(v) the solver multiplies by (a tessel.Reduction)."""
        return self._spec.reduction

    def __getstate__(self):
        return dict(self._init_args)

    def __setstate__(self, state):
        self.__init__(**state)

    def _settings(self, args, dtype, alpha, tol, atol, maxiter, on_nonconvergence, backend,
                  ranges):
        """The keyword arguments of _core.kernel_solve(_grad), checked."""
        who = self._who
        self._spec.check_count(args, who)
        given = normalize_options(
            who, dict(alpha=alpha, tol=tol, atol=atol, maxiter=maxiter,
                      on_nonconvergence=on_nonconvergence, backend=backend),
            _core.SOLVE_OPTIONS)
        if self._spec.unread:
            self._spec.check_unread(args, dict(ni=-1, nj=-1), who)
        b = args[self.var]
        if b.ndim not in (1, 2) or (b.ndim == 1 and self.dim != 1) or (
                b.ndim == 2 and b.shape[1] != self.dim):
            shape = f"(n, {self.dim})" + (" or (n,)" if self.dim == 1 else "")
            raise ValueError(f"{who}: b (argument {self.var}) has shape {tuple(b.shape)}; "
                             f"expected {shape} (batch dimensions are not supported)")
        opts = dict(alpha=0.0, tol=1e-6 if dtype == "float64" else 1e-5, atol=0.0, maxiter=0,
                    on_nonconvergence="warn")
        opts.update(given)
        on_nonconvergence = opts.pop("on_nonconvergence")
        settings = self._spec.settings
        if "backend" in opts:  # this call's backend over the solver's options
            settings = settings_of(who, {**self._spec.args["options"],
                                         "backend": opts.pop("backend")})
        opts.update(settings=settings, raise_on_nonconvergence=on_nonconvergence == "raise",
                    ranges=ranges_arg(ranges, who))
        return opts, on_nonconvergence

    def _report(self, report, on_nonconvergence, stats, key=None):
        iterations, residual, converged = report[:3]
        info = dict(iterations=int(iterations), residual=float(residual),
                    converged=bool(converged))
        if stats is not None:
            if key is None:
                stats.update(info)
            else:
                stats[key] = info
        if not converged and on_nonconvergence == "warn":
            what = "backward solve" if key else "solve"
            warnings.warn(f"{self._who}: the {what} did not converge after {iterations} "
                          f"iterations: relative residual {residual:.3g}; raise maxiter or "
                          "alpha, or loosen tol", RuntimeWarning, stacklevel=3)
        return info
