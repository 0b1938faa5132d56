# LazyTensor reductions take their index positionally or by name (rkeops 2's forms), against dense
# references; a bad index is an error naming the function, never a silent symbolic result.

x <- points(8, 3, 71)
y <- points(11, 3, 72)
b <- points(11, 2, 73)
bi <- points(8, 2, 74)
d <- sqdist_matrix(x, y)
D <- sqdist(Vi(x), Vj(y))

test_that("sum, min and max reduce with a positional index as with a named one", {
  K <- exp(-D)
  expect_equal(sum(K * Vj(b), "j"), exp(-d) %*% b, tolerance = 1e-12)
  expect_equal(sum(K * Vj(b), index = "j"), exp(-d) %*% b, tolerance = 1e-12)
  expect_equal(sum(K * Vi(bi), "i"), t(exp(-d)) %*% bi, tolerance = 1e-12)
  expect_equal(min(D, "j"), matrix(apply(d, 1, min)), tolerance = 1e-12)
  expect_equal(min(D, index = "i"), matrix(apply(d, 2, min)), tolerance = 1e-12)
  expect_equal(max(D, "i"), matrix(apply(d, 2, max)), tolerance = 1e-12)
})

test_that("every reduction function and its *_reduction spelling take the index both ways", {
  first <- function(m, f) t(apply(m, 1, f))
  ref <- list(
    argmin = matrix(apply(d, 1, which.min) - 1), argmax = matrix(apply(d, 1, which.max) - 1),
    kmin = first(d, function(r) sort(r)[1:2]), argk = first(d, function(r) order(r)[1:2] - 1),
    lse = matrix(log(rowSums(exp(-d)))), ssw = (exp(-d) %*% b) / rowSums(exp(-d))
  )
  expect_equal(argmin(D, "j"), ref$argmin)
  expect_equal(argmax(D, index = "j"), ref$argmax)
  expect_equal(min_argmin(D, index = "j")$indices, ref$argmin)
  expect_equal(max_argmax(D, "j")$indices, ref$argmax)
  expect_equal(Kmin(D, 2, index = "j"), ref$kmin, tolerance = 1e-12)
  expect_equal(argKmin(D, K = 2, "j"), ref$argk)
  expect_equal(Kmin_argKmin(D, 2, index = "j")$values, ref$kmin, tolerance = 1e-12)
  expect_equal(logsumexp(-D, index = "j"), ref$lse, tolerance = 1e-12)
  expect_equal(sumsoftmaxweight(-D, "j", Vj(b)), ref$ssw, tolerance = 1e-12)
  expect_equal(sumsoftmaxweight(-D, index = "j", weight = Vj(b)), ref$ssw, tolerance = 1e-12)
  expect_equal(sum_reduction(D, "j"), matrix(rowSums(d)), tolerance = 1e-12)
  expect_equal(min_reduction(D, index = "j"), matrix(apply(d, 1, min)), tolerance = 1e-12)
  expect_equal(max_reduction(D, "i"), matrix(apply(d, 2, max)), tolerance = 1e-12)
  expect_equal(argmin_reduction(D, "j"), ref$argmin)
  expect_equal(argmax_reduction(D, "j"), ref$argmax)
  expect_equal(min_argmin_reduction(D, "j")$indices, ref$argmin)
  expect_equal(max_argmax_reduction(D, "j")$indices, ref$argmax)
  expect_equal(Kmin_reduction(D, 2, "j"), ref$kmin, tolerance = 1e-12)
  expect_equal(argKmin_reduction(D, 2, "j"), ref$argk)
  expect_equal(Kmin_argKmin_reduction(D, 2, "j")$indices, ref$argk)
  expect_equal(logsumexp_reduction(-D, "j"), ref$lse, tolerance = 1e-12)
  expect_equal(sumsoftmaxweight_reduction(-D, "j", Vj(b)), ref$ssw, tolerance = 1e-12)
  expect_equal(reduction.LazyTensor(D, "ArgKMin", "j", 2), ref$argk)
  expect_equal(reduction.LazyTensor(-D, "SumSoftMaxWeight", "j", Vj(b)), ref$ssw,
               tolerance = 1e-12)
})

