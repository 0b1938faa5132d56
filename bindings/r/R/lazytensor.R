# LazyTensor expressions as in rkeops 2 (Vi, Vj, Pm, arithmetic, reductions): each reduction
# writes a KeOps formula text and its aliases and calls the same C++ kernel as tessel_reduction.

lazy_state <- new.env(parent = emptyenv())
lazy_state$next_id <- 0
lazy_state$kernels <- new.env(parent = emptyenv())

# A variable's placeholder in formula texts; reductions rename placeholders by order of
# appearance, so that equal expressions on other data give the same text (one compile).
new_token <- function() {
  lazy_state$next_id <- lazy_state$next_id + 1
  paste0("@", lazy_state$next_id, "@")
}

lazy <- function(formula, vars, dim) {
  structure(list(formula = formula, vars = vars, dim = as.integer(dim)), class = "LazyTensor")
}

is.LazyTensor <- function(x) inherits(x, "LazyTensor")

lazy_fail <- function(who, ...) {
  stop(structure(class = c("tessel_error", "error", "condition"),
                 list(message = paste0(who, ": ", ...), call = NULL)))
}

#' A symbolic variable: x's rows are points indexed by i ("i") or j ("j"); a numeric vector
#' without index is a parameter (Pm).
LazyTensor <- function(x, index = NA) {
  if (is.LazyTensor(x)) return(x)
  if (!is.numeric(x)) lazy_fail("LazyTensor", "x must be a numeric matrix or vector")
  if (anyNA(x)) lazy_fail("LazyTensor", "x contains NA; remove or impute missing values first")
  ok <- length(index) == 1 && (is.na(index) || (is.character(index) && index %in% c("i", "j")))
  if (!ok || is.LazyTensor(index)) {
    lazy_fail("LazyTensor", "argument 'index' must be \"i\", \"j\" or NA (a parameter); got ",
              describe_value(index))
  }
  if (is.na(index)) {
    cat <- "Pm"
    dim <- length(x)
    x <- as.numeric(x)
  } else {
    cat <- if (index == "i") "Vi" else "Vj"
    if (!is.matrix(x)) x <- matrix(x, ncol = 1)
    dim <- ncol(x)
  }
  if (dim < 1) lazy_fail("LazyTensor", "x has no columns")
  token <- new_token()
  vars <- list()
  vars[[token]] <- list(cat = cat, dim = dim, data = x)
  lazy(token, vars, dim)
}

Vi <- function(x) LazyTensor(x, "i")
Vj <- function(x) LazyTensor(x, "j")
Pm <- function(x) LazyTensor(x, NA)

as_lazy <- function(x) if (is.LazyTensor(x)) x else Pm(x)

merge_vars <- function(a, b) {
  v <- a$vars
  for (t in names(b$vars)) v[[t]] <- b$vars[[t]]
  v
}

unary <- function(x, op, dim = x$dim) lazy(paste0(op, "(", x$formula, ")"), x$vars, dim)

binary <- function(a, b, op, who) {
  a <- as_lazy(a)
  b <- as_lazy(b)
  if (a$dim != b$dim && a$dim != 1 && b$dim != 1) {
    lazy_fail(who, "the operands have dims ", a$dim, " and ", b$dim,
              "; they must be equal or one of them 1")
  }
  lazy(paste0("(", a$formula, op, b$formula, ")"), merge_vars(a, b), max(a$dim, b$dim))
}

power <- function(x, p) {
  if (is.numeric(p) && length(p) == 1 && !is.LazyTensor(p)) {
    if (p == 2) return(unary(x, "Square"))
    if (p == 0.5) return(unary(x, "Sqrt"))
    if (p == -0.5) return(unary(x, "Rsqrt"))
    if (p == round(p) && abs(p) < 1e6) {
      return(lazy(paste0("Pow(", x$formula, ",", as.integer(p), ")"), x$vars, x$dim))
    }
  }
  p <- as_lazy(p)
  lazy(paste0("Powf(", x$formula, ",", p$formula, ")"), merge_vars(x, p), max(x$dim, p$dim))
}

