# A Gaussian kernel product at N = M = 1e5 in D = 3: a dense matrix would need 80 GB.

test_that("N = 1e5 runs without a dense matrix and matches dense rows", {
  n <- 1e5
  x <- points(n, 3, 51)
  y <- points(n, 3, 52)
  b <- points(n, 1, 53)
  k <- tessel_reduction("Sum_Reduction(Exp(-G*SqDist(X,Y))*B, 0)",
                        c("X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"))
  a <- k(x, y, b, 10)
  expect_equal(dim(a), c(n, 1))
  rows <- c(1, 777, 50000, n)
  ref <- gauss_matrix(x[rows, , drop = FALSE], y, 10) %*% b
  expect_equal(a[rows, , drop = FALSE], ref, tolerance = 1e-10)
  # The process's peak memory stays far below one dense 1e5 x 1e5 matrix (80 GB).
  status <- readLines("/proc/self/status")
  peak_kb <- as.numeric(gsub("[^0-9]", "", grep("^VmHWM", status, value = TRUE)))
  expect_lt(peak_kb / 1024^2, 4)
})
