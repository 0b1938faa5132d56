# Exact Gaussian-process regression (kriging) on the core's GP linear algebra: tessel_gp() fits
# the kernel's hyperparameters, the noise and a constant mean by maximising the log marginal
# likelihood with optim()'s L-BFGS-B, and predict() gives the posterior mean and standard
# deviation. "exact" mode: a dense Cholesky in the core (small n); "bbmm": preconditioned CG and
# stochastic Lanczos quadrature in O(n) memory (as tessel.gp in Python and GPyTorch).

gp_kernels <- c("matern52", "matern32", "matern12", "rbf")

gp_matrix <- function(x, what, who, d = NULL) {
  if (is.data.frame(x)) x <- as.matrix(x)
  if (is.null(dim(x))) x <- matrix(as.numeric(x), ncol = 1)
  if (!is.numeric(x)) lazy_fail(who, what, " must be a numeric matrix or vector")
  storage.mode(x) <- "double"
  if (!all(is.finite(x))) lazy_fail(who, what, " holds NA, NaN or Inf")
  if (!is.null(d) && ncol(x) != d) {
    lazy_fail(who, what, " must have ", d, " column(s) like the training inputs; got ",
            ncol(x))
  }
  x
}

gp_positive <- function(v, what, who, len) {
  if (!is.numeric(v) || !length(v) %in% c(1, len) || !all(is.finite(v)) || any(v <= 0)) {
    lazy_fail(who, what, " must be ", if (len > 1) paste0("1 or ", len, " ") else "",
            "finite positive number(s); got ", paste(format(v), collapse = ", "))
  }
  rep_len(as.numeric(v), len)
}

#' Fits exact GP regression y = m + f(x) + e, f ~ GP(0, outputscale * k(x / lengthscale)),
#' e ~ N(0, noise): kernel "matern52", "matern32", "matern12" or "rbf", ARD lengthscales
#' (ard = TRUE), a learned constant mean (mean = "constant") or none ("zero"). kernel may also be
#' a kernel value (gp_rbf(), gp_matern(), gp_rq(), gp_periodic(), gp_scale(), + and *), whose
#' parameters start where it says and are all learned; lengthscale, outputscale and ard are
#' then not taken. normalize = TRUE
#' fits to (y - mean(y)) / sd(y) and predicts on y's scale (scikit-learn's normalize_y).
#' fit = FALSE keeps the given hyperparameters. mode "auto" is "exact" up to exact_max points.
tessel_gp <- function(x, y, kernel = "matern52", lengthscale = NULL, outputscale = 1,
                      noise = 0.1, mean = c("constant", "zero"), ard = TRUE, normalize = TRUE,
                      fit = TRUE, mode = c("auto", "exact", "bbmm"), exact_max = 4000,
                      noise_min = 1e-4, probes = 10, rank = 15, seed = 0, maxit = 100) {
  who <- "tessel_gp"
  x <- gp_matrix(x, "x", who)
  n <- nrow(x)
  d <- ncol(x)
  if (!is.numeric(y) || length(y) != n) {
    lazy_fail(who, "y must be a numeric vector of ", n, " values (one per row of x); got ",
            length(y))
  }
  if (!all(is.finite(y))) lazy_fail(who, "y holds NA, NaN or Inf")
  if (n < 2) lazy_fail(who, "need at least 2 points; got ", n)
  label <- gp_kernel_arg(kernel, lengthscale, outputscale, ard, who)
  named <- is.character(kernel)
  if (named) {
    nls <- if (ard) d else 1
    if (!is.null(lengthscale)) lengthscale <- gp_positive(lengthscale, "lengthscale", who, nls)
    outputscale <- gp_positive(outputscale, "outputscale", who, 1)
    base <- switch(kernel, rbf = gp_rbf(lengthscale, ard),
                   gp_matern(as.numeric(substr(kernel, 7, 7)) / 2, lengthscale, ard))
    kernel <- gp_scale(base, outputscale)
  }
  mean <- match.arg(mean)
  mode <- match.arg(mode)
  if (mode == "auto") mode <- if (n <= exact_max) "exact" else "bbmm"
  noise <- gp_positive(noise, "noise", who, 1)
  if (fit && noise <= noise_min) {
    lazy_fail(who, "noise must start above noise_min = ", noise_min, "; got ", noise)
  }
  y <- as.numeric(y)
  shift <- 0
  scale <- 1
  if (normalize) {
    shift <- base::mean(y)
    scale <- stats::sd(y)
    if (!(scale > 0)) scale <- 1
  }
  yn <- (y - shift) / scale
  k <- gp_kernel_build(kernel, x, who)
  obj <- structure(list(kernel = label, text = k$text, aliases = k$aliases, x = x,
                        y = y, yn = yn, shift = shift, scale = scale, mean_type = mean,
                        mode = mode, probes = probes, rank = rank, seed = seed,
                        noise_min = noise_min, params0 = k$theta),
                   class = "tessel_gp")
  theta <- k$theta
  m0 <- 0
  if (fit) {
    par <- c(log(theta), log(noise - noise_min), if (mean == "constant") 0)
    last <- new.env()
    eval_at <- function(p) {
      if (!identical(last$par, p)) {
        last$par <- p
        last$res <- gp_objective(obj, p)
      }
      last$res
    }
    opt <- stats::optim(par, function(p) eval_at(p)$loss, function(p) eval_at(p)$grad,
                        method = "L-BFGS-B", control = list(maxit = maxit))
    np <- length(theta)
    theta <- exp(opt$par[seq_len(np)])
    noise <- noise_min + exp(opt$par[np + 1])
    if (mean == "constant") m0 <- opt$par[np + 2]
    obj$optim <- opt[c("convergence", "message", "counts")]
    if (opt$convergence != 0) {
      warning(who, ": optim did not converge (", opt$convergence, ": ", opt$message, ")",
              call. = FALSE)
    }
  }
  obj$theta <- theta
  obj$params <- stats::setNames(theta, k$names)
  obj$kernel_fitted <- gp_kernel_with(k$kernel, theta)
  if (named) {  # scale(leaf): theta is (outputscale, lengthscales)
    obj$outputscale <- theta[1]
    obj$lengthscale <- theta[-1]
  }
  obj$noise <- noise
  obj$constant <- m0
  r <- gp_call(obj, theta, noise, yn - m0)
  obj$loglik <- r$value - n * log(scale)  # on y's own scale
  obj$alpha <- r$alpha
  obj
}

