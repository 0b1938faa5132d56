# Kernels from KeOps formula texts: tessel_reduction / tessel_grad and rkeops's keops_kernel /
# keops_grad, each an R function around one kernel built by the C++ core.

# Errors of the core and of argument checks, re-signalled as conditions of class
# "tessel_error" with the message unchanged and the user's call, not the .Call inside.
tessel_stop <- function(e, call) {
  cond <- structure(
    class = c("tessel_error", "error", "condition"),
    list(message = as.character(e), call = call)
  )
  stop(cond)
}

core_call <- function(call, fun, ...) {
  out <- .Call(fun, ...)
  if (inherits(out, "tessel_core_error")) tessel_stop(out, call)
  out
}

precision_arg <- function(precision) {
  if (!is.character(precision) || length(precision) < 1) {
    stop("precision must be \"double\" or \"float\"", call. = FALSE)
  }
  precision[[1]]
}

# The R function of a built kernel: arguments in alias order, or one list of them (as rkeops),
# named arguments reordered by alias name; no argument returns the kernel's description.
kernel_function <- function(ptr, who) {
  info <- core_call(sys.call(), tessel_r_describe, ptr)
  arg_names <- info$args$name
  f <- function(..., inner_dim = "col") {
    args <- list(...)
    call <- sys.call()
    if (length(args) == 0) {
      return(info)
    }
    if (length(args) == 1 && is.list(args[[1]]) && !is.data.frame(args[[1]])) {
      args <- args[[1]]
    }
    args <- order_args(args, arg_names, who, call)
    if (!identical(inner_dim, "col") && !identical(inner_dim, "row")) {
      stop(structure(class = c("tessel_error", "error", "condition"), list(
        message = paste0(who, ": inner_dim must be \"col\" or \"row\""), call = call
      )))
    }
    out <- core_call(call, tessel_r_eval, ptr, args, identical(inner_dim, "row"))
    if (length(out) == 1) out[[1]] else stats::setNames(out, c("values", "indices"))
  }
  attr(f, "tessel_kernel") <- ptr
  class(f) <- c("tessel_kernel", "function")
  f
}

# Named arguments in alias order; positional ones as given. Unknown names are an error.
order_args <- function(args, arg_names, who, call) {
  nm <- names(args)
  if (is.null(nm) || all(nm == "")) {
    return(args)
  }
  unknown <- setdiff(nm[nm != ""], arg_names)
  if (length(unknown) > 0 || any(nm == "")) {
    what <- if (length(unknown) > 0) {
      paste0("unknown argument name(s) ", paste0("'", unknown, "'", collapse = ", "))
    } else {
      "either name every argument or none"
    }
    stop(structure(class = c("tessel_error", "error", "condition"), list(
      message = paste0(who, ": ", what, "; the arguments are ",
                       paste(arg_names, collapse = ", ")), call = call
    )))
  }
  missing <- setdiff(arg_names, nm)
  if (length(missing) > 0) {
    stop(structure(class = c("tessel_error", "error", "condition"), list(
      message = paste0(who, ": missing argument(s) ", paste(missing, collapse = ", ")),
      call = call
    )))
  }
  args[arg_names]
}

#' A kernel reduction as an R function.
#'
#' @param formula a KeOps reduction text, e.g. "Sum_Reduction(Exp(-G*SqDist(X,Y))*B, 0)";
#'   the last number is 0 to reduce over j (one result row per point x_i), 1 over i.
#' @param args the aliases, e.g. c("X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)").
#' @param precision "double" or "float" (float32 arithmetic; results come back as doubles).
#' @param backend "auto" (compiled code, the interpreter when no compiler works), "compiled",
#'   "interpreter", or a GPU backend where tessel was built with CUDA.
#' @param sum_scheme "block" (default), "kahan" or "direct" (pykeops spellings too).
#' @return a function of the arrays in alias order (or one list of them).
tessel_reduction <- function(formula, args, precision = c("double", "float"),
                             backend = "auto", sum_scheme = "block") {
  make_kernel(formula, args, precision_arg(precision), backend, sum_scheme,
              "tessel_reduction", sys.call())
}