test_that("without an index sum, min, max, argmin and argmax are symbolic over the inner dim", {
  xi <- Vi(x)
  yj <- Vj(y)
  p <- x %*% t(y)
  expect_s3_class(sum(xi * yj), "LazyTensor")
  expect_equal(sum(sum(xi * yj), "j"), matrix(rowSums(p)), tolerance = 1e-12)
  expect_equal(sum(sum(xi * yj, index = NA), "j"), matrix(rowSums(p)), tolerance = 1e-12)
  prod3 <- function(f) outer(seq_len(8), seq_len(11), Vectorize(function(i, j) f(x[i, ] * y[j, ])))
  expect_equal(sum(min(xi * yj), "j"), matrix(rowSums(prod3(min))), tolerance = 1e-12)
  expect_equal(sum(max(xi * yj), "j"), matrix(rowSums(prod3(max))), tolerance = 1e-12)
  expect_equal(sum(argmin(xi * yj), "j"),
               matrix(rowSums(prod3(function(v) which.min(v) - 1))))
  expect_equal(sum(argmax(xi * yj), "j"),
               matrix(rowSums(prod3(function(v) which.max(v) - 1))))
})

test_that("a bad index names the function, the argument, what was expected and what was given", {
  fail <- function(expr, fn, got) {
    expect_error(expr, paste0("^", fn, ": argument 'index' must be \"i\" .*; got ", got, "$"),
                 class = "tessel_error")
  }
  fail(sum(Vi(x), "b"), "sum", "\"b\"")
  fail(sum(D, 3), "sum", "3")
  fail(min(D, c("i", "j")), "min", "c\\(\"i\", \"j\"\\) \\(character of length 2\\)")
  fail(max(D, index = "k"), "max", "\"k\"")
  fail(argmin(D, 1), "argmin", "1")
  fail(argmax(D, "x"), "argmax", "\"x\"")
  fail(min_argmin(D, NA), "min_argmin", "NA")
  fail(max_argmax(D, "b"), "max_argmax", "\"b\"")
  fail(Kmin(D, 2, NA), "Kmin", "NA")
  fail(argKmin(D, 2, 0), "argKmin", "0")
  fail(Kmin_argKmin(D, 2, c("j", "j")), "Kmin_argKmin", ".*length 2\\)")
  fail(logsumexp(D, "ij"), "logsumexp", "\"ij\"")
  fail(sumsoftmaxweight(D, Vj(b), "j"), "sumsoftmaxweight", "a LazyTensor")
  fail(sum_reduction(D, NA), "sum_reduction", "NA")
  fail(argKmin_reduction(D, 2, "b"), "argKmin_reduction", "\"b\"")
  fail(reduction.LazyTensor(D, "Sum", "b"), "reduction.LazyTensor", "\"b\"")
  expect_error(LazyTensor(x, c("i", "j")), paste0("LazyTensor: argument 'index' must be \"i\", ",
                                                   "\"j\" or NA .*; got c\\(\"i\", \"j\"\\)"),
               class = "tessel_error")
  expect_error(LazyTensor(x, 1), "LazyTensor: argument 'index' .*; got 1", class = "tessel_error")
  expect_error(Kmin(D, 0, "j"), "Kmin: argument 'K' must be a whole number >= 1; got 0",
               class = "tessel_error")
  expect_error(argKmin(D, "j", 2), "argKmin: argument 'K' must be .*; got \"j\"",
               class = "tessel_error")
  expect_error(sum(D, "j", "i"), "sum: takes one LazyTensor and one index",
               class = "tessel_error")
  expect_error(sum(D, axis = "j"), "sum: unknown argument\\(s\\) 'axis'", class = "tessel_error")
  expect_error(sumsoftmaxweight(D, "j"), "sumsoftmaxweight: argument 'weight' is missing",
               class = "tessel_error")
  expect_error(sum_reduction(x, "j"), "sum_reduction: argument 'x' must be a LazyTensor",
               class = "tessel_error")
})
