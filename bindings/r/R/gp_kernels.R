# GP kernels for tessel_gp() as values: gp_rbf(), gp_matern(), gp_rq(), gp_periodic(),
# gp_linear(), gp_polynomial(), gp_spectral_mixture(), scaled by gp_scale() (or a number times a
# kernel), added and multiplied with + and *. A kernel is a tree;
# gp_kernel_build() writes it as one formula text over one parameter vector TH, the same texts
# tessel.gp's Python kernels write, so the core gives the gradient in every hyperparameter.

# A leaf or a node: kind, its parameters' starting values (NULL: from the data), its children.
# settings: what is fixed, not learned (a polynomial's power, a mixture's count).
gp_kernel_node <- function(kind, params = list(), children = list(), ard = FALSE, nu = NULL,
                           settings = list()) {
  structure(list(kind = kind, params = params, children = children, ard = ard, nu = nu,
                 settings = settings),
            class = "tessel_gp_kernel")
}

gp_kernel_count <- function(v, what, who) {
  if (!is.numeric(v) || length(v) != 1 || !is.finite(v) || v < 1 || v != round(v)) {
    lazy_fail(who, what, " must be an integer >= 1; got ", paste(format(v), collapse = ", "))
  }
  as.integer(v)
}

gp_kernel_check <- function(v, what, who, len = NULL) {
  if (is.null(v)) return(NULL)
  if (!is.numeric(v) || length(v) < 1 || (!is.null(len) && length(v) != len) ||
      !all(is.finite(v)) || any(v <= 0)) {
    lazy_fail(who, what, " must be ", if (is.null(len)) "" else paste0(len, " "),
              "finite positive number(s); got ", paste(format(v), collapse = ", "))
  }
  as.numeric(v)
}

#' The squared exponential kernel exp(-r^2 / 2), r = |(x - y) / lengthscale|: one lengthscale, or
#' one per input dimension (ard = TRUE). lengthscale = NULL starts from the inputs' deviations.
gp_rbf <- function(lengthscale = NULL, ard = TRUE) {
  gp_kernel_node("rbf", list(lengthscale = gp_kernel_check(lengthscale, "lengthscale", "gp_rbf")),
                 ard = isTRUE(ard) || length(lengthscale) > 1)
}

#' The Matérn kernel of smoothness nu = 0.5, 1.5 or 2.5 (as gp_rbf for the lengthscales).
gp_matern <- function(nu = 2.5, lengthscale = NULL, ard = TRUE) {
  if (!is.numeric(nu) || length(nu) != 1 || !nu %in% c(0.5, 1.5, 2.5)) {
    lazy_fail("gp_matern", "nu must be 0.5, 1.5 or 2.5; got ", paste(format(nu), collapse = ", "))
  }
  gp_kernel_node("matern",
                 list(lengthscale = gp_kernel_check(lengthscale, "lengthscale", "gp_matern")),
                 ard = isTRUE(ard) || length(lengthscale) > 1, nu = nu)
}

#' The rational quadratic kernel (1 + r^2 / (2 alpha))^(-alpha), alpha learned with the rest.
gp_rq <- function(lengthscale = NULL, alpha = 1, ard = TRUE) {
  gp_kernel_node("rq", list(lengthscale = gp_kernel_check(lengthscale, "lengthscale", "gp_rq"),
                            alpha = gp_kernel_check(alpha, "alpha", "gp_rq", 1)),
                 ard = isTRUE(ard) || length(lengthscale) > 1)
}

#' The periodic kernel exp(-2 sum_d sin^2(pi (x_d - y_d) / period) / lengthscale^2) (GPyTorch's
#' PeriodicKernel; scikit-learn's ExpSineSquared in one dimension): one period and lengthscale.
gp_periodic <- function(period = 1, lengthscale = 1) {
  gp_kernel_node("periodic",
                 list(lengthscale = gp_kernel_check(lengthscale, "lengthscale", "gp_periodic", 1),
                      period = gp_kernel_check(period, "period", "gp_periodic", 1)))
}