make_kernel <- function(formula, args, precision, backend, sum_scheme, who, call) {
  if (is.null(args)) args <- character(0)
  ptr <- core_call(call, tessel_r_kernel, formula, as.character(args), who, precision, backend,
                   sum_scheme)
  kernel_function(ptr, who)
}

kernel_ptr <- function(kernel, who, call) {
  ptr <- attr(kernel, "tessel_kernel")
  if (is.null(ptr)) {
    stop(structure(class = c("tessel_error", "error", "condition"), list(
      message = paste0(who, ": the first argument must be a kernel made by tessel_reduction, ",
                       "keops_kernel or tessel_grad"), call = call
    )))
  }
  ptr
}

# The 0-based position of `var` (an alias name or a 0-based position, as rkeops's keops_grad).
var_position <- function(ptr, var, who, call) {
  names <- core_call(sys.call(), tessel_r_describe, ptr)$args$name
  pos <- if (is.character(var) && length(var) == 1) {
    match(var, names) - 1L
  } else if (is.numeric(var) && length(var) == 1 && var == round(var)) {
    as.integer(var)
  } else {
    NA_integer_
  }
  if (is.na(pos) || pos < 0 || pos >= length(names)) {
    stop(structure(class = c("tessel_error", "error", "condition"), list(
      message = paste0(who, ": var must be an argument name (", paste(names, collapse = ", "),
                       ") or a 0-based position below ", length(names), "; got ",
                       paste(format(var), collapse = " ")), call = call
    )))
  }
  pos
}

#' The gradient of a kernel for one of its arguments: a new kernel with one more argument, the
#' cotangent of the first output ("eta", then "eta2", ...), differentiable again.
tessel_grad <- function(kernel, var) {
  grad_kernel(kernel, var, "tessel_grad", sys.call())
}

grad_kernel <- function(kernel, var, who, call) {
  ptr <- kernel_ptr(kernel, who, call)
  names <- core_call(sys.call(), tessel_r_describe, ptr)$args$name
  eta <- "eta"
  k <- 1
  while (eta %in% names) {
    k <- k + 1
    eta <- paste0("eta", k)
  }
  pos <- var_position(ptr, var, who, call)
  g <- core_call(call, tessel_r_grad, ptr, pos, eta)
  kernel_function(g, who)
}

#' rkeops 2's keops_kernel: the formula and its aliases give a function of a list of arrays.
#' `precision` and `backend` are tessel's (rkeops sets them with set_rkeops_options).
keops_kernel <- function(formula, args, sum_scheme = "auto", precision = "double",
                         backend = "auto") {
  make_kernel(formula, args, precision_arg(precision), backend, sum_scheme, "keops_kernel",
              sys.call())
}

#' rkeops 2's keops_grad: var is an argument name or a 0-based position.
keops_grad <- function(operator, var) {
  grad_kernel(operator, var, "keops_grad", sys.call())
}

#' What a kernel is: its formula, the core's reduction, arguments, outputs and options.
tessel_info <- function(kernel) {
  core_call(sys.call(), tessel_r_describe, kernel_ptr(kernel, "tessel_info", sys.call()))
}

#' The compiler, SIMD level, threads, kernel cache folder and CUDA status the core sees.
tessel_runtime <- function() core_call(sys.call(), tessel_r_runtime)

print.tessel_kernel <- function(x, ...) {
  info <- tessel_info(x)
  cat("tessel kernel:", info$formula, "\n")
  cat("  reduction:", info$reduction, "\n")
  args <- info$args
  cat("  arguments:", paste0(args$name, " = ", args$cat, "(", args$dim, ")", collapse = ", "),
      "\n")
  cat("  precision:", info$precision, " backend:", info$backend, "\n")
  invisible(x)
}