Ops.LazyTensor <- function(e1, e2) {
  g <- .Generic
  if (missing(e2)) {
    if (g == "-") return(unary(e1, "Minus"))
    if (g == "+") return(e1)
    lazy_fail("LazyTensor", "unary ", g, " is not defined")
  }
  switch(g,
    "+" = , "-" = , "*" = , "/" = binary(e1, e2, g, g),
    "^" = power(as_lazy(e1), e2),
    "|" = {
      r <- binary(e1, e2, "|", "|")
      if (as_lazy(e1)$dim != as_lazy(e2)$dim) lazy_fail("|", "the operands' dims differ")
      lazy(r$formula, r$vars, 1L)
    },
    lazy_fail("LazyTensor", "the operator ", g, " is not defined; see the package's docs/r.md")
  )
}

math_ops <- c(exp = "Exp", log = "Log", sqrt = "Sqrt", abs = "Abs", sin = "Sin", cos = "Cos",
              sign = "Sign", floor = "Floor", asin = "Asin", acos = "Acos", atan = "Atan")

Math.LazyTensor <- function(x, ...) {
  op <- math_ops[.Generic]
  if (is.na(op)) lazy_fail(.Generic, "is not defined for LazyTensors")
  unary(x, op)
}

square <- function(x) if (is.LazyTensor(x)) unary(x, "Square") else x^2
rsqrt <- function(x) if (is.LazyTensor(x)) unary(x, "Rsqrt") else 1 / sqrt(x)
inv <- function(x) if (is.LazyTensor(x)) unary(x, "Inv") else 1 / x
normalize <- function(x) unary(as_lazy(x), "Normalize")
sqnorm2 <- function(x) unary(as_lazy(x), "SqNorm2", 1L)
norm2 <- function(x) unary(as_lazy(x), "Norm2", 1L)
sqdist <- function(x, y) {
  r <- binary(x, y, ",", "sqdist")
  lazy(paste0("SqDist", r$formula), r$vars, 1L)
}

#' Matrix product K %*% b: the sum over j of K_ij b_j (b an R matrix with one row per j).
"%*%" <- function(x, y) {
  if (!is.LazyTensor(x)) return(base::`%*%`(x, y))
  if (!is.LazyTensor(y)) y <- Vj(y)
  sum(x * y, index = "j")
}

# Placeholders renamed a0, a1, ... by first appearance, with their aliases and data.
lazy_text <- function(texts, vars) {
  tokens <- unique(unlist(regmatches(texts, gregexpr("@[0-9]+@", texts))))
  names <- paste0("a", seq_along(tokens) - 1L)
  for (k in seq_along(tokens)) texts <- gsub(tokens[k], names[k], texts, fixed = TRUE)
  aliases <- vapply(seq_along(tokens), function(k) {
    v <- vars[[tokens[k]]]
    paste0(names[k], " = ", v$cat, "(", v$dim, ")")
  }, "")
  list(texts = texts, aliases = aliases, tokens = tokens,
       data = lapply(tokens, function(t) vars[[t]]$data))
}

# Kernels are kept per text, precision and backend: a repeated expression is not parsed again.
lazy_kernel <- function(text, aliases, who) {
  precision <- getOption("tessel.precision", "double")
  backend <- getOption("tessel.backend", "auto")
  key <- paste(c(text, aliases, precision, backend, who), collapse = "\r")
  k <- lazy_state$kernels[[key]]
  if (is.null(k)) {
    k <- core_call(NULL, tessel_r_kernel, text, aliases, who, precision, backend,
                   "block")
    lazy_state$kernels[[key]] <- k
  }
  k
}

# Errors carry no call: the user's expression is not at a fixed depth of the dispatch.
lazy_eval <- function(text, aliases, data, who) {
  k <- lazy_kernel(text, aliases, who)
  out <- core_call(NULL, tessel_r_eval, k, data, FALSE)
  if (length(out) == 1) out[[1]] else stats::setNames(out, c("values", "indices"))
}

print.LazyTensor <- function(x, ...) {
  t <- lazy_text(x$formula, x$vars)
  cat("LazyTensor of dim", x$dim, ":", t$texts, "\n  with", paste(t$aliases, collapse = ", "),
      "\n")
  invisible(x)
}
