# tessel_gp() / predict() on R's own datasets::co2 against tessel.gp's Python API (the same
# hyperparameters give the same log likelihood and posterior; each fit reaches the optimum the
# other does), the exact and BBMM modes against each other, and bad input.

co2_x <- as.numeric(time(datasets::co2))
co2_y <- as.numeric(datasets::co2)
co2_new <- c(1958.5, 1960.04, 1975.5, 1997.99, 2000)

python_reference <- function(hyper) {
  py <- Sys.getenv("TESSEL_PYTHON")
  dir <- tempfile("gp")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE))
  yn <- (co2_y - mean(co2_y)) / sd(co2_y)
  write.table(cbind(co2_x, yn), file.path(dir, "data.csv"), sep = ",", row.names = FALSE,
              col.names = FALSE)
  write.table(matrix(co2_new), file.path(dir, "xnew.csv"), sep = ",", row.names = FALSE,
              col.names = FALSE)
  write.table(matrix(hyper, nrow = 1), file.path(dir, "hyper.csv"), sep = ",",
              row.names = FALSE, col.names = FALSE)
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

test_that("bad input to tessel_gp and predict gets clear errors", {
  expect_error(tessel_gp(co2_x, c(co2_y[-1], NA)), "tessel_gp: y holds NA")
  expect_error(tessel_gp(co2_x, co2_y[-1]), "y must be a numeric vector of 468 values")
  expect_error(tessel_gp(co2_x, co2_y, kernel = "cubic"), "kernel must be one of")
  expect_error(tessel_gp(co2_x, co2_y, lengthscale = 0), "lengthscale must be")
  fixed <- tessel_gp(co2_x, co2_y, fit = FALSE)
  expect_error(predict(fixed, cbind(co2_new, co2_new)), "newdata must have 1 column")
  expect_error(predict(fixed, c(1, NA)), "newdata holds NA")
})