#' The linear kernel variance * x^T y (GPyTorch's LinearKernel). It is not stationary: centre the
#' inputs first.
gp_linear <- function(variance = 1) {
  gp_kernel_node("linear", list(variance = gp_kernel_check(variance, "variance", "gp_linear", 1)))
}

#' The polynomial kernel (x^T y + offset)^power (GPyTorch's PolynomialKernel): the offset is
#' learned, the power (an integer >= 1) is fixed.
gp_polynomial <- function(power = 2, offset = 1) {
  power <- gp_kernel_count(power, "power", "gp_polynomial")
  gp_kernel_node("polynomial",
                 list(offset = gp_kernel_check(offset, "offset", "gp_polynomial", 1)),
                 settings = list(power = power))
}

#' Wilson and Adams' spectral mixture kernel (GPyTorch's SpectralMixtureKernel): with
#' tau = x - y, sum_q w_q exp(-2 pi^2 sum_d (tau_d s_qd)^2) prod_d cos(2 pi tau_d mu_qd).
#' weights: Q values; means (frequencies) and scales (inverse lengthscales): Q x d matrices (a
#' vector of Q for one input dimension). NULL starts as tessel.gp's SpectralMixture does: weights
#' 1 / Q, frequency q / Q for mixture q in every dimension, scales 1.
gp_spectral_mixture <- function(num_mixtures = 4, weights = NULL, means = NULL, scales = NULL) {
  who <- "gp_spectral_mixture"
  q <- gp_kernel_count(num_mixtures, "num_mixtures", who)
  per_mixture <- function(v, what) {
    if (is.null(v)) return(NULL)
    m <- if (is.matrix(v)) v else matrix(v, nrow = q)
    if (nrow(m) != q) {
      lazy_fail(who, what, " must have ", q, " rows (one per mixture); got ", nrow(m))
    }
    matrix(gp_kernel_check(as.numeric(m), what, who), nrow = q)
  }
  gp_kernel_node("spectral_mixture",
                 list(weights = gp_kernel_check(weights, "weights", who, q),
                      means = per_mixture(means, "means"), scales = per_mixture(scales, "scales")),
                 settings = list(q = q))
}

#' outputscale * k(x, y), the output scale learned with the rest.
gp_scale <- function(kernel, outputscale = 1) {
  if (!inherits(kernel, "tessel_gp_kernel")) {
    lazy_fail("gp_scale", "kernel must be a GP kernel (gp_rbf(), gp_matern(), ...); got ",
              class(kernel)[1])
  }
  gp_kernel_node("scale", list(outputscale = gp_kernel_check(outputscale, "outputscale",
                                                             "gp_scale", 1)),
                 children = list(kernel))
}

#' k1 + k2 and k1 * k2 for GP kernels; a positive number times a kernel is gp_scale(kernel, it).
Ops.tessel_gp_kernel <- function(e1, e2) {
  who <- paste0("tessel_gp kernel '", .Generic, "'")
  if (!.Generic %in% c("+", "*") || missing(e2)) {
    lazy_fail(who, "GP kernels combine with + and * only")
  }
  if (.Generic == "*" && is.numeric(e1)) return(gp_scale(e2, e1))
  if (.Generic == "*" && is.numeric(e2)) return(gp_scale(e1, e2))
  if (!inherits(e1, "tessel_gp_kernel") || !inherits(e2, "tessel_gp_kernel")) {
    other <- if (inherits(e1, "tessel_gp_kernel")) e2 else e1
    lazy_fail(who, "both sides must be GP kernels", if (.Generic == "*") " (or a number)",
              "; got ", class(other)[1])
  }
  gp_kernel_node(if (.Generic == "+") "sum" else "product", children = list(e1, e2))
}

print.tessel_gp_kernel <- function(x, ...) {
  cat("tessel_gp kernel:", gp_kernel_label(x), "\n")
  invisible(x)
}

