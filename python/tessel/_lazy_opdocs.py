"""What each LazyTensor method made from the core's op table computes, for its docstring.

The op table (``_core.op_table()``) gives names, arities and parameters but no prose, so the
descriptions live here, keyed by the core op's name. A new op without an entry still gets a
docstring (its operands and parameters, from the table), so the table never needs an edit here.
Complex ops work on vectors stored as KeOps stores them: (re0, im0, re1, im1, ...).
"""

__all__ = ["table_method_doc"]

OP_DOCS = {
    "Minus": "``x.minus()``: -x elementwise, as ``-x``.",
    "Exp": "``x.exp()``: the exponential e^x elementwise (Gaussian kernels are "
           "``(-g * x.sqdist(y)).exp()``).",
    "Log": "``x.log()``: the natural logarithm elementwise (-inf at 0, NaN below).",
    "XLogX": "``x.xlogx()``: x log x elementwise, 0 at x = 0 (its limit), as in entropies.",
    "Sqrt": "``x.sqrt()``: the square root elementwise (``x ** 0.5``); its gradient at 0 is 0.",
    "Rsqrt": "``x.rsqrt()``: 1 / sqrt(x) elementwise (``x ** -0.5``), 0 at x = 0 as in KeOps.",
    "Inv": "``x.inv()``: 1 / x elementwise.",
    "Pow": "``x.pow(n)``: x to the integer power n elementwise, by repeated products (as "
           "``x ** n``; ``x ** 2`` is ``square``).",
    "Square": "``x.square()``: x * x elementwise (``x ** 2``).",
    "Abs": "``x.abs()``: |x| elementwise (``abs(x)``); its gradient is sign(x), 0 at 0.",
    "Sign": "``x.sign()``: -1, 0 or 1 elementwise as x is negative, zero or positive (no "
            "gradient).",
    "Step": "``x.step()``: the Heaviside step elementwise, 0 for x < 0 and 1 for x >= 0 (no "
            "gradient).",
    "ReLU": "``x.relu()``: max(x, 0) elementwise; its gradient is step(x).",
    "Sin": "``x.sin()``: the sine elementwise (radians).",
    "Cos": "``x.cos()``: the cosine elementwise (radians).",
    "Asin": "``x.asin()``: the arc sine elementwise, in [-pi/2, pi/2] (NaN outside [-1, 1]).",
    "Acos": "``x.acos()``: the arc cosine elementwise, in [0, pi] (NaN outside [-1, 1]).",
    "Atan": "``x.atan()``: the arc tangent elementwise, in (-pi/2, pi/2).",
    "SinXDivX": "``x.sinxdivx()``: sin(x) / x elementwise, 1 at x = 0 (the unnormalised sinc; "
                "``sinc`` is sin(pi x) / (pi x)).",
    "Atan2": "``y.atan2(x)``: the angle of the point (x, y) elementwise, atan2(y, x) in "
             "[-pi, pi], as ``numpy.arctan2(y, x)``.",
    "Floor": "``x.floor()``: the largest integer <= x elementwise (no gradient).",
    "Round": "``x.round(decimals=0)``: x rounded to ``decimals`` decimal places elementwise, "
             "halves away from zero (no gradient).",
    "ClampInt": "``x.clampint(a, b)``: x clamped to the integer bounds a <= b elementwise "
                "(``clamp`` with integer bounds builds it).",
    "IfElse": "``c.ifelse(a, b)``: a where c >= 0, b elsewhere (a NaN c selects b), elementwise; "
              "the gradient flows to the branch selected.",
    "ElemMin": "``x.elemmin(y)``: the smaller of x and y elementwise.",
    "ElemMax": "``x.elemmax(y)``: the larger of x and y elementwise.",
    "Less": "``x.less(y)``: 1 where x < y, 0 elsewhere (``x < y``).",
    "LessEq": "``x.lesseq(y)``: 1 where x <= y, 0 elsewhere (``x <= y``).",
    "Greater": "``x.greater(y)``: 1 where x > y, 0 elsewhere (``x > y``).",
    "GreaterEq": "``x.greatereq(y)``: 1 where x >= y, 0 elsewhere (``x >= y``).",
    "Equal": "``x.equal(y)``: 1 where x == y, 0 elsewhere (``x == y``).",
    "NotEqual": "``x.notequal(y)``: 1 where x != y, 0 elsewhere (``x != y``).",
    "Concat": "``x.concat(y)``: the components of x followed by those of y (dim x.ndim + "
              "y.ndim).",
    "OneHot": "``x.onehot(D)``: the one-hot vector of dim D of a scalar x holding an integer "
              "(``one_hot``).",
    "SqNorm2": "``x.sqnorm2()``: the squared Euclidean norm, the sum of x_k^2 over the D "
               "components (dim 1).",
    "Norm2": "``x.norm2()``: the Euclidean norm over the D components (dim 1).",
    "Normalize": "``x.normalize()``: x / |x|, the unit vector of x's direction (dim D).",
    "SqDist": "``x.sqdist(y)``: the squared Euclidean distance |x - y|^2 (dim 1), x and y of "
              "one dim.",
    "SymSqNorm": "``s.symsqnorm(x)``: the quadratic form x^T S x for the full D x D matrix S "
                 "stored row-major in s (dim D * D); dim 1.",
    "SqNormIso": "``s.sqnormiso(x)``: s |x|^2 for a scalar weight s (dim 1).",
    "SqNormDiag": "``s.sqnormdiag(x)``: the sum of s_k x_k^2 over the components, for a "
                  "diagonal weight s of x's dim (dim 1).",
    "MatVecMult": "``a.matvecmult(v)``: the product A v of the row-major matrix A stored in a "
                  "(dim m * n) and the vector v (dim n); dim m.",
    "VecMatMult": "``v.vecmatmult(a)``: the product v^T A of the vector v (dim m) and the "
                  "row-major matrix A stored in a (dim m * n); dim n.",
    "TensorProd": "``x.tensorprod(y)``: the outer product x y^T, row-major (dim x.ndim * y.ndim).",
    "TensorDot": "``a.keops_tensordot(b, dimfa, dimfb, contfa, contfb, permute)``: KeOps's "
                 "TensorDot, the tensors of shapes dimfa and dimfb stored row-major in a and b "
                 "contracted over the axes contfa of a with contfb of b, the result's axes "
                 "optionally permuted (pykeops's arguments).",
    "ComplexAdd": "``z.complexadd(w)``: the complex sum z + w (as ``+`` on complex "
                  "LazyTensors).",
    "ComplexSubtract": "``z.complexsubtract(w)``: the complex difference z - w.",
    "ComplexMult": "``z.complexmult(w)``: the complex product z w, elementwise.",
    "ComplexDivide": "``z.complexdivide(w)``: the complex quotient z / w, elementwise.",
    "Conj": "``z.conj()``: the complex conjugate, elementwise.",
    "ComplexExp": "``z.complexexp()``: the complex exponential e^z, elementwise.",
    "ComplexReal": "``z.complexreal()``: the real parts, as a real formula of half the dim.",
    "ComplexImag": "``z.compleximag()``: the imaginary parts, as a real formula of half the dim.",
    "ComplexSquareAbs": "``z.complexsquareabs()``: |z|^2 of each complex number (real, half the "
                        "dim).",
    "ComplexAbs": "``z.complexabs()``: |z| of each complex number (real, half the dim).",
    "ComplexAngle": "``z.complexangle()``: the argument atan2(imag, real) of each complex number "
                    "(real, half the dim).",
    "ComplexExp1j": "``x.complexexp1j()``: e^(i x) = cos x + i sin x of each real x (complex, "
                    "twice the dim).",
    "ComplexRealScal": "``s.complexrealscal(z)``: the complex vector z scaled by the real scalar "
                       "s (dim 1).",
    "ComplexSum": "``z.complexsum()``: the sum of the complex components, one complex number "
                  "(dim 2).",
    "ComplexSumT": "``z.complexsumt(dim)``: the complex number z (dim 2) repeated to an even dim "
                   "``dim``, the adjoint of ``complexsum``.",
    "ElemT": "``x.elemt(n, m)``: the scalar x in component m of a dim-n vector, zeros "
             "elsewhere (the adjoint of ``elem``).",
    "ExtractT": "``x.extractt(start, dim)``: x in components start .. start + x.ndim - 1 of a "
                "dim-``dim`` vector, zeros elsewhere (the adjoint of ``extract``).",
    "SumT": "``x.sumt(dim)``: the scalar x repeated in every component of a dim-``dim`` vector "
            "(the adjoint of a sum over the components).",
    "DiffClampInt": "``x.diffclampint(a, b)``: 1 where a <= x <= b, 0 elsewhere: the "
                    "derivative of ``clampint(a, b)``.",
    "SoftDTW_SqDist": "``x.softdtw_sqdist(y, gamma)``: the soft dynamic time warping "
                      "discrepancy of the series x and y (their components) with the squared "
                      "difference as cost and smoothing gamma > 0 (dim 1), as KeOps's "
                      "SoftDTW_SqDist.",
    "Kron": "``a.keops_kron(b, dimfself, dimfother)``: the Kronecker product of the tensors of "
            "shapes dimfself and dimfother stored row-major in a and b, flattened as "
            "``numpy.kron``.",
}


def table_method_doc(op, arity, params):
    """The docstring of the method for op `op`: what it computes, then how it is called."""
    tuples, least, most, names = params
    operands = arity - 1
    call = (f"It takes {operands} operand(s) (LazyTensors, arrays or numbers)" if operands
            else "It takes no operand")
    if most:
        count = str(most) if least == most else f"{least} to {most}"
        what = "tuple(s) of integers" if tuples else "integer parameter(s)"
        call += f" and {count} {what}" + (f" ({', '.join(names.split())})" if names else "")
    head = OP_DOCS.get(op, f"The core op ``{op}``.")
    return (f"{head}\n\n{call}; it builds the core op ``{op}`` of the op table and returns a "
            "LazyTensor (nothing is computed until a reduction).")
