# Bad inputs give R errors (class tessel_error) with clear messages; the session goes on.

x <- points(6, 3, 61)
y <- points(7, 3, 62)
b <- points(7, 2, 63)
k <- tessel_reduction(gauss_text, gauss_args, backend = "interpreter")

test_that("wrong dims, rows, counts and types name the argument and what was expected", {
  expect_error(k(x[, 1:2], y, b, 1),
               paste0("tessel_reduction: argument 'X' (Vi(3)) must have 3 columns ",
                      "(one row per point); got a 6 x 2 matrix"),
               fixed = TRUE, class = "tessel_error")
  expect_error(k(x, y, b[1:5, ], 1), "argument 'B' \\(Vj\\(2\\)\\) has 5 points but 'Y' has 7",
               class = "tessel_error")
  expect_error(k(x, y, b), "expected 4 arguments \\(X, Y, B, G\\), got 3",
               class = "tessel_error")
  expect_error(k(x, y, b, c(1, 2)), "argument 'G' \\(Pm\\(1\\)\\) is a parameter and must have 1",
               class = "tessel_error")
  expect_error(k(x, y, as.character(b), 1), "argument 'B' \\(Vj\\(2\\)\\) must be numeric",
               class = "tessel_error")
  expect_error(k(as.vector(x), y, b, 1), "must be a matrix with 3 columns.*vector of length 18",
               class = "tessel_error")
  expect_error(k(X = x, Y = y, B = b, H = 1), "unknown argument name\\(s\\) 'H'",
               class = "tessel_error")
  expect_error(k(x, t(y), b, 1, inner_dim = "row"), "must have 3 rows \\(inner_dim = \"row\"",
               class = "tessel_error")
})

test_that("a kernel restored from a saved workspace asks to be made again", {
  restored <- unserialize(serialize(k, NULL))
  expect_error(restored(x, y, b, 1), "made in another R process", class = "tessel_error")
})

test_that("NA is refused, NaN and Inf are passed on", {
  xn <- x
  xn[4, 2] <- NA
  expect_error(k(xn, y, b, 1), "argument 'X' \\(Vi\\(3\\)\\) contains NA \\(first at point 4\\)",
               class = "tessel_error")
  xn[4, 2] <- NaN
  r <- k(xn, y, b, 1)
  expect_true(all(is.nan(r[4, ])) && !anyNA(r[-4, ]))
})

test_that("formula, alias, option and gradient errors carry the core's message", {
  expect_error(tessel_reduction("Sum_Reduction(Foo(X), 0)", "X = Vi(3)"),
               "tessel::parse: unknown function 'Foo'", class = "tessel_error")
  expect_error(tessel_reduction("Sum_Reduction(SqDist(X,Z), 0)", c("X = Vi(3)", "Y = Vj(3)")),
               "tessel::", class = "tessel_error")
  expect_error(tessel_reduction("Sum_Reduction(X, 0)", "X = Vq(3)"), "tessel::",
               class = "tessel_error")
  expect_error(tessel_reduction(gauss_text, gauss_args, backend = "gpu9"), "backend",
               class = "tessel_error")
  expect_error(tessel_reduction(gauss_text, gauss_args, precision = "half"),
               "precision must be \"double\" or \"float\"", class = "tessel_error")
  expect_error(tessel_grad(k, "Q"), "var must be an argument name \\(X, Y, B, G\\)",
               class = "tessel_error")
  expect_error(tessel_grad(k, 7), "0-based position below 4", class = "tessel_error")
  expect_error(tessel_grad(function(x) x, 0), "must be a kernel made by", class = "tessel_error")
  ak <- tessel_reduction("ArgMin_Reduction(SqDist(X,Y), 0)", c("X = Vi(3)", "Y = Vj(3)"))
  expect_error(tessel_grad(ak, "X"), "tessel::grad: ArgMin returns indices",
               class = "tessel_error")
})

test_that("LazyTensor misuse is an error too, and the session survives all of the above", {
  expect_error(Vi(x) + Vj(b), "dims 3 and 2", class = "tessel_error")
  expect_error(sum(Vi(x) * Vj(y), index = "k"), "sum: argument 'index' must be \"i\"",
               class = "tessel_error")
  expect_error(Vi(matrix(c(1, NA), 2)), "contains NA", class = "tessel_error")
  expect_error(prod(Vi(x)), "not defined for LazyTensors", class = "tessel_error")
  expect_error(KernelSolve("X", "X = Vi(3)", "X", axis = c(0, 1)),
               "KernelSolve: argument 'axis' must be 0 .*; got c\\(0, 1\\)",
               class = "tessel_error")
  expect_equal(k(x, y, b, 1), gauss_matrix(x, y, 1) %*% b, tolerance = 1e-12)
})

test_that("a LazyTensor reduction's errors name the reduction and its variables", {
  expect_error(sum(Vi(x) * Vi(points(5, 3, 64)), index = "j"),
               paste0("Sum reduction \\(index = \"j\"; variables a0, a1, .*",
                      "'a1' \\(Vi\\(3\\)\\) has 5 points"),
               class = "tessel_error")
  expect_error(k(as.data.frame(x), y, b, 1), "is a data frame; pass as.matrix\\(\\) of it",
               class = "tessel_error")
})
