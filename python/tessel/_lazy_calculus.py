"""LazyTensor's derivative operators and factorisation hints, with pykeops's names and arguments.

grad_matrix, diff, divergence, laplacian and trace_operator call the core's operators of the
same KeOps names (GradMatrix, Diff, ...), which expand them into plain formulas through the
formula VJPs: any backend evaluates them and reductions of them differentiate to any order.
The arguments are checked here first so that an error names the method and the argument the
user passed (pykeops's spelling: `other`, `diffin`, `var`). The variable must be one variable
(Vi, Vj, Pm or a symbolic Var); one that the formula does not read gives derivatives 0, as in
KeOps.

factorize / auto_factorize are KeOps's hints to compute a repeated sub-formula once. tessel's
formulas are hash-consed (equal sub-formulas are one node) and every code generator emits each
node once, so the sharing is already there: the methods return the same formula (the C++ test
`Factorize.RepeatedSubformulaIsEmittedOnce` counts the emitted exponentials).
"""
from . import _core
from ._lazy_build import joint

__all__ = ["Calculus"]


class Calculus:
    """Mixed into LazyTensor after FormulaOps (it uses _operand, _build, _new and variable)."""

    __slots__ = ()

    def _variable_arg(self, who, name, v):
        o = self._operand(v, who)
        if o.variable is None:
            raise ValueError(f"LazyTensor.{who}: {name} must be a LazyTensor that is one variable "
                             f"(Vi, Vj, Pm or a symbolic Var), got {o!r}")
        return o

    def grad_matrix(self, other):
        """The Jacobian of self with respect to the variable `other`, as KeOps lays it out: a
        LazyTensor of dim self.ndim * other.ndim whose entry k * other.ndim + l is
        d self_k / d other_l (the gradients of self's components, concatenated)."""
        v = self._variable_arg("grad_matrix", "other", other)
        return self._build("grad_matrix", _core.grad_matrix, [self, v])

    def diff(self, other, diffin):
        """The differential of self with respect to the variable `other`, applied to `diffin`
        (forward mode: the directional derivative, of dim self.ndim; diffin has other's dim)."""
        v = self._variable_arg("diff", "other", other)
        u = self._operand(diffin, "diff")
        if u.ndim != v.ndim:
            raise ValueError(f"LazyTensor.diff: diffin has dim {u.ndim}; expected the dim "
                             f"{v.ndim} of the variable 'other'")
        return self._build("diff", _core.diff, [self, v, u])

    def divergence(self, var):
        """sum_k d self_k / d var_k, the trace of the Jacobian (self and var of one dim)."""
        v = self._variable_arg("divergence", "var", var)
        if self.ndim != v.ndim:
            raise ValueError(f"LazyTensor.divergence: self has dim {self.ndim} and var dim "
                             f"{v.ndim}; the divergence needs equal dims")
        return self._build("divergence", _core.divergence, [self, v])

    def laplacian(self, var):
        """sum_k d^2 self / d var_k^2, the divergence of the gradient of a scalar self."""
        v = self._variable_arg("laplacian", "var", var)
        if self.ndim != 1:
            raise ValueError(f"LazyTensor.laplacian: self has dim {self.ndim}; the laplacian "
                             "needs a scalar formula (dim 1)")
        return self._build("laplacian", _core.laplacian, [self, v])

    def trace_operator(self, var):
        """The trace of self, a linear function of the variable `var` of the same dim (refused
        when self is not linear in var). The result no longer depends on var. As in pykeops, an
        array var stays an argument of the reduction (its rows still give N or M) and a symbolic
        var does not."""
        v = self._variable_arg("trace_operator", "var", var)
        if self.ndim != v.ndim:
            raise ValueError(f"LazyTensor.trace_operator: self has dim {self.ndim} and var dim "
                             f"{v.ndim}; the trace needs equal dims")
        res = self._build("trace_operator", _core.trace_operator, [self, v])
        if v.variable.placeholder is None:
            return res
        gone = next(k for k, w in enumerate(res._vars) if w.key == v.variable.key)
        index = [k - (k > gone) for k in range(len(res._vars))]
        res._f = res._f.relabel(index)  # var is not in the formula: index[gone] is never read
        res._vars = res._vars[:gone] + res._vars[gone + 1:]
        return res

    def factorize(self, other):
        """KeOps's hint to compute the sub-formula `other` once: tessel already does (equal
        sub-formulas are one node of a hash-consed graph, emitted once), so the formula is self's;
        other's variables join the result's, as in pykeops."""
        o = self._operand(other, "factorize")
        formulas, variables = joint(self, o)
        return self._new(formulas[0], variables, [self, o])

    def auto_factorize(self):
        """KeOps's hint to share repeated sub-formulas: tessel always does (see factorize)."""
        return self