# The kernel argument checked: a name of gp_kernels, or a kernel value with the arguments only a
# name takes left at their defaults. Returns the kernel's label for print().
gp_kernel_arg <- function(kernel, lengthscale, outputscale, ard, who) {
  if (inherits(kernel, "tessel_gp_kernel")) {
    default_scale <- is.numeric(outputscale) && length(outputscale) == 1 && isTRUE(outputscale == 1)
    if (!is.null(lengthscale) || !default_scale || !isTRUE(ard)) {
      lazy_fail(who, "lengthscale, outputscale and ard go with a kernel's name; a kernel value ",
                "holds its own (e.g. gp_scale(gp_rbf(lengthscale = 2), outputscale = 3))")
    }
    return(gp_kernel_label(kernel))
  }
  if (!is.character(kernel) || length(kernel) != 1 || !kernel %in% gp_kernels) {
    lazy_fail(who, "kernel must be one of ", paste(gp_kernels, collapse = ", "),
              " or a kernel value (gp_rbf(), gp_matern(), ... combined with + and *); got ",
              paste(format(kernel), collapse = ", "))
  }
  kernel
}

gp_call <- function(obj, theta, noise, resid) {
  core_call(sys.call(), tessel_r_gp_mll, obj$text, obj$aliases, obj$x, theta, resid, noise,
            obj$mode == "exact", as.integer(obj$probes), as.integer(obj$rank),
            as.numeric(obj$seed))
}

# -log p(y) / n and its gradient in the log parameters (and the constant mean).
gp_objective <- function(obj, p) {
  np <- length(obj$params0)
  theta <- exp(p[seq_len(np)])
  noise <- obj$noise_min + exp(p[np + 1])
  m0 <- if (obj$mean_type == "constant") p[np + 2] else 0
  r <- gp_call(obj, theta, noise, obj$yn - m0)
  n <- nrow(obj$x)
  g <- c(r$grad_theta * theta, r$grad_noise * (noise - obj$noise_min),
         if (obj$mean_type == "constant") sum(r$alpha))
  list(loss = -r$value / n, grad = -g / n)
}

#' The posterior at newdata: a data frame of mean, sd, lower95 and upper95 on y's scale;
#' include_noise = TRUE adds the noise variance (a new observation's spread, not f's).
predict.tessel_gp <- function(object, newdata, include_noise = FALSE, tol = 1e-10, ...) {
  who <- "predict.tessel_gp"
  xn <- gp_matrix(newdata, "newdata", who, ncol(object$x))
  n <- nrow(object$x)
  res <- core_call(sys.call(), tessel_r_gp_predict, object$text, object$aliases, object$x,
                   object$theta, object$noise, object$alpha, xn, as.integer(min(n, 200)),
                   as.numeric(tol), 32L)
  var <- res$var + if (include_noise) object$noise else 0
  mean <- object$shift + object$scale * (object$constant + res$mean)
  sd <- object$scale * sqrt(var)
  data.frame(mean = mean, sd = sd, lower95 = mean - stats::qnorm(0.975) * sd,
             upper95 = mean + stats::qnorm(0.975) * sd)
}

print.tessel_gp <- function(x, ...) {
  cat("tessel_gp:", x$kernel, "kernel,", nrow(x$x), "points in", ncol(x$x), "dimension(s),",
      x$mode, "mode\n")
  if (!is.null(x$outputscale)) {
    cat("  outputscale", format(x$outputscale, digits = 4), " lengthscale",
        format(x$lengthscale, digits = 4), " noise", format(x$noise, digits = 4), "\n")
  } else {
    cat(paste0("  ", names(x$params), " ", vapply(x$params, format, "", digits = 4), "\n"),
        "  noise ", format(x$noise, digits = 4), "\n", sep = "")
  }
  cat("  constant mean", format(x$shift + x$scale * x$constant, digits = 6),
      " log marginal likelihood", format(x$loglik, digits = 8), "\n")
  invisible(x)
}

logLik.tessel_gp <- function(object, ...) {
  structure(object$loglik, df = length(object$theta) + 1 + (object$mean_type == "constant"),
            nobs = nrow(object$x), class = "logLik")
}
