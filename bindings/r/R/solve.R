# Kernel linear solves (alpha I + K) x = b by the core's conjugate gradient (kernel_solve).

solve_result <- function(res, who) {
  if (!res$converged) {
    warning(who, ": conjugate gradient did not converge in ", res$iterations,
            " iterations (relative residual ", signif(res$residual, 3), ")", call. = FALSE)
  }
  x <- res$x
  attr(x, "solve") <- res[c("iterations", "residual", "converged")]
  x
}

#' Solves (alpha I + K) x = b where `kernel` is a Sum reduction linear in its argument `var`
#' (name or 0-based position), which holds b in `args`. K must be symmetric positive definite
#' (alpha >= 0). maxiter = 0: the core's default.
kernel_solve <- function(kernel, args, var, alpha = 0, tol = 1e-6, maxiter = 0) {
  call <- sys.call()
  ptr <- kernel_ptr(kernel, "kernel_solve", call)
  pos <- var_position(ptr, var, "kernel_solve", call)
  res <- core_call(call, tessel_r_solve, ptr, pos, args, as.numeric(alpha), as.numeric(tol),
                   as.numeric(maxiter))
  solve_result(res, "kernel_solve")
}

#' pykeops's KernelSolve: formula (no reduction around it) linear in the alias `varinvalias`;
#' axis = 0 reduces over i, 1 over j, as pykeops. Returns function(..., alpha, tol, maxiter).
KernelSolve <- function(formula, aliases, varinvalias, axis = 0, precision = "double",
                        backend = "auto") {
  call <- sys.call()
  if (length(axis) != 1 || !axis %in% c(0, 1)) {
    lazy_fail("KernelSolve", "argument 'axis' must be 0 (over i) or 1 (over j); got ",
              describe_value(axis))
  }
  text <- paste0("Sum_Reduction(", formula, ", ", if (axis == 1) 0 else 1, ")")
  ptr <- core_call(call, tessel_r_kernel, text, as.character(aliases), "KernelSolve",
                   precision_arg(precision), backend, "block")
  pos <- var_position(ptr, varinvalias, "KernelSolve", call)
  function(..., alpha = 1e-10, tol = 1e-6, maxiter = 0) {
    args <- list(...)
    if (length(args) == 1 && is.list(args[[1]])) args <- args[[1]]
    res <- core_call(sys.call(), tessel_r_solve, ptr, pos, args, as.numeric(alpha),
                     as.numeric(tol), as.numeric(maxiter))
    solve_result(res, "KernelSolve")
  }
}

#' solve(K, b, alpha): (alpha I + K) x = b for a symbolic kernel matrix K (a LazyTensor of
#' dim 1 in i and j) and an R matrix b with one row per j point.
solve.LazyTensor <- function(a, b, alpha = 0, tol = 1e-6, maxiter = 0, ...) {
  tessel_solve(a, b, alpha = alpha, tol = tol, maxiter = maxiter)
}

tessel_solve <- function(K, b, alpha = 0, tol = 1e-6, maxiter = 0) {
  call <- sys.call()
  if (!is.LazyTensor(K)) lazy_fail("tessel_solve", "K must be a LazyTensor")
  if (!is.numeric(b)) lazy_fail("tessel_solve", "b must be a numeric matrix or vector")
  bj <- Vj(b)
  kb <- K * bj
  t <- lazy_text(kb$formula, kb$vars)
  pos <- match(names(bj$vars), t$tokens)
  text <- paste0("Sum_Reduction(", t$texts, ", 0)")
  ptr <- lazy_kernel(text, t$aliases, "tessel_solve")
  res <- core_call(call, tessel_r_solve, ptr, pos - 1L, t$data, as.numeric(alpha),
                   as.numeric(tol), as.numeric(maxiter))
  solve_result(res, "tessel_solve")
}
