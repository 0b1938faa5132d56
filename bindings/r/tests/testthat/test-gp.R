# tessel_gp() / predict() on R's own datasets::co2 against tessel.gp's Python API (the same
# hyperparameters give the same log likelihood and posterior; each fit reaches the optimum the
# other does), the exact and BBMM modes against each other, and bad input.

co2_x <- as.numeric(time(datasets::co2))
co2_y <- as.numeric(datasets::co2)
co2_new <- c(1958.5, 1960.04, 1975.5, 1997.99, 2000)

python_reference <- function(hyper, kernel = NULL, x = co2_x, xnew = co2_new) {
  py <- Sys.getenv("TESSEL_PYTHON")
  dir <- tempfile("gp")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE))
  yn <- (co2_y - mean(co2_y)) / sd(co2_y)
  write.table(cbind(x, yn), file.path(dir, "data.csv"), sep = ",", row.names = FALSE,
              col.names = FALSE)
  write.table(matrix(xnew), file.path(dir, "xnew.csv"), sep = ",", row.names = FALSE,
              col.names = FALSE)
  write.table(matrix(hyper, nrow = 1), file.path(dir, "hyper.csv"), sep = ",",
              row.names = FALSE, col.names = FALSE)
  if (!is.null(kernel)) writeLines(kernel, file.path(dir, "kernel.py"))
  script <- normalizePath(test_path("gp_reference.py"))
  status <- system2(py, c(script, dir), env = paste0("PYTHONPATH=", Sys.getenv("TESSEL_PYTHONPATH")))
  expect_equal(status, 0)
  unname(as.matrix(read.csv(file.path(dir, "python.csv"), header = FALSE)))
}

# Python's numbers are on the standardised targets: back to co2's scale.
on_y_scale <- function(row) {
  m <- length(co2_new)
  s <- sd(co2_y)
  list(loglik = row[1] - length(co2_y) * log(s), outputscale = row[2], noise = row[3],
       constant = row[4], lengthscale = row[5],
       mean = mean(co2_y) + s * row[5 + seq_len(m)], sd = s * row[5 + m + seq_len(m)])
}

test_that("tessel_gp on co2 equals tessel.gp's ExactGP in Python", {
  skip_if(Sys.getenv("TESSEL_PYTHON") == "", "TESSEL_PYTHON is not set (scripts/test_r.sh sets it)")
  # outputscale, noise, constant mean (fit = FALSE keeps 0), lengthscale in years
  hyper <- c(1.3, 0.05, 0, 4.0)
  ref <- python_reference(hyper)
  fixed <- tessel_gp(co2_x, co2_y, lengthscale = hyper[4], outputscale = hyper[1],
                     noise = hyper[2], fit = FALSE)
  expect_s3_class(fixed, "tessel_gp")
  want <- on_y_scale(ref[1, ])
  expect_equal(fixed$loglik, want$loglik, tolerance = 1e-9)
  p <- predict(fixed, co2_new)
  expect_equal(p$mean, want$mean, tolerance = 1e-8)
  expect_equal(p$sd, want$sd, tolerance = 1e-6)
  # Each fits from the same start: R's optim against Python's L-BFGS, to the same optimum.
  fitted <- tessel_gp(co2_x, co2_y, lengthscale = hyper[4], outputscale = hyper[1],
                      noise = hyper[2])
  got <- on_y_scale(ref[2, ])
  expect_gt(fitted$loglik, got$loglik - 1e-4 * abs(got$loglik))
  expect_equal(fitted$lengthscale, got$lengthscale, tolerance = 2e-2)
  expect_equal(fitted$noise, got$noise, tolerance = 2e-2)
  expect_equal(predict(fitted, co2_new)$mean, got$mean, tolerance = 1e-4)
})

