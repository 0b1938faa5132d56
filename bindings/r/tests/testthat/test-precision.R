# Single precision (float32 arithmetic, results back as doubles) against double precision.

x <- points(40, 3, 21)
y <- points(50, 3, 22)
b <- points(50, 2, 23)

test_that("precision = \"float\" agrees with double within a float32 bound", {
  k64 <- tessel_reduction(gauss_text, gauss_args)
  k32 <- tessel_reduction(gauss_text, gauss_args, precision = "float")
  expect_equal(tessel_info(k32)$precision, "float")
  r64 <- k64(x, y, b, 0.5)
  r32 <- k32(x, y, b, 0.5)
  expect_true(is.double(r32))
  expect_lt(max(abs(r32 - r64) / (abs(r64) + 1)), 1e-5)
  expect_gt(max(abs(r32 - r64)), 0)  # it did run in float32
  eta <- points(40, 2, 24)
  g64 <- tessel_grad(k64, "X")(x, y, b, 0.5, eta)
  g32 <- tessel_grad(k32, "X")(x, y, b, 0.5, eta)
  expect_lt(max(abs(g32 - g64) / (abs(g64) + 1)), 1e-4)
})

test_that("float indices are exact and the interpreter runs float too", {
  k <- tessel_reduction("ArgKMin_Reduction(SqDist(X,Y), 2, 0)", c("X = Vi(3)", "Y = Vj(3)"),
                        precision = "float", backend = "interpreter")
  d <- sqdist_matrix(x, y)
  expect_equal(k(x, y), t(apply(d, 1, function(r) order(r)[1:2] - 1)))
})
