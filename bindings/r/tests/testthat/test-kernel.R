# Values and gradients (first and second order) of text kernels against dense references.

x <- points(12, 3, 1)
y <- points(17, 3, 2)
b <- points(17, 2, 3)
g <- 0.7

test_that("a Gaussian kernel product equals the dense product", {
  k <- tessel_reduction(gauss_text, gauss_args)
  ref <- gauss_matrix(x, y, g) %*% b
  expect_equal(k(x, y, b, g), ref, tolerance = 1e-12)
  expect_equal(k(list(x, y, b, g)), ref, tolerance = 1e-12)
  expect_equal(k(G = g, B = b, X = x, Y = y), ref, tolerance = 1e-12)
  # inner_dim = "row": one column per point, as rkeops.
  expect_equal(k(t(x), t(y), t(b), g, inner_dim = "row"), ref, tolerance = 1e-12)
  expect_equal(tessel_info(k)$args$name, c("X", "Y", "B", "G"))
})

test_that("rkeops's keops_kernel and keops_grad take a list and 0-based positions", {
  # rkeops's axis 1 reduces over j: KeOps's tag 0.
  op <- keops_kernel(sub(", 0)$", ", 1)", gauss_text), gauss_args)
  expect_equal(op(list(x, y, b, g)), gauss_matrix(x, y, g) %*% b, tolerance = 1e-12)
  expect_equal(op()$formula, gauss_text)
  eta <- points(12, 2, 4)
  gop <- keops_grad(op, 0)
  expect_equal(gop(list(x, y, b, g, eta)), gauss_grad_x(x, y, b, g, eta), tolerance = 1e-10)
})

test_that("gradients of every argument match the dense ones, and a second order too", {
  k <- tessel_reduction(gauss_text, gauss_args)
  eta <- points(12, 2, 5)
  loss <- function(x, y, b, g) sum(eta * (gauss_matrix(x, y, g) %*% b))
  gx <- tessel_grad(k, "X")
  expect_equal(gx(x, y, b, g, eta), gauss_grad_x(x, y, b, g, eta), tolerance = 1e-10)
  expect_equal(tessel_grad(k, 1)(x, y, b, g, eta),
               numeric_grad(function(p) loss(x, p, b, g), y), tolerance = 1e-7)
  expect_equal(tessel_grad(k, "B")(x, y, b, g, eta), t(gauss_matrix(x, y, g)) %*% eta,
               tolerance = 1e-10)
  dg <- tessel_grad(k, "G")(x, y, b, g, eta)
  expect_true(is.vector(dg) && length(dg) == 1)
  expect_equal(dg, numeric_grad(function(p) loss(x, y, b, p), g), tolerance = 1e-7)
  # Second order: the gradient in Y of <eta2, grad_X>, against differences of the dense one.
  eta2 <- points(12, 3, 6)
  gxy <- tessel_grad(gx, "Y")
  expect_equal(tessel_info(gxy)$args$name, c("X", "Y", "B", "G", "eta", "eta2"))
  expect_equal(gxy(x, y, b, g, eta, eta2),
               numeric_grad(function(p) sum(eta2 * gauss_grad_x(x, p, b, g, eta)), y),
               tolerance = 1e-7)
})

test_that("vectors stand for one-column arguments and integers for doubles", {
  k <- tessel_reduction("Sum_Reduction(Exp(-SqDist(X,Y))*B, 1)",
                        c("X = Vi(1)", "Y = Vj(1)", "B = Vi(1)"), backend = "interpreter")
  xs <- c(1L, 2L, 3L)
  ys <- c(0.5, 1.5)
  bs <- c(1, 2, 3)
  ref <- t(exp(-outer(xs, ys, "-")^2)) %*% bs
  expect_equal(k(xs, ys, bs), ref, tolerance = 1e-12)
  expect_equal(k(matrix(xs), matrix(ys), matrix(bs)), ref, tolerance = 1e-12)
})

test_that("an argument the formula does not read is still checked, and the gradient skips it", {
  k <- tessel_reduction("Sum_Reduction(SqDist(X,Y), 0)",
                        c("X = Vi(2)", "Y = Vj(2)", "U = Vi(4)"), backend = "interpreter")
  xx <- points(5, 2, 7)
  yy <- points(4, 2, 8)
  u <- points(5, 4, 9)
  expect_equal(k(xx, yy, u), matrix(rowSums(sqdist_matrix(xx, yy))), tolerance = 1e-12)
  expect_error(k(xx, yy, u[, 1:3]), "argument 'U' \\(Vi\\(4\\)\\) must have 4 columns")
  gk <- tessel_grad(k, "X")
  eta <- points(5, 1, 10)
  expect_equal(gk(xx, yy, u, eta), 2 * as.vector(eta) * (4 * xx - matrix(colSums(yy), 5, 2,
                                                                         byrow = TRUE)),
               tolerance = 1e-12)
})
