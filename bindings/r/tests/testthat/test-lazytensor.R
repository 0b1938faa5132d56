# LazyTensor expressions (rkeops 2 style) give what the equivalent formula text gives.

x <- points(11, 3, 31)
y <- points(14, 3, 32)
b <- points(14, 2, 33)

test_that("a Gaussian kernel written with Vi, Vj and %*% equals the text kernel", {
  k <- tessel_reduction(gauss_text, gauss_args)
  K <- exp(-0.5 * sqdist(Vi(x), Vj(y)))
  expect_s3_class(K, "LazyTensor")
  expect_equal(K %*% b, k(x, y, b, 0.5), tolerance = 1e-12)
  expect_equal(sum(K * Vj(b), index = "j"), k(x, y, b, 0.5), tolerance = 1e-12)
  # The same expression on other data reuses the kernel: same text, no new parse.
  expect_equal(K %*% (2 * b), 2 * k(x, y, b, 0.5), tolerance = 1e-12)
  # Sum over i: one row per y_j.
  bi <- points(11, 2, 34)
  expect_equal(sum(K * Vi(bi), index = "i"), t(gauss_matrix(x, y, 0.5)) %*% bi,
               tolerance = 1e-12)
})

test_that("arithmetic, math functions and helpers follow R's operators", {
  xi <- Vi(x)
  yj <- Vj(y)
  d <- sqdist_matrix(x, y)
  expect_equal(sum(sqnorm2(xi - yj), index = "j"), matrix(rowSums(d)), tolerance = 1e-12)
  expect_equal(sum(norm2(xi - yj)^2, index = "j"), matrix(rowSums(d)), tolerance = 1e-12)
  expect_equal(sum((xi | yj) / 2 + 1, index = "j"),
               matrix(rowSums((x %*% t(y)) / 2 + 1)), tolerance = 1e-12)
  expect_equal(sum(sqrt(sqdist(xi, yj) + 1) * -1, index = "j"),
               matrix(rowSums(-sqrt(d + 1))), tolerance = 1e-12)
  expect_equal(sum(log(1 + sqdist(xi, yj)), index = "j"), matrix(rowSums(log(1 + d))),
               tolerance = 1e-12)
  expect_equal(sum(xi * yj, index = "j"), x * matrix(colSums(y), 11, 3, byrow = TRUE),
               tolerance = 1e-12)
  expect_equal(sum(sum(xi * yj)^3, index = "j"), matrix(rowSums((x %*% t(y))^3)),
               tolerance = 1e-12)
})

test_that("min, argmin, Kmin, logsumexp and sumsoftmaxweight reduce as rkeops's do", {
  xi <- Vi(x)
  yj <- Vj(y)
  d <- sqdist_matrix(x, y)
  D <- sqdist(xi, yj)
  expect_equal(min(D, index = "j"), matrix(apply(d, 1, min)), tolerance = 1e-12)
  expect_equal(max(D, index = "i"), matrix(apply(d, 2, max)), tolerance = 1e-12)
  expect_equal(argmin(D, "j"), matrix(apply(d, 1, which.min) - 1))
  expect_equal(argmax(D, "j"), matrix(apply(d, 1, which.max) - 1))
  expect_equal(min_argmin(D, "j")$indices, matrix(apply(d, 1, which.min) - 1))
  expect_equal(max_argmax(D, "j")$values, matrix(apply(d, 1, max)), tolerance = 1e-12)
  expect_equal(Kmin(D, 3, "j"), t(apply(d, 1, function(r) sort(r)[1:3])), tolerance = 1e-12)
  expect_equal(argKmin(D, 3, "j"), t(apply(d, 1, function(r) order(r)[1:3] - 1)))
  expect_equal(Kmin_argKmin(D, 2, "i")$indices, t(apply(d, 2, function(r) order(r)[1:2] - 1)))
  expect_equal(logsumexp(-D, "j"), matrix(log(rowSums(exp(-d)))), tolerance = 1e-12)
  sw <- sumsoftmaxweight(-D, "j", Vj(b))
  expect_equal(sw, (exp(-d) %*% b) / rowSums(exp(-d)), tolerance = 1e-12)
})

test_that("base R still works where no LazyTensor is involved", {
  m <- matrix(1:4, 2)
  expect_equal(m %*% m, base::`%*%`(m, m))
  expect_equal(sum(1:3), 6)
})
