# rkeops 2's own formula forms read as rkeops reads them: its axis (0 reduces over i), weights
# before the axis, Grad around a Sum reduction, and reductions with no Vi or no Vj argument.

x <- points(9, 3, 81)
y <- points(13, 3, 82)
w <- points(13, 3, 83)
d <- sqdist_matrix(x, y)
xy <- c("x = Vi(3)", "y = Vj(3)")

test_that("keops_kernel's last number is rkeops's axis: 0 reduces over i, 1 over j", {
  over_i <- keops_kernel("Sum_Reduction((x|y), 0)", xy)
  expect_equal(over_i(list(x, y)), matrix(colSums(x %*% t(y))), tolerance = 1e-12)
  over_j <- keops_kernel("Sum_Reduction(SqNorm2(x-y), 1)", c("x=Vi(0,3)", "y=Vj(1,3)"))
  expect_equal(over_j(list(x, y)), matrix(rowSums(d)), tolerance = 1e-12)
  k3 <- keops_kernel("ArgKMin_Reduction(SqDist(x,y), 2, 0)", xy)
  expect_equal(k3(list(x, y)), t(apply(d, 2, function(r) order(r)[1:2] - 1)))
  # tessel_reduction keeps KeOps's tag: 0 reduces over j.
  expect_equal(tessel_reduction("Sum_Reduction(SqNorm2(x-y), 0)", xy)(x, y),
               matrix(rowSums(d)), tolerance = 1e-12)
  expect_error(keops_kernel("Sum_Reduction(SqNorm2(x-y), 2)", xy),
               "keops_kernel: the last argument of .* must be rkeops's axis: 0 .*; got '2'",
               class = "tessel_error")
})

test_that("SumSoftMaxWeight_Reduction(F, w, axis) takes rkeops's order", {
  k <- keops_kernel("SumSoftMaxWeight_Reduction(SqNorm2(x-y), w, 1)",
                    c(xy, "w = Vj(3)"))
  e <- exp(d - apply(d, 1, max))
  expect_equal(k(list(x, y, w)), (e %*% w) / rowSums(e), tolerance = 1e-12)
  wi <- points(9, 3, 84)
  k0 <- keops_kernel("SumSoftMaxWeight_Reduction(-SqNorm2(x-y), w, 0)", c(xy, "w = Vi(3)"))
  e0 <- exp(-t(d))
  expect_equal(k0(list(x, y, wi)), (e0 %*% wi) / rowSums(e0), tolerance = 1e-12)
  lse <- keops_kernel("LogSumExp_Reduction(-SqNorm2(x-y), v, 1)", c(xy, "v = Vj(1)"))
  v <- points(13, 1, 87)
  expect_equal(lse(list(x, y, v)), log(exp(-d) %*% v), tolerance = 1e-12)
})

test_that("a reduction with no Vj (or no Vi) argument has one row on that axis", {
  p <- c(1, 2, 3)
  k <- keops_kernel("Sum_Reduction(x+y, 0)", c("x=Vi(3)", "y=Pm(3)"))
  expect_equal(k(list(x, p)), matrix(colSums(x) + 9 * p, 1), tolerance = 1e-12)
  k1 <- keops_kernel("Sum_Reduction(x+y, 1)", c("x=Vi(3)", "y=Pm(3)"))
  expect_equal(k1(list(x, p)), x + matrix(p, 9, 3, byrow = TRUE), tolerance = 1e-12)
  kj <- tessel_reduction("Max_Reduction(Y, 0)", "Y = Vj(3)")
  expect_equal(kj(y), matrix(apply(y, 2, max), 1), tolerance = 1e-12)
  expect_equal(sum(Vi(x), "i"), matrix(colSums(x), 1), tolerance = 1e-12)
  expect_equal(sum(Vi(x), "j"), x, tolerance = 1e-12)
})

test_that("Grad(Sum_Reduction(F, axis), x, eta) is rkeops's Sum_Reduction(Grad(F, x, eta))", {
  eta <- points(9, 1, 85)
  args <- c("x=Vi(0,3)", "y=Vj(1,3)", "eta=Vi(2,1)")
  # Over j, x and eta indexed like the result: the gradient of <eta, sum_j |x_i - y_j|^2>.
  g1 <- keops_kernel("Grad(Sum_Reduction(SqNorm2(x-y), 1), x, eta)", args)
  loss <- function(p) sum(eta * rowSums(sqdist_matrix(p, y)))
  expect_equal(g1(list(x, y, eta)), numeric_grad(loss, x), tolerance = 1e-7)
  # Over i (rkeops's documented example): sum_i 2 (x_i - y_j) eta_i, one row per y_j.
  g0 <- keops_kernel("Grad(Sum_Reduction(SqNorm2(x-y), 0), x, eta)", args)
  ref <- t(sapply(seq_len(13), function(j) {
    colSums(2 * (x - matrix(y[j, ], 9, 3, byrow = TRUE)) * as.vector(eta))
  }))
  expect_equal(g0(list(x, y, eta)), ref, tolerance = 1e-12)
  # keops_grad writes the same Grad text, with eta indexed like the variable.
  op <- keops_kernel("Sum_Reduction(SqNorm2(x-y), 0)", c("x=Vi(0,3)", "y=Vj(1,3)"))
  expect_equal(keops_grad(op, "x")(list(x, y, eta)), ref, tolerance = 1e-12)
  expect_equal(keops_grad(op, 0)(list(x, y, eta)), ref, tolerance = 1e-12)
  expect_equal(keops_grad(keops_kernel("Sum_Reduction(SqNorm2(x-y), 1)", args[1:2]), 0)(
    list(x, y, eta)), numeric_grad(loss, x), tolerance = 1e-7)
})

test_that("Grad of a reduction other than Sum is refused with the way to its gradient", {
  args <- c("x=Vi(0,3)", "y=Vj(1,3)", "eta=Vi(2,1)")
  expect_error(keops_kernel("Grad(Min_Reduction(SqNorm2(x-y), 1), x, eta)", args),
               "keops_kernel: Grad of a Min reduction is not taken.*tessel_grad",
               class = "tessel_error")
  expect_error(keops_kernel("Grad(SqNorm2(x-y), x, eta)", args),
               "keops_kernel: Grad must wrap a reduction", class = "tessel_error")
  # The gradient of the Min reduction itself, with the cotangent indexed like the result.
  mn <- keops_kernel("Min_Reduction(SqNorm2(x-y), 1)", args[1:2])
  eta <- points(9, 1, 86)
  loss <- function(p) sum(eta * apply(sqdist_matrix(p, y), 1, min))
  expect_equal(tessel_grad(mn, "x")(list(x, y, eta)), numeric_grad(loss, x), tolerance = 1e-7)
})
