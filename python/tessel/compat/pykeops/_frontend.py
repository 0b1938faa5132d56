"""The LazyTensor classes and variable constructors that pykeops.numpy and pykeops.torch define
alike, made from each one's Genred, KernelSolve and array library."""
from ._complex import ComplexDispatch, complex_class
from ._lazytensor import GenericLazyTensor, variable_constructors

# What pykeops.numpy and pykeops.torch export.
FRONTEND_ALL = sorted(["Genred", "generic_sum", "generic_logsumexp", "generic_argmin",
                       "generic_argkmin", "KernelSolve", "LazyTensor", "ComplexLazyTensor", "Vi",
                       "Vj", "Pm"])


def lazy_tensor_classes(module, genred, kernel_solve, array_type, make_array, as_complex, what):
    """(LazyTensor, ComplexLazyTensor, (Var, Vi, Vj, Pm)) of the front-end module `module` (its
    __name__): LazyTensor reduces with `genred` and solves with `kernel_solve`, its arrays are
    `array_type` made by make_array(values, dtype=...); `what` names them in docstrings."""
    def _array(cls, values, dtype):
        return make_array(values, dtype=dtype)

    lazy = type("LazyTensor", (ComplexDispatch, GenericLazyTensor), {
        "__doc__": f"pykeops.{module.rpartition('.')[2]}.LazyTensor: a symbolic (B..., N, M, D) "
                   f"{what} reduced by tessel.",
        "__module__": module, "_array_type": array_type, "_genred_class": genred,
        "_kernelsolve_class": kernel_solve, "_array": classmethod(_array)})
    return lazy, complex_class(lazy, as_complex, what), variable_constructors(lazy, what)