test_that("the BBMM mode estimates the exact log likelihood; predictions interpolate", {
  exact <- tessel_gp(co2_x, co2_y, lengthscale = 0.2, noise = 0.01, fit = FALSE)
  bbmm <- tessel_gp(co2_x, co2_y, lengthscale = 0.2, noise = 0.01, fit = FALSE, mode = "bbmm",
                    probes = 30, rank = 40)
  expect_equal(bbmm$loglik, exact$loglik, tolerance = 2e-2)
  p <- predict(exact, co2_x[1:20])
  expect_lt(max(abs(p$mean - co2_y[1:20])), 1)
  expect_true(all(p$sd > 0 & p$lower95 < p$mean & p$upper95 > p$mean))
  expect_output(print(exact), "matern52 kernel, 468 points")
  expect_equal(as.numeric(logLik(exact)), exact$loglik)
})

# A kernel value as the Python expression of tessel.gp's kernels with the same parameters.
as_python <- function(k) {
  num <- function(v) if (length(v) == 1) sprintf("%.17g", v) else
    sprintf("[%s]", paste(sprintf("%.17g", v), collapse = ", "))
  p <- k$params
  switch(k$kind,
         sum = paste0("(", as_python(k$children[[1]]), " + ", as_python(k$children[[2]]), ")"),
         product = paste0("(", as_python(k$children[[1]]), " * ", as_python(k$children[[2]]), ")"),
         scale = sprintf("Scale(%s, outputscale=%s)", as_python(k$children[[1]]),
                         num(p$outputscale)),
         rbf = sprintf("RBF(lengthscale=%s)", num(p$lengthscale)),
         matern = sprintf("Matern(nu=%s, lengthscale=%s)", k$nu, num(p$lengthscale)),
         rq = sprintf("RationalQuadratic(lengthscale=%s, alpha=%s)", num(p$lengthscale),
                      num(p$alpha)),
         periodic = sprintf("Periodic(lengthscale=%s, period=%s)", num(p$lengthscale),
                            num(p$period)),
         linear = sprintf("Linear(variance=%s)", num(p$variance)),
         polynomial = sprintf("Polynomial(power=%d, offset=%s)", k$settings$power,
                              num(p$offset)),
         spectral_mixture = sprintf("SpectralMixture(%d, d=%d, weights=%s, means=%s, scales=%s)",
                            k$settings$q, ncol(p$means), rows(p$weights), rows(p$means),
                            rows(p$scales)))
}
rows <- function(m) {
  if (!is.matrix(m)) return(sprintf("[%s]", paste(sprintf("%.17g", m), collapse = ", ")))
  sprintf("[%s]", paste(apply(m, 1, rows), collapse = ", "))
}

# The Mauna Loa kernel of Rasmussen and Williams (5.4.3): a trend, a decaying seasonal cycle, the
# medium-term irregularities; in standardised units of y and years.
co2_kernel <- function() {
  gp_scale(gp_rbf(lengthscale = 40), outputscale = 2) +
    gp_scale(gp_rbf(lengthscale = 60) * gp_periodic(period = 1, lengthscale = 1.5),
             outputscale = 0.1) +
    gp_scale(gp_rq(lengthscale = 1.2, alpha = 0.8), outputscale = 0.05)
}

test_that("sums, products and periodic kernels on co2 equal tessel.gp's in Python", {
  skip_if(Sys.getenv("TESSEL_PYTHON") == "", "TESSEL_PYTHON is not set (scripts/test_r.sh sets it)")
  k <- co2_kernel()
  expect_output(print(k), "scale\\(rbf\\) \\+ scale\\(rbf \\* periodic\\) \\+ scale\\(rq\\)")
  fixed <- tessel_gp(co2_x, co2_y, kernel = k, noise = 0.002, fit = FALSE)
  ref <- python_reference(c(0.002, 0), as_python(fixed$kernel_fitted))
  m <- length(co2_new)
  expect_equal(fixed$loglik, ref[1, 1] - length(co2_y) * log(sd(co2_y)), tolerance = 1e-9)
  p <- predict(fixed, co2_new)
  expect_equal(p$mean, mean(co2_y) + sd(co2_y) * ref[1, 1 + seq_len(m)], tolerance = 1e-8)
  expect_equal(p$sd, sd(co2_y) * ref[1, 1 + m + seq_len(m)], tolerance = 1e-6)
  expect_equal(names(fixed$params),
               c("scale1.outputscale", "rbf2.lengthscale", "scale3.outputscale",
                 "rbf4.lengthscale", "periodic5.period", "periodic5.lengthscale",
                 "scale6.outputscale", "rq7.lengthscale", "rq7.alpha"))
})

