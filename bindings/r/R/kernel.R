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

# The cotangent's name: "eta", or "eta2", ... when taken.
fresh_name <- function(names) {
  eta <- "eta"
  k <- 1
  while (eta %in% names) {
    k <- k + 1
    eta <- paste0("eta", k)
  }
  eta
}

grad_kernel <- function(kernel, var, who, call) {
  ptr <- kernel_ptr(kernel, who, call)
  eta <- fresh_name(core_call(sys.call(), tessel_r_describe, ptr)$args$name)
  pos <- var_position(ptr, var, who, call)
  g <- core_call(call, tessel_r_grad, ptr, pos, eta)
  kernel_function(g, who)
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

# ---- rkeops 2's formula texts (keops_kernel, keops_grad) read as rkeops reads them ----------
#
# rkeops 2 hands its last number to pykeops as `axis`: 0 reduces over i (one result row per j),
# 1 over j, the opposite of KeOps's tag that tessel_reduction reads. It writes weights before the
# axis (SumSoftMaxWeight_Reduction(F, W, axis)), and Grad(Red(F, axis), v, e) stands for
# Red(Grad(F, v, e), axis). Ported code gets rkeops's numbers only if the binding reads them so.

# "Name(a, b(c, d), e)" -> list(name = "Name", args = c("a", "b(c, d)", "e")); NULL when the text
# is not one call (the core then reports what is wrong with it).
split_call <- function(text) {
  t <- trimws(text)
  open <- regexpr("(", t, fixed = TRUE)
  if (open < 2 || !endsWith(t, ")")) return(NULL)
  chars <- strsplit(substr(t, open + 1, nchar(t) - 1), "")[[1]]
  depth <- cumsum(chars == "(") - cumsum(chars == ")")
  if (any(depth < 0)) return(NULL)
  cut <- c(0, which(chars == "," & depth == 0), length(chars) + 1)
  args <- vapply(seq_len(length(cut) - 1), function(k) {
    paste(chars[seq_len(cut[k + 1] - cut[k] - 1) + cut[k]], collapse = "")
  }, "")
  list(name = trimws(substr(t, 1, open - 1)), args = trimws(args))
}

weighted_reductions <- c("SumSoftMaxWeight", "LogSumExp", "LogSumExpWeight")

# One rkeops reduction text in the core's form: the axis flipped into KeOps's tag, a weight moved
# after it. Texts that are no reduction call pass unchanged (the core's parser names the fault).
rkeops_formula <- function(formula, who) {
  call <- split_call(formula)
  if (is.null(call)) return(formula)
  if (call$name == "Grad") return(rkeops_grad_text(call$args, who))
  if (!endsWith(call$name, "_Reduction") || length(call$args) < 2) return(formula)
  n <- length(call$args)
  axis <- call$args[n]
  if (!axis %in% c("0", "1")) {
    lazy_fail(who, "the last argument of '", formula, "' must be rkeops's axis: 0 (reduce ",
              "over i, one row per j) or 1 (reduce over j, one row per i); got '", axis, "'")
  }
  tag <- if (axis == "0") "1" else "0"
  op <- sub("_Reduction$", "", call$name)
  args <- if (op %in% weighted_reductions && n == 3) {
    c(call$args[1], tag, call$args[2])
  } else {
    c(call$args[-n], tag)
  }
  paste0(call$name, "(", paste(args, collapse = ", "), ")")
}

# Grad(Red(F, axis), v, e) as rkeops computes it: Red(Grad(F, v, e), axis). For a Sum with v and
# e indexed like the result this is the gradient of <e, Red>; rkeops keeps the axis whatever v is.
rkeops_grad_text <- function(args, who) {
  if (length(args) != 3) {
    lazy_fail(who, "Grad takes three arguments, Grad(Sum_Reduction(F, axis), x, e); got ",
              length(args))
  }
  inner <- split_call(rkeops_formula(args[1], who))
  if (is.null(inner) || !endsWith(inner$name, "_Reduction")) {
    lazy_fail(who, "Grad must wrap a reduction, as in Grad(Sum_Reduction(F, axis), x, e); ",
              "got '", args[1], "'")
  }
  if (inner$name != "Sum_Reduction") {
    lazy_fail(who, "Grad of a ", sub("_Reduction$", "", inner$name), " reduction is not ",
              "taken: rkeops computes it as ", inner$name, "(Grad(F, ", args[2], ", ", args[3],
              "), axis), which is no derivative of that reduction. For its gradient use ",
              "tessel_grad(keops_kernel(\"", args[1], "\", args), \"", args[2], "\")")
  }
  inner$args[1] <- paste0("Grad(", inner$args[1], ", ", args[2], ", ", args[3], ")")
  paste0(inner$name, "(", paste(inner$args, collapse = ", "), ")")
}

#' rkeops 2's keops_kernel: the formula and its aliases give a function of a list of arrays. The
#' last number of the formula is rkeops's axis (0 reduces over i, 1 over j); weights come before
#' it; Grad may wrap a Sum reduction. `precision` and `backend` are tessel's (rkeops sets them
#' with set_rkeops_options).
keops_kernel <- function(formula, args, sum_scheme = "auto", precision = "double",
                         backend = "auto") {
  rkeops_kernel(formula, args, list(sum_scheme = sum_scheme, precision = precision,
                                    backend = backend), "keops_kernel", sys.call())
}

# The kernel of an rkeops text, which keeps that text for keops_grad.
rkeops_kernel <- function(formula, args, opt, who, call) {
  if (!is.character(formula) || length(formula) != 1) {
    lazy_fail(who, "argument 'formula' must be one character string; got ",
              describe_value(formula))
  }
  f <- make_kernel(rkeops_formula(formula, who), args, precision_arg(opt$precision),
                   opt$backend, opt$sum_scheme, who, call)
  attr(f, "rkeops") <- c(list(formula = formula, args = as.character(args)), opt)
  f
}

#' rkeops 2's keops_grad: var is an argument name or a 0-based position. For an operator of
#' keops_kernel it is rkeops's Grad(formula, var, eta): eta indexed like var, of the dim of the
#' reduced formula. For a kernel of tessel_reduction it is tessel_grad.
keops_grad <- function(operator, var) {
  call <- sys.call()
  rk <- attr(operator, "rkeops")
  if (is.null(rk)) return(grad_kernel(operator, var, "keops_grad", call))
  ptr <- kernel_ptr(operator, "keops_grad", call)
  pos <- var_position(ptr, var, "keops_grad", call)
  info <- core_call(call, tessel_r_describe, ptr)
  a <- info$args
  eta <- fresh_name(a$name)
  alias <- sprintf("%s = %s(%d, %d)", eta, a$cat[pos + 1], max(a$index) + 1L,
                   as.integer(info$output_dims[1]))
  rkeops_kernel(sprintf("Grad(%s, %s, %s)", rk$formula, a$name[pos + 1], eta), c(rk$args, alias),
                rk[c("sum_scheme", "precision", "backend")], "keops_grad", call)
}