gp_kernel_label <- function(k) {
  switch(k$kind,
         sum = paste(vapply(k$children, gp_kernel_label, ""), collapse = " + "),
         product = paste(vapply(k$children, function(c) {
           l <- gp_kernel_label(c)
           if (c$kind == "sum") paste0("(", l, ")") else l
         }, ""), collapse = " * "),
         scale = paste0("scale(", gp_kernel_label(k$children[[1]]), ")"),
         matern = paste0("matern", 2 * k$nu, "2"),
         polynomial = paste0("polynomial(power ", k$settings$power, ")"),
         spectral_mixture = paste0("spectral_mixture(", k$settings$q, ")"),
         k$kind)
}

# The kernel as one formula text over TH, its starting values, each value's name and the kernel
# with its lengthscales resolved (gp_kernel_resolve). x gives the dimension. Names: the leaf's
# kind and its place from the left, e.g. "periodic2.period".
# Each kind's parameters in their order in TH (a node's before its children's): the one place
# gp_kernel_build() and gp_kernel_with() read it from.
# A matrix parameter goes in by rows (a mixture's values together).
gp_param_order <- list(scale = "outputscale", periodic = c("period", "lengthscale"),
                       rbf = "lengthscale", matern = "lengthscale", rq = c("lengthscale", "alpha"),
                       linear = "variance", polynomial = "offset",
                       spectral_mixture = c("weights", "means", "scales"))

gp_kernel_build <- function(kernel, x, who) {
  d <- ncol(x)
  state <- new.env()
  state$theta <- numeric(0)
  state$names <- character(0)
  state$count <- 0L
  add <- function(values, name) {
    at <- length(state$theta)
    if (is.matrix(values)) values <- as.numeric(t(values))
    state$theta <- c(state$theta, values)
    state$names <- c(state$names, if (length(values) == 1) name else
      paste0(name, seq_along(values)))
    if (length(values) == 1) sprintf("Elem(TH,%d)", at) else
      sprintf("Extract(TH,%d,%d)", at, length(values))
  }
  walk <- function(k) {
    if (k$kind %in% c("sum", "product")) {
      parts <- vapply(k$children, walk, "")
      return(paste0("(", parts, ")", collapse = if (k$kind == "sum") "+" else "*"))
    }
    state$count <- state$count + 1L
    tag <- paste0(if (k$kind == "matern") paste0("matern", 2 * k$nu, "2") else k$kind,
                  state$count, ".")
    ell <- k$params$lengthscale
    if (isTRUE(k$ard) && length(ell) != d) {
      lazy_fail(who, "the kernel ", sub("[.]$", "", tag), " has ", length(ell),
                " lengthscales for ", d, " input dimension(s); expected ", d, " (or ard = FALSE)")
    }
    order <- gp_param_order[[k$kind]]
    if (k$kind == "spectral_mixture") return(spectral_text(k, tag))
    th <- stats::setNames(lapply(order, function(p) add(k$params[[p]], paste0(tag, p))), order)
    if (k$kind == "linear") return(sprintf("%s*(X|Y)", th$variance))
    if (k$kind == "polynomial") {
      return(sprintf("Pow((X|Y)+%s,%d)", th$offset, k$settings$power))
    }
    if (k$kind == "scale") return(sprintf("%s*(%s)", th$outputscale, walk(k$children[[1]])))
    if (k$kind == "periodic") {
      return(sprintf("Exp(-IntCst(2)*Sum(Square(Sin(%s*(X-Y)/%s)))/Square(%s))",
                     format(pi, digits = 17), th$period, th$lengthscale))
    }
    r2 <- sprintf("WeightedSqDist(Inv(Square(%s)),X,Y)", th$lengthscale)
    if (k$kind == "rbf") return(sprintf("Exp(-%s/IntCst(2))", r2))
    if (k$kind == "rq") {
      return(sprintf("Exp(-%s*Log(IntCst(1)+%s/(IntCst(2)*%s)))", th$alpha, r2, th$alpha))
    }
    r <- sprintf("Sqrt(%s)", r2)
    switch(as.character(k$nu),
      "0.5" = sprintf("Exp(-%s)", r),
      "1.5" = sprintf("(IntCst(1)+1.7320508075688772*%s)*Exp(-1.7320508075688772*%s)", r, r),
      "2.5" = sprintf(paste0("(IntCst(1)+2.23606797749979*%s+1.6666666666666667*Square(%s))",
                             "*Exp(-2.23606797749979*%s)"), r, r, r))
  }
  # One term per mixture, each reading its weight, its frequencies one by one and its scales.
  spectral_text <- function(k, tag) {
    q <- k$settings$q
    for (p in c("means", "scales")) {
      if (ncol(k$params[[p]]) != d) {
        lazy_fail(who, "the kernel ", sub("[.]$", "", tag), " has ", p, " for ",
                  ncol(k$params[[p]]), " input dimension(s); expected ", d)
      }
    }
    # Where each parameter starts in TH; a matrix's row j (mixture j) at start + (j - 1) d.
    start <- list()
    for (p in gp_param_order$spectral_mixture) {
      start[[p]] <- length(state$theta)
      add(k$params[[p]], paste0(tag, p))
    }
    elem <- function(i) sprintf("Elem(TH,%d)", i)
    diff <- if (d == 1) "(X-Y)" else sprintf("(Elem(X,%d)-Elem(Y,%d))", 0:(d - 1), 0:(d - 1))
    terms <- vapply(seq_len(q), function(j) {
      row <- (j - 1) * d
      s <- if (d == 1) elem(start$scales + row) else
        sprintf("Extract(TH,%d,%d)", start$scales + row, d)
      waves <- sprintf("Cos(%s*%s*%s)", format(2 * pi, digits = 17), diff,
                       elem(start$means + row + 0:(d - 1)))
      sprintf("%s*Exp(-(%s*WeightedSqDist(Square(%s),X,Y)))*%s", elem(start$weights + j - 1),
              format(2 * pi^2, digits = 17), s, paste(waves, collapse = "*"))
    }, "")
    paste(terms, collapse = "+")
  }
  kernel <- gp_kernel_resolve(kernel, x)
  text <- walk(kernel)
  list(text = text, theta = state$theta, names = state$names, kernel = kernel,
       aliases = c(sprintf("X = Vi(0,%d)", d), sprintf("Y = Vj(1,%d)", d),
                   sprintf("TH = Pm(2,%d)", length(state$theta))))
}