# Fourth-order central differences of the loss at p0. The loss turns fast in log(period) (40
# seasons in co2: its fifth derivative ~ (2 pi 40)^5 ~ 1e12), so the error is h^4 1e12 / 30 +
# eps / h, about 1e-9 at h = 1e-5.
fd_gradient <- function(fixed, p0, h = 1e-5) {
  loss <- function(p) tessel:::gp_objective(fixed, p)$loss
  vapply(seq_along(p0), function(i) {
    e <- replace(numeric(length(p0)), i, h)
    (8 * (loss(p0 + e) - loss(p0 - e)) - (loss(p0 + 2 * e) - loss(p0 - 2 * e))) / (12 * h)
  }, 0)
}

test_that("linear, polynomial and spectral mixture kernels equal tessel.gp's in Python", {
  skip_if(Sys.getenv("TESSEL_PYTHON") == "", "TESSEL_PYTHON is not set (scripts/test_r.sh sets it)")
  # Decades from 1980: the linear and polynomial kernels are not stationary.
  xc <- (co2_x - 1980) / 10
  k <- gp_scale(gp_linear(variance = 0.5) + gp_polynomial(power = 2, offset = 3), 0.2) +
    gp_spectral_mixture(2, weights = c(0.3, 0.1), means = c(10, 0.5), scales = c(0.05, 0.3))
  expect_output(print(k),
                "scale\\(linear \\+ polynomial\\(power 2\\)\\) \\+ spectral_mixture\\(2\\)")
  fixed <- tessel_gp(xc, co2_y, kernel = k, noise = 0.01, fit = FALSE)
  ref <- python_reference(c(0.01, 0), as_python(fixed$kernel_fitted), xc, (co2_new - 1980) / 10)
  m <- length(co2_new)
  expect_equal(fixed$loglik, ref[1, 1] - length(co2_y) * log(sd(co2_y)), tolerance = 1e-9)
  p <- predict(fixed, (co2_new - 1980) / 10)
  expect_equal(p$mean, mean(co2_y) + sd(co2_y) * ref[1, 1 + seq_len(m)], tolerance = 1e-8)
  expect_equal(p$sd, sd(co2_y) * ref[1, 1 + m + seq_len(m)], tolerance = 1e-6)
  expect_equal(names(fixed$params),
               c("scale1.outputscale", "linear2.variance", "polynomial3.offset",
                 paste0("spectral_mixture4.", c("weights1", "weights2", "means1", "means2",
                                                "scales1", "scales2"))))
  # The gradient in every parameter (the mixture's too) against fourth-order differences.
  p0 <- c(log(fixed$params0), log(0.01 - fixed$noise_min), 0.1)
  expect_equal(tessel:::gp_objective(fixed, p0)$grad, fd_gradient(fixed, p0), tolerance = 1e-6)
  # Two input dimensions: one frequency and one scale per dimension and mixture, by rows (the
  # formula only: its kernels would compile for a minute).
  x2 <- cbind(xc, xc^2)
  k2 <- gp_spectral_mixture(2, means = rbind(c(1, 2), c(3, 4)), scales = rbind(c(5, 6), c(7, 8)))
  built <- tessel:::gp_kernel_build(k2, x2, "tessel_gp")
  expect_equal(built$theta, c(0.5, 0.5, 1:8))
  expect_match(built$text, "Cos(6.2831853071795862*(Elem(X,1)-Elem(Y,1))*Elem(TH,5))",
               fixed = TRUE)
  expect_match(built$text, "Square\\(Extract\\(TH,8,2\\)\\)")
  expect_equal(tessel:::gp_kernel_with(built$kernel, built$theta * 2)$params$means,
               2 * rbind(c(1, 2), c(3, 4)))
  expect_error(tessel_gp(x2, co2_y, kernel = gp_spectral_mixture(1, means = 1), fit = FALSE),
               "spectral_mixture1 has means for 1 input dimension\\(s\\); expected 2")
  expect_error(gp_polynomial(power = 1.5), "gp_polynomial: power must be an integer >= 1")
  expect_error(gp_spectral_mixture(2, weights = 1), "weights must be 2 finite positive")
  expect_error(gp_spectral_mixture(2, means = matrix(1, 3, 1)), "means must have 2 rows")
  expect_error(gp_linear(variance = -1), "gp_linear: variance must be")
})

