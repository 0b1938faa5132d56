# Kernel linear solves (alpha I + K) x = b against R's dense solve().

x <- points(30, 3, 41)
b <- points(30, 2, 42)
alpha <- 0.1
dense <- solve(alpha * diag(30) + gauss_matrix(x, x, 2), b)

test_that("KernelSolve (pykeops's signature) solves the ridge system", {
  ks <- KernelSolve("Exp(-G*SqDist(X,Y))*B", c("X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)"),
                    "B", axis = 1)
  a <- ks(x, x, b, 2, alpha = alpha, tol = 1e-10)
  expect_equal(as.vector(a), as.vector(dense), tolerance = 1e-7)
  expect_true(attr(a, "solve")$converged)
})

test_that("kernel_solve on a text kernel and solve() on a LazyTensor agree", {
  k <- tessel_reduction(gauss_text, gauss_args)
  a <- kernel_solve(k, list(x, x, b, 2), "B", alpha = alpha, tol = 1e-10)
  expect_equal(as.vector(a), as.vector(dense), tolerance = 1e-7)
  K <- exp(-2 * sqdist(Vi(x), Vj(x)))
  a <- solve(K, b, alpha = alpha, tol = 1e-10)
  expect_equal(as.vector(a), as.vector(dense), tolerance = 1e-7)
})