# The kernel with every lengthscale left NULL set from x's columns: their deviations (one per
# dimension, or the first column's for one lengthscale), as a scikit-learn user would start; one
# given lengthscale of an ARD kernel starts every dimension.
gp_kernel_resolve <- function(kernel, x) {
  if (length(kernel$children)) kernel$children <- lapply(kernel$children, gp_kernel_resolve, x)
  if (kernel$kind == "spectral_mixture") {
    q <- kernel$settings$q
    p <- kernel$params
    if (is.null(p$weights)) p$weights <- rep(1 / q, q)
    if (is.null(p$means)) p$means <- matrix(seq_len(q) / q, q, ncol(x))
    if (is.null(p$scales)) p$scales <- matrix(1, q, ncol(x))
    kernel$params <- p
  }
  ell <- kernel$params$lengthscale
  if (kernel$kind %in% c("rbf", "matern", "rq")) {
    if (is.null(ell)) {
      sds <- pmax(apply(x, 2, stats::sd), 1e-3)
      ell <- if (kernel$ard) sds else sds[1]
    } else if (kernel$ard && length(ell) == 1) {
      ell <- rep(ell, ncol(x))  # every dimension starts there, as GPyTorch's ard_num_dims
    }
    kernel$params$lengthscale <- ell
  }
  kernel
}

# The kernel with the given parameter values in place of its starting ones (fit's result), in
# the order gp_kernel_build() reads them.
gp_kernel_with <- function(kernel, theta) {
  pos <- 0L
  take <- function(len) {
    v <- theta[pos + seq_len(len)]
    pos <<- pos + len
    v
  }
  walk <- function(k) {
    for (p in gp_param_order[[k$kind]]) {
      old <- k$params[[p]]
      v <- take(length(old))
      k$params[[p]] <- if (is.matrix(old)) matrix(v, nrow(old), byrow = TRUE) else v
    }
    if (length(k$children)) k$children <- lapply(k$children, walk)
    k
  }
  walk(kernel)
}