test_that("a composite kernel's gradient equals finite differences; its fit beats one Matern", {
  fixed <- tessel_gp(co2_x, co2_y, kernel = co2_kernel(), noise = 0.002, fit = FALSE)
  p0 <- c(log(fixed$params0), log(0.002 - fixed$noise_min), 0.1)
  g <- tessel:::gp_objective(fixed, p0)$grad
  expect_equal(g, fd_gradient(fixed, p0), tolerance = 1e-6)
  fitted <- tessel_gp(co2_x, co2_y, kernel = co2_kernel(), noise = 0.002, maxit = 400)
  single <- tessel_gp(co2_x, co2_y)
  # The seasonal cycle is what one Matern misses: hundreds of log-likelihood units.
  expect_gt(fitted$loglik, single$loglik + 100)
  expect_equal(fitted$optim$convergence, 0)
  expect_equal(unname(fitted$params["periodic5.period"]), 1, tolerance = 1e-2)
  expect_s3_class(fitted$kernel_fitted, "tessel_gp_kernel")
  expect_output(print(fitted), "  periodic5.period 0.99|  periodic5.period 1")
})

test_that("bad kernels get clear errors", {
  expect_error(gp_periodic(period = 0), "gp_periodic: period must be 1 finite positive")
  expect_error(gp_matern(nu = 2), "gp_matern: nu must be 0.5, 1.5 or 2.5")
  expect_error(gp_rbf() + 1, "both sides must be GP kernels")
  expect_error(gp_rbf() - gp_rbf(), "combine with \\+ and \\* only")
  expect_error(gp_scale(3), "gp_scale: kernel must be a GP kernel")
  expect_error(tessel_gp(co2_x, co2_y, kernel = gp_rbf(), lengthscale = 2),
               "lengthscale, outputscale and ard go with a kernel's name")
  expect_error(tessel_gp(cbind(co2_x, co2_x), co2_y, kernel = gp_rbf(lengthscale = c(1, 2, 3))),
               "tessel_gp: the kernel rbf1 has 3 lengthscales for 2 input dimension")
  expect_s3_class(2 * gp_rbf(), "tessel_gp_kernel")
})

test_that("bad input to tessel_gp and predict gets clear errors", {
  expect_error(tessel_gp(co2_x, c(co2_y[-1], NA)), "tessel_gp: y holds NA")
  expect_error(tessel_gp(co2_x, co2_y[-1]), "y must be a numeric vector of 468 values")
  expect_error(tessel_gp(co2_x, co2_y, kernel = "cubic"), "kernel must be one of")
  expect_error(tessel_gp(co2_x, co2_y, lengthscale = 0), "lengthscale must be")
  fixed <- tessel_gp(co2_x, co2_y, fit = FALSE)
  expect_error(predict(fixed, cbind(co2_new, co2_new)), "newdata must have 1 column")
  expect_error(predict(fixed, c(1, NA)), "newdata holds NA")
})
